"""evalfleet's alerts through a real Alertmanager running the shipped config.

A faithfulness drop in one app goes through ``evalfleet produce``, a worker and the judge
simulator, then ``evalfleet alerts check``; the alert must be active in Alertmanager
(API v2) with the documented labels and annotations, Alertmanager must page once (its own
webhook, to a receiver served here) for the segment while the whole-traffic alert is
inhibited, and the recovery must resolve it. The same notifications reach evalfleet's
direct ``webhook`` receiver, whose signature is checked here with hmac from the
standard library.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import subprocess
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner, Result

from evalfleet.cli import main
from evalfleet.core.settings import Settings
from evalfleet.store import VerdictStore
from tests.evalfleet.alerts.conftest import write_rules
from tests.evalfleet.alerts.receiver import Received, Receiver
from tests.helpers import WorkerProcess, wait_until
from tests.ops.dashboard import ROOT
from tests.ops.servers import Alertmanager, binary
from tests.ops.traffic import traffic, write_jsonl

pytestmark = pytest.mark.timeout(240)

SECRET = "webhook-secret"
RULE = "faithfulness_drop"


@pytest.fixture
def pager() -> Iterator[Receiver]:
    """Where Alertmanager's webhook and evalfleet's direct webhook deliver."""
    server = Receiver()
    yield server
    server.stop()


@pytest.fixture
def alertmanager(pager: Receiver, tmp_path: Path) -> Iterator[Alertmanager]:
    """The shipped config with the pager's URL. Its group_wait (30 s) is kept: evalfleet
    posts each alert of a cycle on its own, and the group must wait for all of them;
    group_interval is cut to 1 s so the resolved page follows at once."""
    config = yaml.safe_load((ROOT / "ops" / "alertmanager" / "alertmanager.yml").read_text())
    config["route"].update(group_interval="1s")
    for receiver in config["receivers"]:
        for hook in receiver["webhook_configs"]:
            hook["url"] = f"{pager.url}/page"
    path = tmp_path / "alertmanager.yml"
    path.write_text(yaml.safe_dump(config))
    server = Alertmanager(tmp_path / "alertmanager", config=path)
    yield server
    server.stop()


def wait_for_clock(moment: datetime) -> None:
    """Block until the wall clock has passed ``moment`` (a few seconds ahead at most)."""
    wait_until(lambda: datetime.now(UTC) > moment, timeout_s=60, what=f"the clock at {moment}")


def cli(settings: Settings, *args: str) -> Result:
    return CliRunner().invoke(main, list(args), env=settings.as_environment(),
                              catch_exceptions=False)


def produce_and_judge(settings: Settings, samples: list[dict[str, Any]], *,
                      store: VerdictStore, path: Path) -> None:
    """Enqueue ``samples`` with ``evalfleet produce``; wait until all are judged."""
    before = store.counts().verdicts
    assert cli(settings, "produce", str(write_jsonl(path, samples)), "--metric",
               "rag_qa").exit_code == 0
    wait_until(lambda: store.counts().verdicts == before + len(samples), timeout_s=90,
               what=f"{len(samples)} verdicts")


def signed_correctly(request: Received) -> bool:
    """The receiver's own check: HMAC-SHA256 of ``<timestamp>.<body>`` with the secret."""
    timestamp = request.headers["x-evalfleet-timestamp"]
    expected = hmac.new(SECRET.encode(), f"{timestamp}.".encode() + request.body,
                        hashlib.sha256).hexdigest()
    return hmac.compare_digest(request.headers["x-evalfleet-signature"], f"sha256={expected}")


def pages(pager: Receiver, status: str) -> list[dict[str, Any]]:
    return [r.json for r in pager.accepted if r.path == "/page" and r.json["status"] == status]


def hooks(pager: Receiver) -> list[Received]:
    return [r for r in pager.accepted if r.path == "/hook"]


def ours(alertmanager: Alertmanager) -> list[dict[str, Any]]:
    return [a for a in alertmanager.alerts() if a["labels"]["alertname"] == RULE]


def test_a_drop_pages_once_through_alertmanager_and_recovery_resolves_it(
    settings: Settings, start_worker: Callable[..., WorkerProcess], store: VerdictStore,
    alertmanager: Alertmanager, pager: Receiver, tmp_path: Path,
) -> None:
    # Alertmanager pages a group at once when its first alert started over group_wait
    # (30 s) ago, so the drop is evaluated at about the real time, as the beat does:
    # the history is judged first, then the recent traffic, stamped from a moment just
    # ahead. 10 s windows and interval keep the test short.
    start = datetime.now(UTC)
    history = [sample for seed, app in enumerate(("support-bot", "docs-search"))
               for sample in traffic(app, count=100, start=start - timedelta(hours=2),
                                     minutes=100, mean=0.85, seed=10 + seed)]
    rules = write_rules(tmp_path / "rules.yaml", {
        "name": RULE, "segment_by": ["app"], "window": "10s", "interval": "10s",
        "min_samples": 20, "min_effect": 0.05, "mode": "baseline",
        "baseline": {"type": "trailing", "window": "2h", "gap": "0s"}, "for": 1,
        "recovery": {"for": 1, "margin": 0.02}, "severity": "page",
        "labels": {"team": "support"},
        "annotations": {"summary": "faithfulness of {segment} is {mean}",
                        "runbook": "https://runbooks.example/faithfulness"},
        "receivers": ["alertmanager", "hook"]},
        receivers={"hook": {"type": "webhook", "url": f"{pager.url}/hook"}})
    alerting = settings.model_copy(update={
        "alert_rules_file": rules, "alertmanager_url": alertmanager.url,
        "alert_webhook_secret": SECRET, "alert_retry_base_s": 0.05, "alert_retry_max_s": 0.2,
    })
    start_worker(settings, queues=["rag_qa"], concurrency=16)
    produce_and_judge(alerting, history, store=store, path=tmp_path / "history.jsonl")

    now = datetime.now(UTC)
    fired_at, recovered_at = now + timedelta(seconds=10), now + timedelta(seconds=25)
    recent = []
    for seed, app in enumerate(("support-bot", "docs-search")):
        recent += traffic(app, count=30, start=fired_at - timedelta(seconds=9), minutes=0.13,
                          mean=0.55 if app == "support-bot" else 0.85, seed=20 + seed)
        recent += traffic(app, count=30, start=recovered_at - timedelta(seconds=9),
                          minutes=0.13, mean=0.85, seed=30 + seed)
    produce_and_judge(alerting, recent, store=store, path=tmp_path / "recent.jsonl")
    wait_for_clock(fired_at)
    assert datetime.now(UTC) < fired_at + timedelta(seconds=20), "judging took too long"
    fired = cli(alerting, "alerts", "check", "--at", fired_at.isoformat())
    assert fired.exit_code == 1, fired.output
    assert "notifications delivered: alertmanager 2" in fired.output
    wait_until(lambda: len(ours(alertmanager)) == 2, timeout_s=30, what="two alerts in AM")
    by_app = {a["labels"].get("app", ""): a for a in ours(alertmanager)}
    segment, whole = by_app["support-bot"], by_app[""]
    assert segment["labels"] == {"alertname": RULE, "metric": "rag_qa",
                                 "score": "faithfulness", "severity": "page",
                                 "team": "support", "app": "support-bot"}
    assert segment["status"]["state"] == "active"
    annotations = segment["annotations"]
    assert annotations["summary"].startswith("faithfulness of app=support-bot is 0.5")
    assert annotations["runbook_url"] == "https://runbooks.example/faithfulness"
    assert annotations["segment"] == "app=support-bot"
    assert float(annotations["window_mean"]) < 0.65 < 0.8 < float(annotations["baseline_mean"])
    assert float(annotations["baseline_q_value"]) < 0.01
    assert segment["startsAt"].startswith(fired_at.strftime("%Y-%m-%dT%H:%M:%S"))
    # Inhibited by the segment's alert: the same incident does not page twice.
    assert whole["status"]["state"] == "suppressed"
    assert whole["status"]["inhibitedBy"] == [segment["fingerprint"]]

    queried = subprocess.run([binary("amtool"), "alert", "query", "-o", "json",
                              f"--alertmanager.url={alertmanager.url}", f"alertname={RULE}"],
                             capture_output=True, text=True, timeout=60, check=False)
    assert queried.returncode == 0, queried.stderr
    assert [a["labels"].get("app") for a in json.loads(queried.stdout)] == ["support-bot"]

    wait_until(lambda: pages(pager, "firing"), timeout_s=60, what="Alertmanager's page")
    page = pages(pager, "firing")[0]
    assert page["version"] == "4"
    assert page["groupLabels"] == {"alertname": RULE, "metric": "rag_qa",
                                   "score": "faithfulness"}
    assert [a["labels"].get("app") for a in page["alerts"]] == ["support-bot"]

    wait_until(lambda: len(hooks(pager)) >= 1, timeout_s=30, what="the direct webhook")
    assert all(signed_correctly(request) for request in hooks(pager))
    tampered = hooks(pager)[0]
    assert not signed_correctly(Received(tampered.path, tampered.headers,
                                         tampered.body.replace(b'"firing"', b'"resolved"'),
                                         tampered.status))
    direct = [alert for request in hooks(pager) for alert in request.json["alerts"]]
    assert {alert["labels"].get("app", "") for alert in direct} == {"support-bot", ""}
    assert {alert["status"] for alert in direct} == {"firing"}

    wait_for_clock(recovered_at)
    recovered = cli(alerting, "alerts", "check", "--at", recovered_at.isoformat())
    assert recovered.exit_code == 0, recovered.output
    wait_until(lambda: not ours(alertmanager), timeout_s=30, what="the alerts resolved in AM")
    wait_until(lambda: pages(pager, "resolved"), timeout_s=30, what="the resolved page")
    resolved = pages(pager, "resolved")[0]
    assert {a["status"] for a in resolved["alerts"]} == {"resolved"}
    assert len(pages(pager, "firing")) == 1  # one incident, one page
    wait_until(lambda: any(a["status"] == "resolved" for request in hooks(pager)
                           for a in request.json["alerts"]),
               timeout_s=30, what="the resolved webhook")
    assert all(signed_correctly(request) for request in hooks(pager))
