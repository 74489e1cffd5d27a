"""Corrected estimates through the real store: a judge biased on part of the traffic, people's
labels from the ground truth on a random (and a stratified) slice, and a chosen slice refused."""

from __future__ import annotations

import json
import re
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import numpy as np
import pytest
from click.testing import CliRunner

from evalfleet.cli import main
from evalfleet.core.labelpool import PoolItem
from evalfleet.core.metric import Metric, load_registry
from evalfleet.core.review_slice import MetricSlice, ReviewSlice, Stratum
from evalfleet.review.estimate import (
    NOT_ENOUGH_LABELS,
    OK,
    ScoreEstimate,
    estimate_score,
    pool_labels,
)
from evalfleet.store import SqlStore, VerdictKey, VerdictRecord, open_store
from evalfleet.store.queries.estimate import EstimateReads
from evalfleet.store.queries.review_queue import LabelValue, ReviewQueue

NOW = datetime(2026, 11, 22, 12, 0, tzinfo=UTC)
N = 4000
#: The pool: ten days of verdicts; the window: the last two.
DAYS = 10
WINDOW_START = NOW - timedelta(days=2)
#: The judge adds this to faithfulness on the app=bot half of the traffic.
BIAS = 0.2
SCORE = "faithfulness"


def rag_qa() -> Metric:
    return load_registry().get("rag_qa")


def traffic(seed: int) -> tuple[list[VerdictRecord], dict[str, float]]:
    """Verdicts over the pool, and each sample's true score."""
    rng = np.random.default_rng(seed)
    moments = NOW - timedelta(days=DAYS) + timedelta(days=DAYS) * rng.random(N)
    # People's scores drop in the window (mean 5/7 to 4/6); the judge's bias stays.
    truth = np.where(moments >= WINDOW_START, rng.beta(4, 2, N), rng.beta(5, 2, N))
    bot = rng.random(N) < 0.5
    judge = np.clip(truth + np.where(bot, BIAS, 0.0) + rng.normal(0, 0.05, N), 0, 1)
    records = [VerdictRecord(
        key=VerdictKey(f"s-{i}", "rag_qa", "v1", "judge-1"), status="ok", error_class=None,
        error=None, reason="r", scores={SCORE: float(judge[i])},
        raw_scores={SCORE: float(judge[i])}, raw_output="{}", attempts=1, latency_ms=5,
        prompt_tokens=None, completion_tokens=None,
        attributes={"app": "bot" if bot[i] else "other"}, sample_ts=moments[i],
        created_at=moments[i], sample=None) for i in range(N)]
    return records, {f"s-{i}": float(truth[i]) for i in range(N)}


def fill(store: SqlStore, review: ReviewSlice, *, seed: int,
         respond: float = 1.0) -> dict[str, tuple[float, datetime, str]]:
    """Store the traffic with ``review``'s slice and label a share ``respond`` of its random
    items (chosen at random) with the truth. Returns each sample's truth, time and app."""
    records, truth = traffic(seed)
    worker = open_store(store.engine.url.render_as_string(hide_password=False), pool_size=1,
                        review=review)
    for start in range(0, N, 1000):
        worker.save(verdicts=records[start:start + 1000], owner="w")
    worker.close()
    queue = ReviewQueue(store)
    rng = np.random.default_rng(seed + 1)
    for item in list(queue.iter_items(metric="rag_qa")):
        if rng.random() < respond:
            value = truth[item.sample_id]
            queue.label(item_id=item.id, reviewer="ann", comment=None, source="import",
                        labels={SCORE: LabelValue(raw=value, value=value)}, now=NOW,
                        require_lease=False)
    return {r.key.sample_id: (truth[r.key.sample_id], r.sample_ts, r.attributes["app"])
            for r in records}


def true_mean(samples: dict[str, tuple[float, datetime, str]], app: str | None = None
              ) -> float:
    return float(np.mean([y for y, at, a in samples.values()
                          if at >= WINDOW_START and app in (None, a)]))


def estimate(store: SqlStore, segment: dict[str, str] | None = None, min_labels: int = 30):
    return estimate_score(EstimateReads(store), metric=rag_qa(), score=SCORE,
                          segment=segment or {}, start=WINDOW_START, end=NOW,
                          label_start=NOW - timedelta(days=DAYS), min_labels=min_labels,
                          confidence=0.95)


def test_the_corrected_interval_covers_what_people_say_and_the_raw_one_misses(
        any_store: SqlStore) -> None:
    samples = fill(any_store, ReviewSlice({"rag_qa": MetricSlice(rate=0.08)}), seed=11)
    for segment, app in (({}, None), ({"app": "bot"}, "bot")):
        found = estimate(any_store, segment)
        truth = true_mean(samples, app)
        assert found.status == OK and found.raw and found.corrected
        assert found.labels > 100 and found.refused == found.unlabelled == 0
        assert not found.raw.low <= truth <= found.raw.high
        assert found.corrected.low <= truth <= found.corrected.high
        assert found.raw.value - truth > 0.05
        assert found.lam == 1.0  # pooled labels: no power tuning
    assert estimate(any_store, min_labels=10_000).status == NOT_ENOUGH_LABELS


def test_a_stratified_slice_with_non_response_stays_unbiased(any_store: SqlStore) -> None:
    review = ReviewSlice({"rag_qa": MetricSlice(rate=0.05, strata=(Stratum(0.6, 0.5),))})
    samples = fill(any_store, review, seed=12, respond=0.7)
    found = estimate(any_store)
    truth = true_mean(samples)
    assert found.status == OK and found.raw and found.corrected
    assert found.unlabelled > 0
    assert found.corrected.low <= truth <= found.corrected.high
    assert not found.raw.low <= truth <= found.raw.high


def test_a_chosen_slice_is_refused(any_store: SqlStore) -> None:
    records, truth = traffic(13)
    any_store.save(verdicts=records, owner="w")
    queue = ReviewQueue(any_store)
    # The lowest scores, as an alert's evidence would be: far from a random slice.
    queue.queue_chosen(reason="filter", detail="low", now=NOW - timedelta(hours=1),
                       expire_s=86_400,
                       metric="rag_qa", score=SCORE, score_range=(0.0, 0.5))
    chosen = list(queue.iter_items())
    assert len(chosen) > 50
    for item in chosen:
        value = truth[item.sample_id]
        queue.label(item_id=item.id, reviewer="ann", comment=None, source="import",
                    labels={SCORE: LabelValue(raw=value, value=value)}, now=NOW,
                    require_lease=False)
    found = estimate(any_store)
    assert (found.status, found.labels, found.refused) == (NOT_ENOUGH_LABELS, 0, len(chosen))
    assert found.corrected is None and found.raw is not None


def test_the_command_prints_json_and_a_table(any_store: SqlStore) -> None:
    fill(any_store, ReviewSlice({"rag_qa": MetricSlice(rate=0.08)}), seed=14)
    url = any_store.engine.url.render_as_string(hide_password=False)
    args = ["review", "estimate", "--metric", "rag_qa", "--score", SCORE, "--segment",
            "app=bot", "--since", WINDOW_START.isoformat(), "--until", NOW.isoformat(),
            "--label-window", f"{DAYS}d"]
    result = CliRunner().invoke(main, [*args, "--json"], catch_exceptions=False,
                                env={"EVALFLEET_DATABASE_URL": url})
    (found,) = json.loads(result.stdout)
    assert found["status"] == OK and found["segment"] == {"app": "bot"}
    assert found["corrected"]["value"] < found["raw"]["value"] - 0.1
    assert "steady" in found["assumption"]
    table = CliRunner().invoke(main, args, env={"EVALFLEET_DATABASE_URL": url}).stdout
    assert "faithfulness" in table and "steady" in table
    status = CliRunner().invoke(main, ["review", "status", "--json", "--since",
                                       (NOW - timedelta(days=DAYS)).isoformat()],
                                env={"EVALFLEET_DATABASE_URL": url}, catch_exceptions=False)
    (in_status,) = [e for e in json.loads(status.stdout)["estimates"] if e["score"] == SCORE]
    assert in_status["status"] == OK and in_status["labels"] > 100
    assert 0.0 <= in_status["lam"] < 1.0  # the labels are the period's own: tuned
    # One time format for people, and lam said in words wherever its column is.
    assert "window 2026-11-20T12:00Z to 2026-11-22T12:00Z (sample time);" in table
    assert "lam is how much each correction leans on the judge's scores" in table
    text = CliRunner().invoke(main, ["review", "status", "--since", "10d"],
                              env={"EVALFLEET_DATABASE_URL": url}, catch_exceptions=False)
    assert "lam is how much" in text.stdout
    assert not re.search(r"\d\d:\d\d:\d\d|\+00:00", text.stdout), text.stdout
    assert re.search(r"window \d{4}-\d\d-\d\dT\d\d:\d\dZ to ", text.stdout)
    bad = CliRunner().invoke(main, [*args[:4], "--score", "nope"],
                             env={"EVALFLEET_DATABASE_URL": url})
    assert bad.exit_code == 2 and "has no score 'nope'" in bad.output
    for wrong, named in ((["--segment", "app"], "KEY=VALUE"), (["--label-window", "soon"], "soon"),
                         (["--since", "yesterday"], "yesterday"), (["--metric", "nope"], "nope")):
        result = CliRunner().invoke(main, [*args[:4], *wrong],
                                    env={"EVALFLEET_DATABASE_URL": url})
        assert result.exit_code == 2 and named in result.output, result.output


def pool_item(n: int, *, reason: str = "random", probability: float | None = 0.1,
              judge: float | None = 0.8, labels: list[object] | None = None,
              app: str = "bot", stratum: str | None = None) -> PoolItem:
    return PoolItem(id=n, sample_id=f"s-{n}", reason=reason, probability=probability,
                    stratum=stratum, judge_scores={SCORE: judge}, attributes={"app": app},
                    labels={SCORE: [0.5] if labels is None else labels})


@pytest.mark.parametrize(("item", "used", "unlabelled", "refused"), [
    (pool_item(1), 1, 0, 0),
    (pool_item(2, reason="alert", probability=None), 0, 0, 1),
    (pool_item(3, probability=0.0), 0, 0, 1),
    (pool_item(4, probability=1.5), 0, 0, 1),
    (pool_item(5, reason="filter", labels=[]), 0, 0, 0),
    (pool_item(6, judge=None), 0, 0, 0),
    (pool_item(7, labels=[None, None]), 0, 1, 0),
    (pool_item(8, labels=[]), 0, 1, 0),
    (pool_item(9, app="other"), 0, 0, 0),
])
def test_which_items_of_a_pool_count(item: PoolItem, used: int, unlabelled: int,
                                     refused: int) -> None:
    found = pool_labels([item], metric=rag_qa(), score=SCORE, segment={"app": "bot"})
    assert (len(found.items), found.unlabelled, found.refused) == (used, unlabelled, refused)


def test_non_response_raises_the_weight_of_the_labelled_items_of_its_stratum() -> None:
    pool = [pool_item(1), pool_item(2, labels=[]), pool_item(3, labels=[0.4, 0.6]),
            pool_item(4, labels=[]), pool_item(5, probability=0.5, stratum="below 0.6")]
    found = pool_labels(pool, metric=rag_qa(), score=SCORE, segment={})
    assert [(i.item, i.label, i.probability) for i in found.items] == [
        ("s-1", 0.5, pytest.approx(0.05)), ("s-3", 0.5, pytest.approx(0.05)),
        ("s-5", 0.5, 0.5)]
    assert found.unlabelled == 2
    assert [(s.name, s.labelled, s.random) for s in found.strata] == [
        ("'below 0.6' at rate 0.5", 1, 1), ("'rest' at rate 0.1", 2, 4)]


def test_a_thin_heavy_stratum_is_named_where_the_estimate_is_shown(any_store: SqlStore) -> None:
    # Low scores at 0.5 give hundreds of labels; the rest, at 0.01, a handful that would
    # each weigh a hundred verdicts.
    review = ReviewSlice({"rag_qa": MetricSlice(rate=0.01, strata=(Stratum(0.8, 0.5),))})
    fill(any_store, review, seed=15)
    found = estimate(any_store)
    assert found.status == NOT_ENOUGH_LABELS and found.corrected is None
    assert found.labels >= 100
    assert found.lacking is not None and \
        found.lacking.startswith("stratum 'rest' at rate 0.01 has ")
    url = any_store.engine.url.render_as_string(hide_password=False)
    table = CliRunner().invoke(main, [
        "review", "estimate", "--metric", "rag_qa", "--score", SCORE, "--since",
        WINDOW_START.isoformat(), "--until", NOW.isoformat(), "--label-window", f"{DAYS}d",
        "--min-labels", "30"], env={"EVALFLEET_DATABASE_URL": url}, catch_exceptions=False)
    assert f"not enough labels: {found.lacking}" in table.stdout
    allowed = estimate_score(EstimateReads(any_store), metric=rag_qa(), score=SCORE, segment={},
                             start=WINDOW_START, end=NOW, label_start=NOW - timedelta(days=DAYS),
                             min_labels=30, min_stratum_labels=1)
    assert allowed.status == OK


def test_items_queued_long_after_their_samples_correct_the_windows_of_those_samples(
        any_store: SqlStore) -> None:
    """A backfill (or the demo) judges and queues today samples taken days ago: their
    labels belong to the windows the samples are in, whatever the queue time."""
    taken = NOW - timedelta(days=5)
    records, truth = traffic(16)
    records = [replace(r, sample_ts=taken + (r.sample_ts - NOW) / 100, created_at=NOW)
               for r in records[:600]]
    worker = open_store(any_store.engine.url.render_as_string(hide_password=False),
                        pool_size=1, review=ReviewSlice({"rag_qa": MetricSlice(rate=0.25)}))
    worker.save(verdicts=records, owner="w")
    worker.close()
    queue = ReviewQueue(any_store)
    items = list(queue.iter_items(metric="rag_qa"))
    assert len(items) > 100

    def older_window(min_labels: int = 100) -> ScoreEstimate:
        return estimate_score(EstimateReads(any_store), metric=rag_qa(), score=SCORE,
                              segment={}, start=taken - timedelta(days=1), end=taken,
                              label_start=taken - timedelta(days=30), min_labels=min_labels,
                              confidence=0.95)

    before = older_window()
    assert (before.status, before.labels, before.verdicts) == (NOT_ENOUGH_LABELS, 0, 600)
    assert before.pool.start == taken - timedelta(days=30) and before.pool.end == taken
    for item in items:
        value = truth[item.sample_id]
        queue.label(item_id=item.id, reviewer="ann", comment=None, source="import",
                    labels={SCORE: LabelValue(raw=value, value=value)}, now=NOW,
                    require_lease=False)
    after = older_window()
    assert after.status == OK and after.labels == len(items)
    assert after.corrected and after.raw and after.corrected.value < after.raw.value
    # A window of queue time (today) has neither these verdicts nor their labels.
    today = estimate_score(EstimateReads(any_store), metric=rag_qa(), score=SCORE, segment={},
                           start=NOW - timedelta(days=1), end=NOW + timedelta(hours=1),
                           label_start=NOW - timedelta(days=1))
    assert (today.verdicts, today.labels) == (0, 0)
