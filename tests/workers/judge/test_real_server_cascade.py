"""A judge cascade whose first tier is the real llama-cpp-python server
(testkit/judge_server.py, SmolLM2-135M-Instruct): the server returns log-probabilities
when asked, the worker reads a confidence from the score's tokens, and the tier settles
the job under a stored threshold. One sample: a CPU judge takes 10 to 60 s an answer.

The server serves its one model whatever model name a request gives, so both tiers are
that model under two names; the test checks the path, not a judge's quality.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from evalfleet.core.cascade import metric_cascade_identity
from evalfleet.core.message import new_job
from evalfleet.core.metric import load_registry
from evalfleet.core.sample import parse_sample
from evalfleet.core.settings import Settings
from evalfleet.store import SqlStore
from evalfleet.store.queries.cascade import ThresholdBook
from testkit.judge_server import MODEL, JudgeServer
from workers.cascade import ThresholdCache
from workers.evaluation import Evaluator, EvaluatorOptions
from workers.runtime import build_judge

pytestmark = pytest.mark.real_judge

@pytest.fixture(scope="module")
def real_judge(tmp_path_factory: pytest.TempPathFactory) -> Iterator[JudgeServer]:
    server = JudgeServer(log_path=tmp_path_factory.mktemp("judge") / "server.log", n_ctx=2048)
    yield server
    server.stop()


#: A metric small enough for a CPU judge on shared cores: a short prompt and a one-key
#: JSON verdict (the built-in ones take minutes an answer there).
TINY_METRIC = """
name: tiny_match
judge:
  temperature: 0.0
  max_tokens: 24
  response_format: json_object
  cascade:
    - {model: %(model)s}
    - {model: %(model)s-large}
variables:
  question: {from: input, required: true}
  answer: {from: output, required: true}
messages:
  - role: user
    template: |
      Question: {question}
      Answer: {answer}
      Is the answer correct? Reply with JSON only: {{"is_correct": true}} or {{"is_correct": false}}
output:
  format: json
  fields:
    is_correct: {type: boolean}
scores:
  correct: {from: is_correct}
"""


@pytest.mark.timeout(900)  # a minute and a half on this machine; a CPU judge slows with the load
def test_the_real_server_s_log_probabilities_settle_a_job_at_the_first_tier(
        real_judge: JudgeServer, store: SqlStore, tmp_path: Path) -> None:
    folder = tmp_path / "metrics"
    folder.mkdir()
    (folder / "tiny_match.yaml").write_text(TINY_METRIC % {"model": MODEL})
    registry = load_registry(folder)
    metric = registry.get("tiny_match")
    # Threshold 0: any known confidence settles at the first tier; none (no or unreadable
    # log-probabilities, no verdict) goes on to the second.
    ThresholdBook(store).save(metric="tiny_match", identity=metric_cascade_identity(metric),
                              thresholds=[0.0, None], report={}, now=datetime.now(UTC))
    settings = Settings(openai_base_url=real_judge.base_url, judge_model=MODEL,
                        judge_timeout_s=300, liveness_stall_s=900, claim_lease_s=900,
                        visibility_timeout_s=1200)
    options = EvaluatorOptions.from_settings(settings)
    judge = build_judge(settings, concurrency=1)
    try:
        run = Evaluator(registry=registry, store=store, judge=judge, options=options,
                        thresholds=ThresholdCache(ThresholdBook(store).latest))
        sample = parse_sample({"id": "real-1", "input": "Is 12 an even number?",
                               "output": "Yes, 12 is even."})
        (outcome,) = run.run_batch([new_job("tiny_match", sample)], owner="real")
    finally:
        judge.close()
    assert outcome.kind == "stored", outcome
    (record,) = list(store.iter_verdicts())
    assert record.cascade is not None
    first = record.cascade["tried"][0]
    assert first["model"] == MODEL
    print(f"\nreal server, tier 1: scores {first['scores']}, confidence {first['confidence']}, "
          f"kept tier {record.cascade['tier']}; raw output {record.raw_output!r}")
    if first["scores"] is not None:  # the tiny model gave a verdict: its confidence is read
        assert first["confidence"] is not None and 0.0 < first["confidence"] <= 1.0
        assert record.cascade["tier"] == 1 and not record.cascade["low_confidence"]
    else:  # no verdict at the first tier: escalated, never settled on a guess
        assert record.cascade["tier"] == 2
