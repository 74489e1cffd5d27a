"""The items waiting for labels, as other labelling tools read them. Pure.

Two forms of one item: a JSON object (``evalfleet review pending --json``, ``GET
/review/pending``), and a Label Studio task (``--format label-studio``,
``?format=label-studio``: a JSON list of ``{"data": {...}}`` objects, the form Label
Studio's import takes). Both carry the item id, which a label line names
(``item_id``) so that labels come back to that item and keep its reason and
probability: labels of a random item count as random. The judge's scores and reason
are left out, as on the review page, so they do not anchor the people labelling.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

from pydantic import ValidationError

from evalfleet.core.trajectory import Trajectory
from evalfleet.store.queries.review_queue import ReviewItem
from workers.compactor import render_trajectory

#: Keys of a pending item's JSON object, in order.
PENDING_KEYS = ("item_id", "sample_id", "metric", "scores", "reason", "probability",
                "stratum", "labels_wanted", "labels_given", "expires_at", "lease_owner",
                "lease_expires_at", "attributes", "sample")


def pending_record(item: ReviewItem, *, scores: Sequence[str]) -> dict[str, Any]:
    """One pending item as a JSON object.

    Args:
        item: The item.
        scores: Its metric's score names, each a label line's ``score``.

    Returns:
        The item with its reason, inclusion probability (null when chosen), stratum,
        labels wanted and given, expiry, lease, attributes and sample (null once purged).
    """
    def moment(value: Any) -> str | None:
        return None if value is None else value.isoformat()

    return {
        "item_id": item.id, "sample_id": item.sample_id, "metric": item.metric,
        "scores": list(scores), "reason": item.reason, "probability": item.probability,
        "stratum": item.stratum, "labels_wanted": item.labels_wanted,
        "labels_given": item.labels_given, "expires_at": moment(item.expires_at),
        "lease_owner": item.lease_owner, "lease_expires_at": moment(item.lease_expires_at),
        "attributes": item.attributes, "sample": item.sample,
    }


def label_studio_task(item: ReviewItem, *, scores: Sequence[str]) -> dict[str, Any]:
    """One pending item as a Label Studio task: its text in ``data`` as strings (the
    retrieved context joined by blank lines), everything else beside it.

    Args:
        item: The item.
        scores: Its metric's score names.

    Returns:
        ``{"data": {...}}`` with ``item_id``, ``sample_id``, ``metric``, ``input``,
        ``output``, ``context``, ``reference``, ``trajectory`` (an agent's steps as the
        judge reads them, whole; empty for a sample without one), ``reason``,
        ``probability``, ``stratum`` and ``scores`` (comma-separated).
    """
    sample = item.sample or {}
    context = sample.get("context")
    if isinstance(context, list):
        context = "\n\n".join(str(part) for part in context)

    def text(value: Any) -> str:
        return "" if value is None else str(value)

    return {"data": {
        "item_id": item.id, "sample_id": item.sample_id, "metric": item.metric,
        "input": text(sample.get("input")), "output": text(sample.get("output")),
        "context": text(context), "reference": text(sample.get("reference")),
        "trajectory": _trajectory_text(sample.get("trajectory")), "reason": item.reason,
        "probability": item.probability, "stratum": item.stratum,
        "scores": ",".join(scores),
    }}


def _trajectory_text(data: Any) -> str:
    """An agent's steps numbered as the judge's prompt writes them, nothing cut."""
    if data is None:
        return ""
    try:
        text, _ = render_trajectory(Trajectory.model_validate(data), budget_chars=sys.maxsize)
    except ValidationError:
        return "(the trajectory kept with this sample does not read)"
    return text
