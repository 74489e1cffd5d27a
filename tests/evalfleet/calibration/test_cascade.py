"""Cascade thresholds: the fixed-sequence test, tiers in turn, and the guarantee itself."""

from __future__ import annotations

import random

import pytest

from evalfleet.calibration.cascade import (
    CascadeFit,
    Guarantee,
    InvalidGuarantee,
    LabelledItem,
    TierJudgement,
    fit_cascade,
    fit_threshold,
    item_agrees,
    start_size,
)

KINDS = {"correct": "binary", "reasoning": "ordinal", "faithfulness": "continuous"}


def judged(confidence: float | None, **scores: float | None) -> TierJudgement:
    return TierJudgement(scores, confidence)


@pytest.mark.parametrize(("scores", "labels", "agrees"), [
    ({"correct": 1.0, "reasoning": 0.75}, {"correct": 1.0, "reasoning": 0.75}, True),
    # A verdict with several scores agrees only if every labelled score does.
    ({"correct": 1.0, "reasoning": 0.75}, {"correct": 1.0, "reasoning": 0.5}, False),
    # Scores people did not label are not compared.
    ({"correct": 1.0, "reasoning": 0.75}, {"correct": 1.0}, True),
    ({"faithfulness": 0.8}, {"faithfulness": 0.72}, True),
    ({"faithfulness": 0.8}, {"faithfulness": 0.6}, False),
    ({"faithfulness": None}, {"faithfulness": None}, True),
    ({"faithfulness": None}, {"faithfulness": 0.0}, False),
    ({"correct": 1.0}, {}, None),
])
def test_agreement_of_an_item(scores: dict[str, float | None], labels: dict[str, float | None],
                              agrees: bool | None) -> None:
    assert item_agrees(judged(0.9, **scores), labels, kinds=KINDS, tolerance=0.1) is agrees


def test_too_few_labels_settle_nothing() -> None:
    fit = fit_threshold([0.99] * 29, [True] * 29, guarantee=Guarantee(min_labels=30))
    assert fit.threshold is None and fit.accepted == 0 and fit.labels == 29


def test_the_first_threshold_tested_accepts_enough_items_to_pass() -> None:
    # At 85% and delta 0.05: 50 items, of which 3 may disagree (half the allowed 15%).
    guarantee = Guarantee()
    assert start_size(guarantee, limit=1000) == 50
    assert start_size(Guarantee(target=0.8), limit=1000) == 30  # min_labels
    assert start_size(guarantee, limit=49) == 50  # none within the items: settles nothing
    fit = fit_threshold([0.99] * 50, [True] * 47 + [False] * 3, guarantee=guarantee)
    assert fit.threshold == pytest.approx(0.99) and (fit.accepted, fit.agreeing) == (50, 47)
    assert fit.guaranteed_agreement is not None and fit.guaranteed_agreement >= 0.85
    assert fit_threshold([0.99] * 49, [True] * 49, guarantee=guarantee).threshold is None


def test_the_search_stops_at_the_first_failed_test() -> None:
    # 60 confident right, then 40 less confident mostly wrong, then 60 right again:
    # the third block's agreement would pass on its own, but it is never reached.
    confidences = [0.95] * 60 + [0.8] * 40 + [0.6] * 60
    agrees = [True] * 60 + [i % 4 == 0 for i in range(40)] + [True] * 60
    fit = fit_threshold(confidences, agrees, guarantee=Guarantee())
    assert fit.threshold == pytest.approx(0.95)
    assert (fit.accepted, fit.agreeing) == (60, 60)


def test_unknown_confidence_is_never_accepted() -> None:
    fit = fit_threshold([None] * 50 + [float("nan")] * 10, [True] * 60, guarantee=Guarantee())
    assert fit.threshold is None and fit.accepted == 0


def test_later_tiers_fit_on_what_earlier_ones_leave() -> None:
    items = [LabelledItem({"correct": 1.0}, (judged(0.99, correct=1.0), judged(0.9, correct=1.0)))
             for _ in range(60)]
    items += [LabelledItem({"correct": 0.0}, (judged(0.6, correct=1.0), judged(0.95, correct=0.0)))
              for _ in range(60)]
    fit = fit_cascade(items, kinds=KINDS, guarantee=Guarantee())
    assert fit.thresholds == (pytest.approx(0.99), pytest.approx(0.95))
    assert [tier.labels for tier in fit.tiers] == [120, 60]
    assert [tier.accepted for tier in fit.tiers] == [60, 60]
    assert fit.low_confidence_share == 0.0
    assert fit.confidence_level == pytest.approx(0.9)


@pytest.mark.parametrize("values", [
    {"target": 1.0}, {"target": 0.0}, {"delta": 0.0}, {"delta": 1.5}, {"tolerance": -0.1},
    {"min_labels": 0},
])
def test_guarantee_values_are_checked(values: dict[str, float]) -> None:
    with pytest.raises(InvalidGuarantee):
        Guarantee(**values)


# --- The guarantee, at the estimator level -------------------------------------------------

def calibration_set(rng: random.Random, *, n: int, overconfident: bool = False,
                    ) -> list[LabelledItem]:
    """A small judge right with probability equal to its confidence, drawn from U(0.6, 1)
    (80% right on average); overconfident, it reports 0.95 to 1 whatever it knows."""
    items = []
    for _ in range(n):
        knows = rng.uniform(0.6, 1.0)
        right = rng.random() < knows
        shown = rng.uniform(0.95, 1.0) if overconfident else knows
        verdict = judged(shown, correct=1.0 if right else 0.0)
        items.append(LabelledItem({"correct": 1.0}, (verdict,)))
    return items


def true_agreement(threshold: float) -> float:
    """Agreement of the calibrated judge's accepted verdicts: the mean of U(threshold, 1)."""
    return (threshold + 1.0) / 2.0


def test_the_guarantee_holds_in_at_least_one_minus_delta_of_calibration_sets() -> None:
    guarantee = Guarantee(target=0.85, delta=0.1)
    rng = random.Random(20251127)
    runs, misses, settled = 400, 0, []
    for _ in range(runs):
        fit = fit_cascade(calibration_set(rng, n=300), kinds=KINDS, guarantee=guarantee).tiers[0]
        if fit.threshold is not None:
            misses += true_agreement(fit.threshold) < guarantee.target
            settled.append(fit.settled_share)
    assert misses / runs <= guarantee.delta
    # Not vacuous: most sets give a threshold, which settles a good share (0.75 of the
    # items lie above the ideal threshold, 0.7). The sets that give none had errors among
    # their first, most confident items: the search ends at its first failed test.
    assert len(settled) > 0.75 * runs
    assert sum(settled) / len(settled) > 0.3


def test_an_overconfident_judge_is_caught_by_the_labels() -> None:
    rng = random.Random(7)
    fits: list[CascadeFit] = [
        fit_cascade(calibration_set(rng, n=300, overconfident=True), kinds=KINDS,
                    guarantee=Guarantee(target=0.85, delta=0.1)) for _ in range(50)]
    settled = [fit.tiers[0].settled_share for fit in fits]
    assert sum(settled) / len(settled) < 0.1
    assert all(fit.low_confidence_share > 0.8 for fit in fits)


def test_a_check_tier_is_given_not_fitted_and_its_agreement_is_reported() -> None:
    # 40 items the check is decisive on (36 agree with people), 60 it leaves to the judge.
    items = [LabelledItem({"correct": 0.0 if n < 36 else 1.0},
                          (judged(1.0, correct=0.0), judged(0.99, correct=0.0)))
             for n in range(40)]
    items += [LabelledItem({"correct": 1.0}, (None, judged(0.99, correct=1.0)))
              for _ in range(60)]
    fit = fit_cascade(items, kinds=KINDS, guarantee=Guarantee(), fixed={0: 1.0})
    check, judge = fit.tiers
    # 90% agreement on 40 items would not pass the test at 85%: a check settles all the
    # same (the team's rule), outside the guarantee, its agreement shown.
    assert (check.threshold, check.accepted, check.agreeing) == (1.0, 40, 36)
    assert check.guaranteed_agreement is not None and check.guaranteed_agreement < 0.85
    # The judge tier is fitted on what the check leaves, and only it counts in delta.
    assert judge.labels == 60 and judge.threshold == pytest.approx(0.99)
    assert fit.fixed == (0,) and fit.confidence_level == pytest.approx(0.95)
