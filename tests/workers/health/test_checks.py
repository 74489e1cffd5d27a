"""The I/O checks against the real services: broker (every broker), database, judge."""

from __future__ import annotations

import time

import pytest

from evalfleet.core.errors import BrokerUnavailable
from evalfleet.core.message import new_job
from evalfleet.core.sample import parse_sample
from evalfleet.core.settings import Settings
from evalfleet.judgesim import RunningSim
from producers.enqueuer import Enqueuer
from tests.brokers import EVERY_BROKER
from workers.health.checks import DatabaseProbe, broker_probe, judge_probe, run_checks
from workers.health.readiness import CheckResult


@EVERY_BROKER
def test_the_broker_probe_reads_queue_depths(settings: Settings) -> None:
    enqueuer = Enqueuer(settings)
    for n in range(3):
        enqueuer.send(new_job("rag_qa", parse_sample({"id": f"s{n}", "input": "q",
                                                      "output": "a"})))
    enqueuer.close()
    probe = broker_probe(settings)
    assert probe.depths(["eval.rag_qa", "eval.never_declared"]) == {
        "eval.rag_qa": 3, "eval.never_declared": 0}
    assert probe.check() == CheckResult.passed("broker")


@pytest.mark.parametrize("url", ["redis://:s3cret@127.0.0.1:1/0",
                                 "amqp://guest:s3cret@127.0.0.1:1//"])
def test_an_unreachable_broker_fails_fast_without_its_password(
    settings: Settings, url: str,
) -> None:
    probe = broker_probe(settings.model_copy(update={"broker_url": url,
                                                     "readiness_timeout_s": 1}))
    started = time.monotonic()
    result = probe.check()
    assert not result.ok and not result.reachable
    assert "s3cret" not in result.detail
    with pytest.raises(BrokerUnavailable):
        probe.depths(["eval.rag_qa"])
    assert time.monotonic() - started < 10


def test_the_database_probe(database_url: str) -> None:
    assert DatabaseProbe(database_url, timeout_s=2).check().ok
    down = DatabaseProbe("postgresql+psycopg://postgres@127.0.0.1:1/evalfleet", timeout_s=1)
    result = down.check()
    assert not result.ok and not result.reachable and "OperationalError" in result.detail


def test_the_judge_probe(settings: Settings, sim: RunningSim) -> None:
    assert judge_probe(settings).check() == CheckResult.passed("judge", "HTTP 200")
    custom = settings.model_copy(update={"judge_probe_url": f"{sim.base_url}/nope"})
    assert judge_probe(custom).check().detail == "HTTP 404"  # up, no such route: still up
    down = settings.model_copy(update={"openai_base_url": "http://127.0.0.1:1/v1"})
    result = judge_probe(down).check()
    assert not result.ok and not result.reachable


def test_checks_run_together_and_a_slow_one_times_out() -> None:
    def slow() -> CheckResult:
        time.sleep(5)
        return CheckResult.passed("slow")

    def broken() -> CheckResult:
        raise RuntimeError("bug")

    started = time.monotonic()
    results = run_checks([("fast", lambda: CheckResult.passed("fast")), ("slow", slow),
                          ("other-slow", slow), ("broken", broken)], timeout_s=0.5)
    assert time.monotonic() - started < 1.5
    assert [(r.name, r.ok) for r in results] == [("fast", True), ("slow", False),
                                                ("other-slow", False), ("broken", False)]
    assert "within 0.5 s" in results[1].detail and "RuntimeError" in results[3].detail
