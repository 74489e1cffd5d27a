"""Small builders of verdicts, dead letters and jobs for the ops tests."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from evalfleet.core.message import AttemptFailure, Job, encode_history, encode_job
from evalfleet.core.sample import parse_sample
from evalfleet.store import DeadLetter, VerdictKey, VerdictRecord

NOW = datetime(2026, 11, 22, 12, 0, tzinfo=UTC)


def verdict(sample_id: str, *, metric: str = "rag_qa", created_at: datetime = NOW,
            **changes: Any) -> VerdictRecord:
    """An ``ok`` verdict with one score, its sample 30 s older than the verdict."""
    values: dict[str, Any] = {
        "key": VerdictKey(sample_id, metric, "p1", "judge-1"), "status": "ok",
        "error_class": None, "error": None, "reason": "fine",
        "scores": {"faithfulness": 0.8, "answer_relevance": 0.6}, "raw_scores": {},
        "raw_output": '{"faithfulness": 0.8}', "attempts": 1, "latency_ms": 500,
        "prompt_tokens": 900, "completion_tokens": 100, "attributes": {"app": "bot"},
        "sample_ts": created_at - timedelta(seconds=30), "created_at": created_at,
    }
    values.update(changes)
    return VerdictRecord(**values)


def job(sample_id: str = "req-1", *, metric: str = "rag_qa", attempt: int = 1,
        history: tuple[AttemptFailure, ...] = ()) -> Job:
    """A job for a small valid sample."""
    sample = parse_sample({"id": sample_id, "input": "q?", "output": "a."})
    return Job(metric=metric, sample=sample, enqueued_at=NOW - timedelta(hours=1),
               attempt=attempt, history=history)


def dead_letter(sample_id: str = "req-1", *, metric: str = "rag_qa",
                error_class: str = "judge_unavailable", created_at: datetime = NOW,
                attempts: int = 3, payload: Any = None) -> DeadLetter:
    """A dead letter whose payload is a job that failed ``attempts`` times."""
    the_job = job(sample_id, metric=metric, attempt=attempts)
    history = [AttemptFailure(at=created_at - timedelta(minutes=attempts - n), attempt=n,
                              error_class=error_class, error=f"failure {n}")
               for n in range(1, attempts + 1)]
    return DeadLetter(
        sample_id=sample_id, metric=metric, error_class=error_class, error="gave up",
        attempts=attempts, payload=encode_job(the_job) if payload is None else payload,
        created_at=created_at, history=encode_history(history),
    )
