"""Simulated cascade traffic that tests and benchmarks share: two tiers of known quality
and people's labels on a random slice (estimator level, no server)."""

from __future__ import annotations

import random
from dataclasses import dataclass

from evalfleet.calibration.cascade import LabelledItem, TierJudgement

#: People say "correct" of this share of the traffic: the mean the estimates look for.
TRUE_MEAN = 0.7


@dataclass(frozen=True)
class Traffic:
    """Simulated verdicts: every item's tiers and label, and the labelled random slice."""

    items: list[LabelledItem]
    labelled: list[LabelledItem]
    rate: float
    """The slice's inclusion probability."""


def cascade_traffic(rng: random.Random, *, seed: int, n: int = 3000, rate: float = 0.15,
                    lenient: bool = False) -> Traffic:
    """``n`` samples of a binary score (``correct``, true on :data:`TRUE_MEAN`): a small
    judge right as often as its confidence says (uniform on 0.55 to 1), a large one right
    on 93% (confidence 0.99); a random slice at ``rate`` labelled as people would.
    ``lenient``: the small judge's mistakes all say "correct" (its bias one-sided, so
    the share it settles moves the cascade's bias)."""
    items, labelled = [], []
    for index in range(n):
        truth = 1.0 if rng.random() < TRUE_MEAN else 0.0
        sure = rng.uniform(0.55, 1.0)
        small = truth if rng.random() < sure else 1.0 if lenient else 1.0 - truth
        large = truth if rng.random() < 0.93 else 1.0 - truth
        item = LabelledItem({"correct": truth},
                            (TierJudgement({"correct": small}, sure),
                             TierJudgement({"correct": large}, 0.99)), f"s{seed}-{index}")
        items.append(item)
        if rng.random() < rate:
            labelled.append(item)
    return Traffic(items, labelled, rate)
