"""The request body of ``POST /v1/samples`` and the report sent back. Pure.

A body is one sample object, a JSON array of samples, or ``{"samples": [...]}``.
Records are named ``sample`` (the single form) or ``samples[N]`` (from 0), and
that name starts every error about them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from evalfleet.core import jsontext
from producers.pipeline import RecordResult


@dataclass(frozen=True, slots=True)
class Problem:
    """A request the service answers with an error status and a message."""

    status: int
    """HTTP status."""
    detail: str
    """What is wrong, for the client."""


def parse_body(raw: bytes, *, max_batch: int) -> list[tuple[str, Any]] | Problem:
    """Split a request body into named records.

    Args:
        raw: The body.
        max_batch: Most records accepted in one request.

    Returns:
        ``(record name, decoded JSON)`` pairs, or the problem: 400 for a body that is
        not JSON, 422 for one that holds no samples or is one sample nested past
        :data:`evalfleet.core.jsontext.HARD_MAX_DEPTH` (the records of a batch that does are
        returned as undecoded bytes, each screened on its own), 413 for a batch over
        ``max_batch``.
    """
    try:
        # Bounded before decoding so no body reaches RecursionError; each record's own
        # depth limit is checked (naming the field) when it is screened.
        data = jsontext.loads(raw, parse_constant=_reject_constant)
    except jsontext.JsonTooDeep as exc:
        # A batch is split into its records undecoded, so the one nested too deep is
        # rejected by name and the others go on.
        items = jsontext.split_items(raw) or jsontext.split_items(raw, key=b"samples")
        if not items:
            return Problem(422, f"the body is not accepted: JSON {exc}")
        data = items
    except (ValueError, UnicodeDecodeError) as exc:
        return Problem(400, f"the body is not valid JSON: {exc}")
    if isinstance(data, dict) and "samples" in data:
        if set(data) != {"samples"} or not isinstance(data["samples"], list):
            return Problem(422, "a batch is {\"samples\": [...]} with nothing beside it")
        data = data["samples"]
    if isinstance(data, dict):
        return [("sample", data)]
    if not isinstance(data, list):
        return Problem(422, "expected a sample object, an array of samples, "
                              "or {\"samples\": [...]}")
    if not data:
        return Problem(422, "the batch is empty")
    if len(data) > max_batch:
        return Problem(413, f"{len(data):,} samples in one request, over the limit of "
                              f"{max_batch:,}; split the batch")
    return [(f"samples[{n}]", record) for n, record in enumerate(data)]


def build_report(results: Sequence[RecordResult]) -> dict[str, Any]:
    """The JSON report of one request: counts per outcome, jobs per metric, rejections.

    ``received`` is the sum of ``accepted``, ``sampled_out``, ``shed``, ``duplicates``
    and ``rejected``. ``rejections`` also lists records accepted for some metrics but
    lacking another metric's inputs.
    """
    counts = {"accepted": 0, "sampled_out": 0, "shed": 0, "duplicate": 0, "rejected": 0}
    jobs: dict[str, int] = {}
    rejections = []
    for result in results:
        counts[result.status] += 1
        for fate in result.jobs:
            if fate.status == "enqueued":
                jobs[fate.metric] = jobs.get(fate.metric, 0) + 1
        for error in result.errors:
            rejections.append({
                "index": result.index, "record": result.record, "id": error.sample_id,
                "field": error.field, "error": error.reason, "message": str(error),
            })
    return {
        "received": len(results), "accepted": counts["accepted"],
        "sampled_out": counts["sampled_out"], "shed": counts["shed"],
        "duplicates": counts["duplicate"], "rejected": counts["rejected"],
        "jobs": jobs, "rejections": rejections,
    }


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not allowed")
