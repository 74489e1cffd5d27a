"""The review slice's choice: strata by the lowest score, a hash salted per metric."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from evalfleet.core.review_slice import MetricSlice, ReviewSlice, Stratum, stratum_rate
from evalfleet.core.settings import Settings
from producers.sampler import is_sampled


@pytest.mark.parametrize("scores, expected", [
    ({"a": 0.2, "b": 0.9}, (0.5, "below 0.3")),
    ({"a": 0.4}, (0.2, "below 0.6")),
    ({"a": 0.9}, (0.01, None)),
    ({"a": None}, (0.01, None)),
    ({}, (0.01, None)),
])
def test_stratum_by_the_lowest_score(scores: dict[str, float | None],
                                     expected: tuple[float, str | None]) -> None:
    spec = MetricSlice(rate=0.01, strata=(Stratum(0.6, 0.2), Stratum(0.3, 0.5)))
    assert stratum_rate(spec, scores) == expected


def test_the_slice_is_independent_of_other_metrics_and_of_producer_sampling() -> None:
    review = ReviewSlice({"a": MetricSlice(rate=0.5), "b": MetricSlice(rate=0.5)})
    ids = [f"req-{n}" for n in range(4000)]
    chosen_a = {i for i in ids if review.choose(sample_id=i, metric="a", scores={})}
    chosen_b = {i for i in ids if review.choose(sample_id=i, metric="b", scores={})}
    sampled = {i for i in ids if is_sampled(i, 0.5, metric="a")}
    # Independent halves overlap on about a quarter (sd about 27 over 4000).
    for other in (chosen_b, sampled):
        assert abs(len(chosen_a & other) - 1000) < 140
    assert review.choose(sample_id="x", metric="c", scores={}) is None


def test_settings_build_the_slice() -> None:
    settings = Settings(review_rates={"rag_qa": 0.1},
                        review_strata={"bbh_match": [{"below": 0.5, "rate": 0.3}]},
                        review_labels_wanted=2)
    review = settings.review.review_slice()
    assert review.metrics == {"bbh_match": MetricSlice(0.0, (Stratum(0.5, 0.3),)),
                              "rag_qa": MetricSlice(0.1)}
    assert review.labels_wanted == 2
    with pytest.raises(ValidationError, match=r"within 0\.\.1"):
        Settings(review_rates={"rag_qa": 1.5})
