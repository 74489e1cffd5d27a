"""A real OpenAI-compatible judge nobody here wrote: llama-cpp-python 0.3.36 serving
SmolLM2-135M-Instruct (testkit/judge_server.py), judged through by a real worker.

A tiny model is a poor judge: these tests check behaviour, not scores. The server is
built once per machine (tests/conftest.py builds it before the session when absent) and
started once for this module, with a context of :data:`N_CTX` tokens.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from evalfleet.core.settings import Settings
from evalfleet.store import VerdictStore
from testkit.judge_server import MODEL, JudgeServer
from testkit.process import WorkerProcess, wait_until
from tests.test_fleet import cli, write_jsonl

pytestmark = pytest.mark.real_judge

#: The server's context, in tokens: the built-in prompts and their ``max_tokens`` of 1,024
#: fit, the long sample below does not.
N_CTX = 3072

#: Seconds a call may take: one slot, answers of up to 1,024 tokens on two shared cores.
JUDGE_TIMEOUT_S = 240.0


@pytest.fixture(scope="module")
def real_judge(tmp_path_factory: pytest.TempPathFactory) -> Iterator[JudgeServer]:
    server = JudgeServer(log_path=tmp_path_factory.mktemp("judge") / "server.log", n_ctx=N_CTX)
    yield server
    server.stop()


def samples() -> dict[str, list[dict[str, Any]]]:
    """Three samples per built-in metric; the last rag_qa sample is longer than N_CTX."""
    def rag(n: int, context: list[str]) -> dict[str, Any]:
        return {"id": f"rag-{n}", "input": "How long is the refund window?",
                "output": f"{n + 28} days.", "context": context, "reference": "30 days"}

    long_context = ["Refund policy, clause after clause. " * 600]
    return {
        "rag_qa": [rag(0, ["Refunds: 30 days."]), rag(1, ["Refunds within 30 days."]),
                   rag(2, long_context)],
        "context_precision": [
            {"id": f"cp-{n}", "input": "What is the capital of France?",
             "output": ["Paris.", "Lyon.", "Paris, on the Seine."][n],
             "context": ["Paris is the capital of France."], "reference": "Paris"}
            for n in range(3)],
        "bbh_match": [
            {"id": f"bbh-{n}", "input": "Is 17 a prime number? Answer yes or no.",
             "output": ["Yes, 17 is prime.", "No.", "Yes"][n], "reference": "yes"}
            for n in range(3)],
        "rec_faithfulness": [
            {"id": f"rec-{n}", "input": "a light trail shoe", "output": summary,
             "fields": {"product_title": "Trail runner", "base_price": "120",
                        "final_price": "99",
                        "product_opinion_summary": "Light, grippy on wet rock."}}
            for n, summary in enumerate(["Light and grippy.", "Heavy but cheap at 50.",
                                         "Grippy on wet rock, now 99."])],
    }


def test_a_real_server_judges_every_built_in_metric(
    real_judge: JudgeServer, settings: Settings, store: VerdictStore, tmp_path: Path,
    start_worker: Callable[..., WorkerProcess],
) -> None:
    real = settings.model_copy(update={
        "openai_base_url": real_judge.base_url, "judge_model": MODEL,
        "judge_timeout_s": JUDGE_TIMEOUT_S, "visibility_timeout_s": 1800,
        "claim_lease_s": 900, "retry_max_s": 30.0, "liveness_stall_s": 900,
    })
    by_metric = samples()
    for metric, records in by_metric.items():
        assert cli(real, "produce", str(write_jsonl(tmp_path / f"{metric}.jsonl", records)),
                   "--metric", metric).exit_code == 0
    # The server has one slot: a worker with two calls in flight keeps it busy.
    worker = start_worker(real, queues=list(by_metric), concurrency=2)
    wait_until(lambda: store.counts().verdicts + store.counts().dead_letters >= 12,
               timeout_s=600, what="12 verdicts from the real judge", interval_s=1.0)
    verdicts = {record.key.sample_id: record for record in store.iter_verdicts()}
    assert len(verdicts) == 12 and list(store.iter_dead_letters()) == []
    for record in verdicts.values():  # ok, or failed with a named error and the reason
        assert record.status == "ok" or (record.error_class and record.error), record
    too_long = verdicts["rag-2"]
    assert (too_long.status, too_long.error_class) == ("failed", "context_length_exceeded")
    assert "longer than the judge's context" in (too_long.error or "")
    log = worker.log_path.read_text()
    # json_schema was refused (a 500 naming response_format.type) and stepped down once
    # per model, never counted as a server fault.
    assert "refuses response_format json_schema" in log
    assert "circuit open" not in log and "pausing" not in log
    assert all(record.attempts <= 2 for record in verdicts.values())  # no retry loop
    print(json.dumps({sample_id: [record.status, record.error_class, record.latency_ms]
                      for sample_id, record in sorted(verdicts.items())}))
