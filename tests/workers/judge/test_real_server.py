"""A real OpenAI-compatible judge nobody here wrote: llama-cpp-python 0.3.36 serving
SmolLM2-135M-Instruct (testkit/judge_server.py), judged through by a real worker.

A tiny model is a poor judge: these tests check behaviour, not scores. The server is
built once per machine (tests/conftest.py builds it before the session when absent) and
started once for this module, with llama-cpp-python's default context of
:data:`N_CTX` tokens. The four built-in metric files are used as shipped but for their
``max_tokens`` (1,024, lowered to :data:`MAX_TOKENS`): on two shared cores a 135M model
rambling to 1,024 tokens takes up to a minute an answer, the whole test several minutes.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

import prompts
from evalfleet.cli import main
from evalfleet.core.settings import Settings
from evalfleet.store import VerdictStore
from testkit.judge_server import MODEL, JudgeServer
from testkit.process import WorkerProcess, wait_until
from tests.test_fleet import cli, write_jsonl

pytestmark = pytest.mark.real_judge

#: The built-in metric files.
PROMPTS = Path(prompts.__file__).parent

#: The server's context, in tokens (llama-cpp-python's default): the built-in prompts and
#: :data:`MAX_TOKENS` fit, the long sample below does not.
N_CTX = 2048

#: The answer's ``max_tokens`` of every metric in this test.
MAX_TOKENS = 256

#: Seconds a call may take at the judge: answers of up to 1,024 tokens on two shared cores.
JUDGE_TIMEOUT_S = 120.0


@pytest.fixture(scope="module")
def real_judge(tmp_path_factory: pytest.TempPathFactory) -> Iterator[JudgeServer]:
    server = JudgeServer(log_path=tmp_path_factory.mktemp("judge") / "server.log", n_ctx=N_CTX)
    yield server
    server.stop()


def metrics_dir(directory: Path) -> Path:
    """The built-in metric files (and their examples) with ``max_tokens`` lowered."""
    directory.mkdir()
    for path in PROMPTS.iterdir():
        if path.suffix == ".yaml":
            text = path.read_text()
            (directory / path.name).write_text(
                text.replace("max_tokens: 1024", f"max_tokens: {MAX_TOKENS}"))
    return directory


def cpu_judge(settings: Settings, server: JudgeServer, *, metrics: Path | None) -> Settings:
    """The CPU-judge settings of docs/judges.md for ``server``, validated as a worker would."""
    return Settings(**{
        **settings.model_dump(), "openai_base_url": server.base_url, "judge_model": MODEL,
        "judge_timeout_s": JUDGE_TIMEOUT_S, "judge_max_in_flight": 1, "slot_max_wait_s": 60,
        "liveness_stall_s": 600, "claim_lease_s": 600, "visibility_timeout_s": 900,
        "batch_size": 1, "metrics_dir": metrics,
    })


def samples() -> dict[str, list[dict[str, Any]]]:
    """One sample per built-in metric, and a rag_qa sample longer than N_CTX.

    One each: a CPU judge takes 10 to 60 s an answer here, and the behaviour under test
    (the step-down, the context refusal, a verdict of every metric) needs no more.
    """
    long_context = ["Refund policy, clause after clause. " * 600]
    return {
        "rag_qa": [
            {"id": f"rag-{n}", "input": "How long is the refund window?", "output": "28 days.",
             "context": context, "reference": "30 days"}
            for n, context in enumerate([["Refunds within 30 days."], long_context])],
        "context_precision": [
            {"id": "cp-0", "input": "What is the capital of France?", "output": "Lyon.",
             "context": ["Paris is the capital of France."], "reference": "Paris"}],
        "bbh_match": [
            {"id": "bbh-0", "input": "Is 17 a prime number? Answer yes or no.",
             "output": "Yes, 17 is prime.", "reference": "yes"}],
        "rec_faithfulness": [
            {"id": "rec-0", "input": "a light trail shoe", "output": "Heavy but cheap at 50.",
             "fields": {"product_title": "Trail runner", "base_price": "120",
                        "final_price": "99",
                        "product_opinion_summary": "Light, grippy on wet rock."}}],
    }


@pytest.mark.timeout(900)  # a minute on a quiet machine; a CPU judge slows with the load
def test_a_real_server_judges_every_built_in_metric(
    real_judge: JudgeServer, settings: Settings, store: VerdictStore, tmp_path: Path,
    start_worker: Callable[..., WorkerProcess],
) -> None:
    real = cpu_judge(settings, real_judge, metrics=metrics_dir(tmp_path / "metrics"))
    by_metric = samples()
    for metric, records in by_metric.items():
        assert cli(real, "produce", str(write_jsonl(tmp_path / f"{metric}.jsonl", records)),
                   "--metric", metric).exit_code == 0
    # The server has one slot, and the fleet-wide cap keeps one call at it at a time.
    worker = start_worker(real, queues=list(by_metric), concurrency=1)
    jobs = sum(len(records) for records in by_metric.values())
    wait_until(lambda: store.counts().verdicts + store.counts().dead_letters >= jobs,
               timeout_s=780, what="a verdict of each job from the real judge", interval_s=1.0)
    verdicts = {record.key.sample_id: record for record in store.iter_verdicts()}
    assert len(verdicts) == jobs and list(store.iter_dead_letters()) == []
    for record in verdicts.values():  # ok, or failed with a named error and the reason
        assert record.status == "ok" or (record.error_class and record.error), record
    too_long = verdicts["rag-1"]
    assert (too_long.status, too_long.error_class) == ("failed", "context_length_exceeded")
    assert "longer than the judge's context" in (too_long.error or "")
    log = worker.log_path.read_text()
    # json_schema was refused (a 500 naming response_format.type) and stepped down once
    # per model, never counted as a server fault.
    assert "refuses response_format json_schema" in log
    assert "circuit open" not in log
    # prompt_cache_key is sent and ignored (its request models ignore unknown fields).
    assert "refuses prompt_cache_key" not in log
    # No retry loop: a call may time out on a loaded machine and be made again, but no job
    # came near its last attempt.
    assert all(record.attempts < real.max_attempts for record in verdicts.values())
    print(json.dumps({sample_id: [record.status, record.error_class, record.latency_ms]
                      for sample_id, record in sorted(verdicts.items())}))


def test_judge_check_reports_the_real_server_truthfully(real_judge: JudgeServer,
                                                        settings: Settings) -> None:
    # The metric files as shipped: the check shows what a user's first run would.
    real = cpu_judge(settings, real_judge, metrics=None)
    result = CliRunner().invoke(main, ["judge", "check", "--json", "--metric",
                                       "context_precision"],
                                env=real.as_environment(), catch_exceptions=False)
    report = json.loads(result.stdout)
    seen = {probe["what"]: probe for probe in report["probes"]}
    assert seen["models"]["ok"] and "smollm2" in seen["models"]["detail"]
    # What llama-cpp-python 0.3.36 accepts: everything but json_schema (refused with a 500).
    assert seen["format json_schema"]["detail"].startswith("refused (stepped down)")
    # The check sends one request and reports the fleet's step-down: the next mode answered,
    # and no lower mode was asked.
    assert seen["format json_object_schema"]["ok"]
    assert "format json_object" not in seen and "format text" not in seen
    assert seen["format json_object_schema"]["cached_tokens"] is None  # it reports none
    metric = seen["metric context_precision"]
    if metric["ok"]:  # sent in the mode the server accepts, its usage reported
        assert "(json_object_schema)" in metric["detail"] and metric["prompt_tokens"] > 200
    # A 135M judge may or may not give a usable verdict: that probe alone may be a problem.
    assert result.exit_code == (2 if report["problems"] else 0)
    assert all(problem.startswith("context_precision (smollm2): ")
               for problem in report["problems"])
