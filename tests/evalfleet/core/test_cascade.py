"""The cascade rules shared by the worker and the fit: kinds, agreement, settling, identity."""

from __future__ import annotations

import pytest

from evalfleet.core.cascade import cascade_identity, settles
from evalfleet.core.metric import load_registry
from evalfleet.core.scales import score_kinds


@pytest.mark.parametrize(("metric", "kinds"), [
    ("bbh_match", {"correct": "binary", "reasoning": "ordinal"}),
    ("rec_faithfulness", {"faithfulness": "ordinal"}),
    ("context_precision", {"context_precision": "continuous"}),
])
def test_score_kinds(metric: str, kinds: dict[str, str]) -> None:
    assert score_kinds(load_registry().get(metric)) == kinds


def test_settles_only_at_or_above_a_known_threshold() -> None:
    assert settles(0.9, 0.9) and settles(1.0, 0.0)
    assert not settles(0.89, 0.9) and not settles(None, 0.0) and not settles(1.0, None)


def test_the_identity_depends_on_tiers_and_prompts_only() -> None:
    tiers = [("nano", "v3"), ("large", "v3")]
    identity = cascade_identity(tiers)
    assert identity.startswith("cascade:") and len(identity) == len("cascade:") + 16
    assert cascade_identity([("nano", "v3"), ("large", "v3")]) == identity
    assert cascade_identity([("large", "v3"), ("nano", "v3")]) != identity
    assert cascade_identity([("nano", "v4"), ("large", "v3")]) != identity
    assert cascade_identity([("nano", "v3")]) != identity
    with pytest.raises(ValueError, match="at least one tier"):
        cascade_identity([])
