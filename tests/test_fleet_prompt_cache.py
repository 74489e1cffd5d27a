"""Prompt caching end to end: a real worker judges one metric's samples against the
simulator, which reports the repeated prefix as cached tokens; verdicts store them and
their cost takes the cached share at the cached price."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from evalfleet.core.metric import load_registry
from evalfleet.core.settings import Settings
from evalfleet.judgesim import RunningSim
from tests.helpers import WorkerProcess, wait_until
from tests.test_fleet import cli, export, write_jsonl

#: Per million tokens: input, cached input (half off), output.
INPUT, CACHED, OUTPUT = 0.15, 0.075, 0.60

#: Samples judged per phase.
SAMPLES = 12


def samples(prefix: str) -> list[dict[str, Any]]:
    return [{"id": f"{prefix}-{n:02d}", "input": f"Which plan includes feature {n}?",
             "output": f"The Business plan includes feature {n}.",
             "reference": f"Only the Business plan has feature {n}.",
             "context": [f"Business plan: feature {n}, phone support."]} for n in range(SAMPLES)]


def judge(settings: Settings, tmp_path: Path, prefix: str) -> list[dict[str, Any]]:
    """Produce the phase's samples for context_precision and wait for their verdicts."""
    path = write_jsonl(tmp_path / f"{prefix}.jsonl", samples(prefix))
    result = cli(settings, "produce", str(path), "--metric", "context_precision")
    assert result.exit_code == 0, result.output
    wait_until(lambda: sum(v["sample_id"].startswith(prefix) for v in export(settings))
               == SAMPLES, timeout_s=60, what=f"{SAMPLES} verdicts of {prefix}")
    return [v for v in export(settings) if v["sample_id"].startswith(prefix)]


def expected_cost(verdict: dict[str, Any]) -> float:
    cached = verdict["cached_tokens"] or 0
    return ((verdict["prompt_tokens"] - cached) * INPUT + cached * CACHED
            + verdict["completion_tokens"] * OUTPUT) / 1e6


@pytest.fixture
def priced(settings: Settings) -> Settings:
    return settings.model_copy(update={"judge_model": "judge-sim", "model_prices": Settings(
        model_prices={"judge-sim": {"input": INPUT, "cached_input": CACHED, "output": OUTPUT}},
    ).judge.model_prices})


def test_later_verdicts_of_a_metric_store_cached_tokens_at_the_cached_price(
    priced: Settings, sim: RunningSim, start_worker: Callable[..., WorkerProcess],
    tmp_path: Path,
) -> None:
    version = load_registry().get("context_precision").version
    start_worker(priced, queues=["context_precision"], concurrency=4)
    cached_run = judge(priced, tmp_path, "cached")
    sim.configure(prompt_cache=False)  # the same judge, reporting no cache: full price
    plain_run = judge(priced, tmp_path, "plain")
    for verdict in cached_run + plain_run:
        assert verdict["status"] == "ok", verdict
        assert verdict["cost_usd"] == pytest.approx(expected_cost(verdict))
    hits = [v for v in cached_run if v["cached_tokens"]]
    # Every sample's request is served after the first's: only the first misses.
    assert len(hits) >= SAMPLES - 1 and all(v["cached_tokens"] is not None for v in cached_run)
    assert all(v["cached_tokens"] >= 1024 and v["cached_tokens"] % 128 == 0 for v in hits)
    assert all(v["cached_tokens"] is None for v in plain_run)
    share = sum(v["cached_tokens"] for v in hits) / sum(v["prompt_tokens"] for v in cached_run)
    per_verdict = {name: sum(v["cost_usd"] for v in run) / SAMPLES
                   for name, run in (("cached", cached_run), ("plain", plain_run))}
    print(f"\ncached share {share:.1%}; cost per verdict ${per_verdict['cached']:.7f} with the "
          f"prompt cache, ${per_verdict['plain']:.7f} without "
          f"({1 - per_verdict['cached'] / per_verdict['plain']:.1%} less)")
    assert per_verdict["cached"] < per_verdict["plain"]
    assert sim.stats()["by_prompt_cache_key"] == {
        f"evalfleet:context_precision:{version}": 2 * SAMPLES}
    status = cli(priced, "status", "--json", "--sample", "0", "--window", "1h",
                 "--metric", "context_precision")
    assert status.exit_code == 0, status.output
    (queue,) = json.loads(status.stdout)["queues"]
    assert queue["cached_prompt_share"] == pytest.approx(share)


def test_a_judge_that_refuses_prompt_cache_key_loses_no_job(
    priced: Settings, sim: RunningSim, start_worker: Callable[..., WorkerProcess],
    tmp_path: Path,
) -> None:
    sim.configure(refused_parameters=["prompt_cache_key"], server_style="llama_cpp_python")
    start_worker(priced, queues=["context_precision"], concurrency=4)
    verdicts = judge(priced, tmp_path, "refused")
    assert all(v["status"] == "ok" and v["attempts"] == 1 for v in verdicts)
    stats = sim.stats()
    # Sent with the key until the first refusal came back, never again after it.
    refused = stats["by_outcome"]["parameter_refused"]
    assert 1 <= refused <= SAMPLES and stats["by_prompt_cache_key"]["none"] == SAMPLES
    assert export(priced, "--metric", "context_precision") == verdicts
