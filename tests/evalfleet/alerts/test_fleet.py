"""Alerts through the whole fleet, as a new user would run it.

Samples go in through ``evalfleet produce``; a real ``evalfleet worker`` has the
judge simulator score them (a ``[[judge-sim faithfulness=X]]`` directive in each
sample scripts its score); ``evalfleet alerts check --at`` then evaluates the
default-shaped rules and delivers to an Alertmanager-compatible receiver.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
from click.testing import CliRunner

from evalfleet.cli import main
from evalfleet.core.settings import Settings
from evalfleet.store import VerdictStore
from tests.evalfleet.alerts.conftest import write_rules
from tests.evalfleet.alerts.receiver import Receiver
from tests.helpers import WorkerProcess, wait_until

NOW = datetime.now(UTC).replace(second=0, microsecond=0)


def sample(n: int, *, app: str, at: datetime, faithfulness: float,
           batch: int) -> dict[str, Any]:
    return {
        "id": f"{app}-{batch}-{n}", "timestamp": at.isoformat(),
        "input": f"Question {n} [[judge-sim faithfulness={faithfulness:.3f}]]",
        "output": f"Answer {n}", "context": ["Some retrieved text."],
        "attributes": {"app": app, "prompt_version": "v12"},
    }


def traffic(app: str, *, count: int, start: datetime, minutes: float, mean: float,
            seed: int) -> list[dict[str, Any]]:
    rng = np.random.default_rng(seed)
    step = timedelta(minutes=minutes / count)
    return [sample(n, app=app, at=start + n * step, batch=seed,
                   faithfulness=float(np.clip(rng.normal(mean, 0.08), 0, 1)))
            for n in range(count)]


def cli(settings: Settings, *args: str) -> Any:
    return CliRunner().invoke(main, list(args), env=settings.as_environment(),
                              catch_exceptions=False)


def test_a_real_drop_fed_through_the_fleet_is_delivered_once_and_a_steady_app_stays_quiet(
    settings: Settings, start_worker: Callable[..., WorkerProcess], store: VerdictStore,
    receiver: Receiver, tmp_path: Path,
) -> None:
    history_start = NOW - timedelta(hours=2)
    samples = (
        traffic("support-bot", count=120, start=history_start, minutes=110, mean=0.85, seed=1)
        + traffic("docs-search", count=120, start=history_start, minutes=110, mean=0.85, seed=2)
        + traffic("support-bot", count=40, start=NOW - timedelta(minutes=10), minutes=10,
                  mean=0.65, seed=3)
        + traffic("docs-search", count=40, start=NOW - timedelta(minutes=10), minutes=10,
                  mean=0.85, seed=4)
    )
    path = tmp_path / "traffic.jsonl"
    path.write_text("".join(json.dumps(s) + "\n" for s in samples))
    rules = write_rules(tmp_path / "rules.yaml", {
        "name": "faithfulness_drop", "segment_by": ["app"], "window": "10m", "interval": "1m",
        "min_samples": 20, "min_effect": 0.05, "mode": "both", "threshold": 0.5,
        "baseline": {"type": "trailing", "window": "2h", "gap": "0s"}, "for": 1,
        "severity": "page", "annotations": {"summary": "faithfulness of {segment} is {mean}"},
    })
    alerting = settings.model_copy(update={"alert_rules_file": rules,
                                           "alertmanager_url": receiver.url})
    assert cli(alerting, "produce", str(path), "--metric", "rag_qa").exit_code == 0
    start_worker(settings, queues=["rag_qa"], concurrency=16)
    wait_until(lambda: store.counts().verdicts == len(samples), timeout_s=60,
               what="every verdict")

    first = cli(alerting, "alerts", "check", "--at", NOW.isoformat())
    assert first.exit_code == 1, first.output  # something fires
    states = {line.split()[1]: line.split()[3] for line in first.output.splitlines()[2:]
              if line.startswith("faithfulness_drop")}
    assert states == {"(all)": "firing", "app=support-bot": "firing", "app=docs-search": "ok"}
    later = cli(alerting, "alerts", "check", "--at", (NOW + timedelta(minutes=1)).isoformat())
    assert "notifications delivered" not in later.output  # still firing: nothing new to say

    alerts = receiver.alerts()
    assert sorted(a["labels"].get("app", "") for a in alerts) == ["", "support-bot"]
    bot = next(a for a in alerts if a["labels"].get("app") == "support-bot")
    assert bot["labels"]["alertname"] == "faithfulness_drop"
    assert bot["labels"]["severity"] == "page"
    assert bot["annotations"]["summary"].startswith("faithfulness of app=support-bot is 0.6")
    assert float(bot["annotations"]["baseline_mean"]) > 0.8
    assert float(bot["annotations"]["baseline_q_value"]) < 1e-6
