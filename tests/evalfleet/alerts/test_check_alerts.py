"""An alert on a check's score: its failure rate is a proportion, and a rising one fires.

The verdicts are stored by the worker's evaluator from samples whose answers leak a key
more and more often, as a fleet would store them; the alert engine runs on the same
database at chosen times, as ``evalfleet alerts check --at`` does.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from evalfleet.alerts import AlertEngine
from evalfleet.cli.ui import build_ui_app
from evalfleet.core.message import new_job
from evalfleet.core.metric import load_registry
from evalfleet.core.sample import Sample
from evalfleet.core.scales import score_kind
from evalfleet.core.settings import Settings
from evalfleet.judgesim import RunningSim
from evalfleet.store import open_store
from tests.evalfleet.alerts.conftest import write_rules
from tests.evalfleet.alerts.receiver import Receiver
from tests.helpers import evaluator_options
from workers.evaluation import Evaluator
from workers.judge import AsyncHttpJudge, JudgeFleet

T0 = datetime(2026, 11, 21, 12, 0, tzinfo=UTC)
MINUTE = timedelta(minutes=1)

LEAKS_METRIC = """\
name: leaks
kind: check
checks:
  no_api_key: {check: never_matches, pattern: 'sk-[A-Za-z0-9]{20,}'}
"""

RULE = {"name": "key_leaks", "metric": "leaks", "score": "no_api_key", "window": "10m",
        "interval": "1m", "min_samples": 30, "min_effect": 0.05, "mode": "baseline",
        "baseline": {"type": "trailing", "window": "2h", "gap": "10m"}, "for": 3}


@pytest.fixture
def metrics_dir(tmp_path: Path) -> Path:
    folder = tmp_path / "metrics"
    folder.mkdir()
    (folder / "leaks.yaml").write_text(LEAKS_METRIC)
    return folder


@pytest.fixture
def evaluator(database_url: str, metrics_dir: Path, sim: RunningSim) -> Iterator[Evaluator]:
    store = open_store(database_url)
    judge = JudgeFleet(AsyncHttpJudge(base_url=sim.base_url, api_key=None, timeout_s=5,
                                      max_connections=2), concurrency=2)
    yield Evaluator(registry=load_registry(metrics_dir), store=store, judge=judge,
                    options=evaluator_options(judge_model="judge-sim"))
    judge.close()
    store.close()


def store_traffic(evaluator: Evaluator, *, start: datetime, minutes: int,
                  leak_every: Callable[[int], int]) -> None:
    """20 answers a minute from ``start``; answer ``n`` leaks a key when ``leak_every(n)``
    divides ``n``."""
    jobs = []
    for n in range(minutes * 20):
        leaks = n % leak_every(n) == 0
        output = "Your key is sk-" + "a" * 24 if leaks else "Your key is in the settings."
        jobs.append(new_job("leaks", Sample(
            id=f"{start:%H%M}-{n}", output=output, timestamp=start + n * MINUTE / 20,
            attributes={"app": "support-bot"})))
    for first in range(0, len(jobs), 100):
        outcomes = evaluator.run_batch(jobs[first:first + 100], owner=f"{start}-{first}")
        assert {outcome.kind for outcome in outcomes} == {"stored"}


def rising_failure_rate(evaluator: Evaluator, engine: AlertEngine) -> list[Any]:
    """Store 150 minutes with 2% of answers leaking a key, then 15 with 25%, and run
    ``engine`` each minute from 5 minutes before the rise; its reports."""
    store_traffic(evaluator, start=T0 - 150 * MINUTE, minutes=150, leak_every=lambda n: 50)
    store_traffic(evaluator, start=T0, minutes=15, leak_every=lambda n: 4)
    return [engine.check(at=T0 - 5 * MINUTE + i * MINUTE) for i in range(16)]


def test_a_checks_rising_failure_rate_fires_its_alert(
    open_engine: Callable[..., AlertEngine], receiver: Receiver, evaluator: Evaluator,
    metrics_dir: Path, sim: RunningSim,
) -> None:
    assert score_kind(evaluator.registry.get("leaks"), "no_api_key") == "binary"
    reports = rising_failure_rate(evaluator, open_engine(RULE, metrics_dir=metrics_dir))
    fired = [report.at for report in reports for _, segment, event in report.events
             if event == "firing" and segment == "(all)"]
    assert fired and T0 < fired[0] <= T0 + 10 * MINUTE
    (alert,) = receiver.alerts()
    assert alert["labels"]["alertname"] == "key_leaks"
    assert alert["labels"]["metric"] == "leaks" and alert["labels"]["score"] == "no_api_key"
    assert float(alert["annotations"]["window_mean"]) < 0.9
    assert float(alert["annotations"]["baseline_mean"]) > 0.95
    assert alert["annotations"]["score_kind"] == "binary"
    assert sim.stats()["requests"] == 0
    assert alert["annotations"]["baseline_test"] == "two_proportion_z"


def test_the_pages_show_a_checks_reason_and_no_correction(
    open_engine: Callable[..., AlertEngine], evaluator: Evaluator, metrics_dir: Path,
    database_url: str, tmp_path: Path,
) -> None:
    rising_failure_rate(evaluator, open_engine(RULE, metrics_dir=metrics_dir))
    settings = Settings(database_url=database_url, metrics_dir=metrics_dir,
                        alert_rules_file=write_rules(tmp_path / "page-rules.yaml", RULE))
    with TestClient(build_ui_app(settings, token=None)) as client:
        alert = client.get("/alerts/key_leaks", params={"segment": "(all)"})
        assert alert.status_code == 200, alert.text
        assert "What the check says" in alert.text and 'id="check-no-correction"' in alert.text
        assert "corrected-mean" not in alert.text  # no correction shown for a check
        reasons = re.findall(r'<p><b>(\w+)</b> <span class="text reason">([^<]*)</span>',
                             alert.text)
        assert reasons and {by for by, _ in reasons} == {"check"}
        assert any(reason.startswith("the pattern ") for _, reason in reasons), reasons
        verdict_id = re.findall(r'href="/verdicts/(\d+)"', alert.text)[0]
        page = client.get(f"/verdicts/{verdict_id}")
    assert page.status_code == 200
    assert "The check&#39;s reason" in page.text and "No judge was called" in page.text
    assert re.search(r'<pre class="text" id="reason">the pattern [^<]+ matches at offset \d+',
                     page.text), page.text
    assert "raw-output" not in page.text and "check:no_api_key" in page.text
