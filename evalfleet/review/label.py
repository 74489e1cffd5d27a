"""People's labels checked as they come in (the review page, imports). Pure.

A label is given on the scale the metric file declares for the judge and normalised
the way the judge's value is (:mod:`evalfleet.core.labels`, which also makes several
reviewers' labels one). Null means "cannot say" and is kept as such.
"""

from __future__ import annotations

from typing import Any

from evalfleet.core.errors import InvalidSample
from evalfleet.core.labels import normalise
from evalfleet.core.metric import Metric
from evalfleet.core.scales import label_value, score_scales
from evalfleet.store.queries.review_queue import LabelValue


def read_label(value: Any, *, metric: Metric, score: str, record: str,
               sample_id: str | None, field: str) -> LabelValue:
    """Check one label and normalise it.

    Args:
        value: As given (None: the reviewer cannot say).
        metric: The metric the label is for.
        score: One of its score names.
        record, sample_id, field: Where it came from, for the error.

    Returns:
        The label as given and normalised to 0..1.

    Raises:
        InvalidSample: The score is not the metric's, or the value is off its scale.
    """
    scale = score_scales(metric).get(score)
    if scale is None:
        raise InvalidSample(f"{metric.name} has no score {score!r}", record=record,
                            sample_id=sample_id, field=field)
    if value is None:
        return LabelValue(raw=None, value=None)
    raw = label_value(value, scale=scale, record=record, sample_id=sample_id, field=field)
    if scale.kind == "binary":
        return LabelValue(raw=bool(value), value=raw)
    return LabelValue(raw=value, value=normalise(raw, metric=metric, score=score))
