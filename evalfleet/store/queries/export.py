"""The export format: one JSON object per verdict (the external contract). Pure."""

from __future__ import annotations

from typing import Any

from evalfleet.core.simulator import judged_by_simulator
from evalfleet.store.base import VerdictRecord


def export_row(record: VerdictRecord, *, with_sample: bool = False) -> dict[str, Any]:
    """The contract's JSON object for one verdict.

    Beyond the contract's keys it carries ``error_class``, ``raw_output`` (the
    judge's last reply, verbatim), ``timestamp`` (the sample's), ``notes`` (annotations
    the judge left out or wrote off-spec), what the judge reported about itself
    (``judge_reported_model``, ``judge_fingerprint``; null when it did not say),
    ``cached_tokens`` (of ``prompt_tokens``, those served from the provider's prompt
    cache; null when the judge did not report them), ``judge_simulated`` (true when the
    judge simulator gave the verdict, whatever model it was asked for), ``compaction``
    (what was cut from a trajectory to fit the metric's budget: ``original_chars``,
    ``cut_chars``, ``pieces_cut``; null when nothing was), ``failed_step`` (the trajectory
    step, from 1, the judge named as where things went wrong; null when it named none),
    ``settled_model`` (the model whose verdict a judge cascade kept; null for one judge)
    and ``cascade`` (how the cascade reached it: ``tier``, ``confidence``,
    ``low_confidence``, ``tried``...; null for one judge), ``provisional`` (true for a
    session version closed when idle and not yet final: a later turn may still replace
    it, and alerts and corrected estimates do not count it yet) and, with
    ``with_sample``, ``sample``: the content judged (null when none was kept).
    """
    row = {
        "sample_id": record.key.sample_id,
        "metric": record.key.metric,
        "status": record.status,
        "scores": record.scores,
        "raw_scores": record.raw_scores,
        "reason": record.reason,
        "error": record.error,
        "error_class": record.error_class,
        "raw_output": record.raw_output,
        "judge_model": record.key.judge_model,
        "prompt_version": record.key.prompt_version,
        "attempts": record.attempts,
        "latency_ms": record.latency_ms,
        "prompt_tokens": record.prompt_tokens,
        "completion_tokens": record.completion_tokens,
        "cost_usd": record.cost_usd,
        "created_at": _iso(record.created_at),
        "timestamp": _iso(record.sample_ts),
        "attributes": record.attributes,
        "notes": record.notes,
        "judge_reported_model": record.judge_reported_model,
        "judge_fingerprint": record.judge_fingerprint,
        "purpose": record.purpose,
        "judge_mode": record.judge_mode,
        "cached_tokens": record.cached_tokens,
        "judge_simulated": judged_by_simulator(record.judge_fingerprint),
        "compaction": record.compaction,
        "failed_step": record.failed_step,
        "settled_model": record.cascade.get("model") if record.cascade else None,
        "cascade": record.cascade,
        "provisional": record.provisional,
    }
    if with_sample:
        row["sample"] = record.sample
    return row


def _iso(moment: Any) -> str:
    return str(moment.isoformat().replace("+00:00", "Z"))
