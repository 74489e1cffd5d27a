"""A judge cascade through the worker's judge client against the simulator over HTTP:
thresholds fitted on simulated people, a small judge settling what it is sure of, an
overconfident one caught, and failures at a cheap tier escalating."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime
from functools import cache
from pathlib import Path

import pytest

from evalfleet.calibration.cascade import Guarantee, LabelledItem, TierJudgement, fit_cascade
from evalfleet.core.cascade import fold_of, metric_cascade_identity
from evalfleet.core.errors import JudgeError
from evalfleet.core.metric import Metric, load_registry
from evalfleet.core.sample import Sample, parse_sample
from evalfleet.core.scales import score_kinds
from evalfleet.judgesim import RunningSim, simulated_verdict
from evalfleet.store.queries.cascade import StoredThresholds
from tests.helpers import cascade_metrics
from workers.cascade import CascadeResult, Tier, cascade_flow, run_cascades, tiers_for
from workers.judge import AsyncHttpJudge, JudgeFleet, JudgeRequest
from workers.renderer import render_messages
from workers.verdicts import Verdict, parse_verdict
from workers.verdicts.schema import response_format_for

PROFILES = {"small": {"error_rate": 0.1},
            "sloppy": {"error_rate": 0.2, "logprobs": "overconfident"},
            "large": {"error_rate": 0.02}}


@pytest.fixture
def client(sim: RunningSim) -> Iterator[JudgeFleet]:
    sim.configure(judge_profiles=PROFILES)
    fleet = JudgeFleet(AsyncHttpJudge(base_url=sim.base_url, api_key="sk-test", timeout_s=10,
                                      max_connections=16), concurrency=16)
    yield fleet
    fleet.close()


@cache
def metric() -> Metric:
    return load_registry().get("bbh_match")


def job(index: int) -> tuple[Sample, JudgeRequest]:
    spec = metric()
    sample = parse_sample({"id": f"c-{index}", "input": f"Is {index} even?",
                           "output": f"Thinking...\n{'True' if index % 3 else 'False'}",
                           "reference": "True"})
    request = JudgeRequest(messages=render_messages(spec, sample), model="unset",
                           temperature=0.0, max_tokens=512,
                           response_format=response_format_for(spec, supported="json_schema"))
    return sample, request


def people(sample: Sample, request: JudgeRequest) -> dict[str, float | None]:
    truth = simulated_verdict([dict(m) for m in request.messages],
                              response_format=request.response_format)
    parsed = parse_verdict(json.dumps(truth), metric=metric(), sample=sample)
    assert isinstance(parsed, Verdict), parsed
    return dict(parsed.scores)


def cascade(client: JudgeFleet, tiers: list[Tier], indexes: range, *,
            shadow: bool = False) -> list[CascadeResult]:
    jobs = [job(index) for index in indexes]
    return run_cascades([cascade_flow(request, tiers, metric=metric(), sample=sample,
                                      shadow=shadow)
                         for sample, request in jobs], client)


def fitted(client: JudgeFleet, small: str, *,
           labels: int = 300) -> tuple[float | None, float | None]:
    """Thresholds from labelled items that every tier judged (thresholds None: every
    item goes through both). The simulated judges draw by hash: the same every run."""
    results = cascade(client, [Tier(small, None), Tier("large", None)], range(labels),
                      shadow=True)
    items = []
    for index, result in zip(range(labels), results, strict=True):
        tiers = tuple(TierJudgement(answer.result.scores, answer.confidence)
                      if isinstance(answer.result, Verdict) else None for answer in result.tried)
        items.append(LabelledItem(people(*job(index)), tiers))
    fit = fit_cascade(items, kinds=score_kinds(metric()), guarantee=Guarantee(delta=0.05))
    small_t, large_t = fit.thresholds
    return small_t, large_t


def agreement(results: list[CascadeResult], indexes: range) -> tuple[float, float]:
    """Share settled at the first tier, and agreement of the accepted verdicts."""
    accepted = [(result, index) for result, index in zip(results, indexes, strict=True)
                if not result.low_confidence]
    agreeing = sum(1 for result, index in accepted
                   if isinstance(result.kept.result, Verdict)
                   and result.kept.result.scores == people(*job(index)))
    settled = sum(1 for result in results if result.settled_tier == 1)
    return settled / len(results), agreeing / max(len(accepted), 1)


def test_a_calibrated_small_judge_settles_most_and_agrees(client: JudgeFleet) -> None:
    small_t, large_t = fitted(client, "small")
    # The large tier sees only what the small one leaves (too few labels for a threshold
    # of its own here): its verdicts are then kept as low-confidence.
    assert small_t is not None
    traffic = range(1000, 1300)
    results = cascade(client, [Tier("small", small_t), Tier("large", large_t)], traffic)
    settled, agrees = agreement(results, traffic)
    assert settled > 0.3
    assert agrees >= 0.8  # 0.85 guaranteed over all traffic; 300 items vary around it
    large_calls = sum(len(result.tried) == 2 for result in results)
    assert large_calls == len(results) - round(settled * len(results))


def test_an_overconfident_small_judge_is_caught_and_settles_nothing(client: JudgeFleet) -> None:
    small_t, large_t = fitted(client, "sloppy", labels=100)
    assert small_t is None
    results = cascade(client, [Tier("sloppy", small_t), Tier("large", large_t)], range(20))
    assert all(result.settled_tier == 2 for result in results)


def test_a_cheap_tier_that_fails_escalates_and_the_last_tier_is_kept(
        client: JudgeFleet, sim: RunningSim) -> None:
    sim.script([{"match": "Is 1 even", "replies": [{"status": 400, "message": "bad"}]},
                {"match": "Is 2 even", "replies": [{"content": "no verdict here"}]},
                {"match": "Is 3 even", "replies": [{"content": "x"}, {"status": 400}]}])
    one, two, three = cascade(client, [Tier("small", 0.0), Tier("large", 0.0)], range(1, 4))
    assert isinstance(one.tried[0].answer, JudgeError) and one.settled_tier == 2
    assert two.tried[0].confidence is None and two.settled_tier == 2
    assert not one.low_confidence and not two.low_confidence
    assert isinstance(three.kept.answer, JudgeError) and three.low_confidence


def test_a_tier_with_no_threshold_settles_nothing(client: JudgeFleet) -> None:
    (result,) = cascade(client, [Tier("small", None)], range(1))
    assert result.settled_tier == 1 and result.low_confidence
    # Not fitted yet: the cheap tier is not even asked, unless the job is a shadow.
    (skipped,) = cascade(client, [Tier("small", None), Tier("large", None)], range(1))
    assert [answer.model for answer in skipped.tried] == ["large"]
    (shadow,) = cascade(client, [Tier("small", 0.0), Tier("large", None)], range(1),
                        shadow=True)
    assert [answer.model for answer in shadow.tried] == ["small", "large"]
    assert shadow.settled_tier == 1 and not shadow.low_confidence
    with pytest.raises(ValueError, match="at least one tier"):
        next(cascade_flow(job(0)[1], [], metric=metric(), sample=job(0)[0]))


def test_thresholds_are_read_once_a_ttl_and_kept_while_the_store_is_away() -> None:
    from datetime import UTC, datetime

    from evalfleet.core.errors import StoreUnavailable
    from evalfleet.store.queries.cascade import StoredThresholds
    from workers.cascade import ThresholdCache

    now = [0.0]
    answers: list[StoredThresholds | StoreUnavailable | None] = []
    fit = StoredThresholds("m", "cascade:x", 1, (0.7, None), {}, datetime.now(UTC))

    def read(*, metric: str, identity: str) -> StoredThresholds | None:
        answer = answers.pop(0)
        if isinstance(answer, StoreUnavailable):
            raise answer
        return answer

    cache = ThresholdCache(read, ttl_s=60.0, clock=lambda: now[0])
    answers.append(StoreUnavailable("down"))
    with pytest.raises(StoreUnavailable):  # nothing read yet: the job goes back
        cache.get(metric="m", identity="cascade:x")
    answers.append(fit)
    assert cache.get(metric="m", identity="cascade:x") == fit
    assert cache.get(metric="m", identity="cascade:x") == fit and not answers  # cached
    now[0] = 61.0
    answers.append(StoreUnavailable("down"))
    assert cache.get(metric="m", identity="cascade:x") == fit  # stale, still in use
    answers.append(None)
    assert cache.get(metric="m", identity="cascade:x") is None  # read again: gone


def test_the_review_slice_says_which_samples_it_may_choose() -> None:
    from evalfleet.core.review_slice import MetricSlice, ReviewSlice, Stratum, review_fraction

    review = ReviewSlice({"m": MetricSlice(rate=0.1, strata=(Stratum(below=0.5, rate=0.4),))})
    ids = [f"s-{index}" for index in range(400)]
    chosen = [i for i in ids if review.may_choose(sample_id=i, metric="m")]
    assert chosen == [i for i in ids if review_fraction(sample_id=i, metric="m") < 0.4]
    # Whatever its scores, a verdict the slice chooses is one it said it may choose.
    for sample_id in ids:
        for scores in ({"s": 0.1}, {"s": 0.9}):
            if review.choose(sample_id=sample_id, metric="m", scores=scores):
                assert sample_id in chosen
    assert not review.may_choose(sample_id="s-1", metric="other")


def test_the_review_slice_samples_by_confidence_band_before_score_strata() -> None:
    from evalfleet.core.review_slice import MetricSlice, ReviewSlice, Stratum, review_fraction

    review = ReviewSlice({"m": MetricSlice(rate=0.01, strata=(Stratum(below=0.5, rate=0.1),),
                                           confidence_strata=(Stratum(below=0.7, rate=0.3),
                                                              Stratum(below=0.9, rate=0.1)))})
    ids = [f"s-{index}" for index in range(2000)]
    unsure = [review.choose(sample_id=i, metric="m", scores={"s": 1.0}, confidence=0.6)
              for i in ids]
    chosen = [choice for choice in unsure if choice is not None]
    assert {(c.probability, c.stratum) for c in chosen} == {(0.3, "confidence below 0.7")}
    assert len(chosen) == sum(review_fraction(sample_id=i, metric="m") < 0.3 for i in ids)
    middling = review.choose(sample_id="s-3", metric="m", scores={"s": 1.0}, confidence=0.8)
    sure = [review.choose(sample_id=i, metric="m", scores={"s": 0.2}, confidence=0.95)
            for i in ids]
    # Sure verdicts fall back to the score strata; unknown confidence too.
    assert {c.stratum for c in sure if c} == {"below 0.5"}
    assert middling is None or middling.stratum == "confidence below 0.9"
    assert all(review.may_choose(sample_id=i, metric="m") for i, c in zip(ids, unsure, strict=True)
               if c is not None)


def test_a_cross_fitted_fit_judges_each_sample_with_its_fold_s_thresholds(
        tmp_path: Path) -> None:
    metric = load_registry(cascade_metrics(tmp_path / "metrics")).get("bbh_match")
    stored = StoredThresholds("bbh_match", metric_cascade_identity(metric), 1, (0.8, None),
                              {"folds": [[0.7, None], [0.9, None]]}, datetime.now(UTC))
    ids = {fold_of(metric="bbh_match", sample_id=f"s{n}", folds=2): f"s{n}" for n in range(20)}
    assert [tiers_for(metric, stored, sample_id=ids[k])[0].threshold for k in (0, 1)] == [
        0.7, 0.9]
    # A fit without folds (or a malformed one) gives every sample the same thresholds.
    plain = StoredThresholds("bbh_match", stored.identity, 2, (0.8, None),
                             {"folds": [[0.7]]}, datetime.now(UTC))
    assert plain.folds == () and tiers_for(metric, plain, sample_id="s1")[0].threshold == 0.8
