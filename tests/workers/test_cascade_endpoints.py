"""A cascade whose tiers sit on two servers: the small judge on a local server of its own
(named endpoint, its own key), the large one on the fleet's judge. Through a real worker
and two judge simulators on different ports: each tier's calls reach its own server, the
verdicts say which endpoint answered, and a tier naming an endpoint the settings lack
keeps the worker from starting. Through the evaluator: a failing local server opens its
own circuit, never the fleet's judge's, and its jobs escalate."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from evalfleet.core.cascade import metric_cascade_identity
from evalfleet.core.endpoint import JudgeEndpoint
from evalfleet.core.errors import InvalidMetricSpec
from evalfleet.core.message import new_job
from evalfleet.core.metric import load_registry
from evalfleet.core.sample import parse_sample
from evalfleet.core.settings import Settings
from evalfleet.judgesim import RunningSim, SimConfig, start_in_thread
from evalfleet.store import SqlStore
from evalfleet.store.queries.cascade import ThresholdBook
from tests.helpers import WorkerProcess, cascade_metrics, evaluator_options, wait_until
from tests.test_fleet import cli, export, write_jsonl
from workers.breaker import CircuitBreaker
from workers.cascade import ThresholdCache
from workers.evaluation import Evaluator
from workers.judge import AsyncHttpJudge, JudgeFleet
from workers.judge.fleet import Endpoint
from workers.judge.gate import Breaker
from workers.runtime import check_endpoints

#: The small tier on the endpoint named ``local``; the large one on the fleet's judge.
TIERS = ("  cascade:\n    - {model: small, endpoint: local, top_logprobs: 5}\n"
         "    - {model: large}\n")

#: The local server's key, read by the worker from this variable.
KEY_VARIABLE = "LOCAL_JUDGE_KEY"


@pytest.fixture
def local_sim() -> Iterator[RunningSim]:
    """A second simulator, on its own port, that wants a key: the team's own server."""
    local = start_in_thread(SimConfig.build({
        "latency_ms": 5, "api_key": "local-secret", "system_fingerprint": "local-box",
        "judge_profiles": {"small": {"error_rate": 0.1}}}))
    yield local
    local.stop()


def test_each_tier_is_asked_on_its_own_server(
    settings: Settings, sim: RunningSim, local_sim: RunningSim, store: SqlStore,
    start_worker: Callable[..., WorkerProcess], tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    metrics_dir = cascade_metrics(tmp_path / "metrics", TIERS)
    monkeypatch.setenv(KEY_VARIABLE, "local-secret")
    settings = settings.model_copy(update={
        "metrics_dir": metrics_dir,
        "judge_endpoints": {"local": JudgeEndpoint(base_url=local_sim.base_url,
                                                   api_key_env=KEY_VARIABLE)}})
    sim.configure(system_fingerprint="hosted",
                  judge_profiles={"large": {"error_rate": 0.02}})
    metric = load_registry(metrics_dir).get("bbh_match")
    ThresholdBook(store).save(metric="bbh_match", identity=metric_cascade_identity(metric),
                              thresholds=[0.85, None], report={}, now=datetime.now(UTC))
    samples = [{"id": f"ep-{n}", "input": f"Is {n} even?", "output": str(n % 2 == 0),
                "reference": str(n % 2 == 0)} for n in range(30)]
    assert cli(settings, "produce", str(write_jsonl(tmp_path / "s.jsonl", samples)),
               "--metric", "bbh_match").exit_code == 0
    start_worker(settings, queues=["bbh_match"], concurrency=4)
    wait_until(lambda: store.counts().verdicts == 30, timeout_s=120, what="30 verdicts")

    rows = export(settings, "--metric", "bbh_match")
    small = [row for row in rows if row["settled_model"] == "small"]
    large = [row for row in rows if row["settled_model"] == "large"]
    assert small and large and len(small) + len(large) == 30
    # Every job asked the small tier on the local server (with its key: a refused call
    # would have settled nothing there), and only the escalated ones the fleet's judge.
    assert local_sim.stats()["requests"] == 30
    assert local_sim.stats()["by_status"] == {"200": 30}
    assert sim.stats()["requests"] == len(large)
    for row in rows:
        tried = row["cascade"]["tried"]
        assert (tried[0]["model"], tried[0]["endpoint"]) == ("small", "local")
        if row["settled_model"] == "large":
            assert (tried[1]["model"], tried[1]["endpoint"]) == ("large", None)
        # The kept reply came from the server of the tier that settled it.
        assert row["judge_fingerprint"] == ("local-box" if row in small else "hosted")
    # The endpoint is no part of the verdict key: the model and the metric file are.
    assert {row["judge_model"] for row in rows} == {metric_cascade_identity(metric)}


def test_a_tier_naming_an_unknown_endpoint_keeps_the_worker_from_starting(
        settings: Settings, tmp_path: Path) -> None:
    metrics_dir = cascade_metrics(tmp_path / "metrics", TIERS)
    with pytest.raises(InvalidMetricSpec, match=r"cascade\[1\] names endpoint 'local'.*"
                                                r"defined: none"):
        check_endpoints(load_registry(metrics_dir), settings)


def test_endpoint_names_and_keys_are_checked_and_masked(
        settings: Settings, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ValueError, match="judge endpoint name 'Local Box'"):
        Settings.model_validate({**settings.model_dump(),
                                 "judge_endpoints": {"Local Box": {"base_url": "http://x"}}})
    monkeypatch.setenv(KEY_VARIABLE, "hidden-key")
    named = Settings.model_validate({**settings.model_dump(), "judge_endpoints": {
        "local": {"base_url": "http://u:pw@127.0.0.1:9/v1", "api_key_env": KEY_VARIABLE}}})
    assert {"hidden-key", "pw"} <= set(named.secret_values())
    assert "hidden-key" not in repr(named)


def test_a_failing_local_server_opens_its_own_circuit_and_its_jobs_escalate(
        store: SqlStore, sim: RunningSim, local_sim: RunningSim, tmp_path: Path) -> None:
    metrics_dir = cascade_metrics(tmp_path / "metrics", TIERS)
    metric = load_registry(metrics_dir).get("bbh_match")
    ThresholdBook(store).save(metric="bbh_match", identity=metric_cascade_identity(metric),
                              thresholds=[0.0, None], report={}, now=datetime.now(UTC))
    local_sim.configure(server_error_rate=1.0, api_key=None)
    local = Endpoint(AsyncHttpJudge(base_url=local_sim.base_url, api_key=None, timeout_s=5,
                                    max_connections=2),
                     breaker=CircuitBreaker(failure_threshold=3, open_s=600))
    fleet = JudgeFleet(AsyncHttpJudge(base_url=sim.base_url, api_key=None, timeout_s=5,
                                      max_connections=2), concurrency=2,
                       endpoints={"local": local})
    try:
        evaluator = Evaluator(registry=load_registry(metrics_dir), store=store, judge=fleet,
                              options=evaluator_options(judge_model="judge-sim"),
                              thresholds=ThresholdCache(ThresholdBook(store).latest, ttl_s=0))
        for n in range(8):  # one job a delivery: the breaker sees each failure in turn
            job = new_job("bbh_match", parse_sample({
                "id": f"down-{n}", "input": f"Is {n} even?", "output": "True",
                "reference": str(n % 2 == 0)}))
            assert [o.kind for o in evaluator.run_batch([job], owner=f"m{n}")] == ["stored"]
    finally:
        fleet.close()
    records = list(store.iter_verdicts())
    assert len(records) == 8
    for record in records:  # every job settled by the fleet's judge, none lost or retried
        assert record.cascade is not None and record.cascade["model"] == "large"
        small = record.cascade["tried"][0]
        assert (small["endpoint"], small["error_class"]) == ("local", "judge_unavailable")
    # Three 500s opened the local circuit: the rest were never sent there; the fleet's
    # judge, behind its own breaker, answered all eight.
    assert local_sim.stats()["requests"] == 3
    assert sim.stats()["requests"] == 8
    assert local.breaker is not None and local.breaker.state == "open"
    (own,) = [layer for layer in fleet.layers if isinstance(layer, Breaker)]
    assert own.breaker.state == "closed"
