"""Dispatching on real Redis: duplicates, shedding per policy (counted), failed publishes."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
import redis
from prometheus_client import REGISTRY

from evalfleet.broker.depth import CachedQueueDepth, RedisQueueDepth
from evalfleet.core.budget import budget_day
from evalfleet.core.errors import BrokerUnavailable
from evalfleet.core.message import decode_job
from evalfleet.core.metric import load_registry
from evalfleet.core.session import version_id
from evalfleet.core.settings import Settings
from evalfleet.core.spend import SpendLedger
from producers.budget import BudgetGate
from producers.dedupe import RedisDeduper
from producers.dispatcher import Dispatcher, shadows
from producers.enqueuer import Enqueuer
from producers.limits import FieldLimits
from producers.policy import Policy
from producers.quota import SegmentQuota
from producers.sampler import is_sampled
from producers.screen import Admitted, Screen
from tests.producers.builders import policy, producer_settings, queued, queued_ids, record

SCREEN = Screen(metrics={m.name: m for m in load_registry()}, limits=FieldLimits(),
                quota=SegmentQuota(max_tracked=100))


def admitted(ids: range, loaded: Policy, *, metrics: tuple[str, ...] = ("rag_qa",),
             app: str = "support-bot") -> list[Admitted]:
    items = []
    for n in ids:
        item = SCREEN.admit(record(n, attributes={"app": app}), record=f"r{n}", policy=loaded,
                            metrics=list(metrics), now_s=0.0)
        assert isinstance(item, Admitted)
        items.append(SCREEN.redact(item, policy=loaded))
    return items


def dispatcher(settings: Settings, client: redis.Redis) -> Dispatcher:
    return Dispatcher(publisher=Enqueuer(settings), deduper=RedisDeduper(client, window_s=60),
                      depth=CachedQueueDepth(RedisQueueDepth(client)))


def statuses(fates: list[list[object]]) -> Counter[str]:
    return Counter(fate.status for item in fates for fate in item)  # type: ignore[attr-defined]


def shed_count(metric: str, segment: str, policy_name: str) -> float:
    value = REGISTRY.get_sample_value("evalfleet_producer_shed_total",
                                      {"metric": metric, "segment": segment,
                                       "policy": policy_name})
    return value or 0.0


def test_repeats_within_the_window_are_dropped(psettings: Settings,
                                               redis_client: redis.Redis) -> None:
    loaded = policy("segments: {by: [app]}")
    first = dispatcher(psettings, redis_client)
    second = dispatcher(psettings, redis_client)  # another producer, same Redis
    assert statuses(first.dispatch(admitted(range(5), loaded), policy=loaded)) == {"enqueued": 5}
    fates = second.dispatch(admitted(range(3, 8), loaded), policy=loaded)
    assert statuses(fates) == {"duplicate": 2, "enqueued": 3}
    assert sorted(queued_ids(redis_client, "rag_qa")) == [f"req-{n:05d}" for n in range(8)]


def test_drop_new_fills_to_the_limit_and_counts_the_rest(
    psettings: Settings, redis_client: redis.Redis,
) -> None:
    loaded = policy("segments: {by: [app]}\nmetrics: {rag_qa: {max_queue_depth: 10}}")
    redis_client.rpush("eval.rag_qa", *[b"waiting"] * 4)
    before = shed_count("rag_qa", "app=support-bot", "drop_new")
    fates = dispatcher(psettings, redis_client).dispatch(admitted(range(20), loaded),
                                                         policy=loaded)
    assert statuses(fates) == {"enqueued": 6, "shed": 14}
    assert redis_client.lrem("eval.rag_qa", 0, b"waiting") == 4
    assert len(queued_ids(redis_client, "rag_qa")) == 6
    assert shed_count("rag_qa", "app=support-bot", "drop_new") - before == 14


def test_lower_rate_keeps_a_lower_share(psettings: Settings, redis_client: redis.Redis) -> None:
    loaded = policy("""
segments: {by: [app]}
metrics: {rag_qa: {rate: 1.0, max_queue_depth: 100, shed_policy: lower_rate}}
""")
    redis_client.rpush("eval.rag_qa", *[b"waiting"] * 400)  # four times the limit
    fates = dispatcher(psettings, redis_client).dispatch(admitted(range(2000), loaded),
                                                         policy=loaded)
    counts = statuses(fates)
    # The rate starts at a quarter (100/400) and falls as the queue grows: about
    # sqrt(400**2 + 2 * 100 * 2000) - 400 = 348 go in.
    assert 280 < counts["enqueued"] < 420
    assert counts["enqueued"] + counts["shed"] == 2000
    assert shed_count("rag_qa", "app=support-bot", "lower_rate") >= counts["shed"]


def test_a_failed_publish_marks_nothing(redis_url: str, tmp_path: Path,
                                              redis_client: redis.Redis) -> None:
    loaded = policy()
    broken = Dispatcher(
        publisher=Enqueuer(producer_settings("redis://127.0.0.1:1/0", tmp_path)),
        deduper=RedisDeduper(redis_client, window_s=60),
        depth=CachedQueueDepth(RedisQueueDepth(redis_client)),
    )
    batch = admitted(range(4), loaded)
    with pytest.raises(BrokerUnavailable):
        broken.dispatch(batch, policy=loaded)
    working = dispatcher(producer_settings(redis_url, tmp_path), redis_client)
    assert statuses(working.dispatch(batch, policy=loaded)) == {"enqueued": 4}


def test_a_metric_near_its_daily_budget_is_sampled_less(
    psettings: Settings, redis_client: redis.Redis, redis_url: str,
) -> None:
    loaded = policy("segments: {by: [app]}")
    ledger = SpendLedger(redis_url)
    gate = BudgetGate(ledger=ledger, budgets_usd={"rag_qa": 1.0}, soft_fraction=0.8, ttl_s=0)
    budgeted = Dispatcher(publisher=Enqueuer(psettings),
                          deduper=RedisDeduper(redis_client, window_s=60),
                          depth=CachedQueueDepth(RedisQueueDepth(redis_client)), budget=gate)
    before = shed_count("rag_qa", "app=support-bot", "budget")

    ledger.add({"rag_qa": 0.5}, day=budget_day())  # under 80% of the budget: full rate
    full = statuses(budgeted.dispatch(admitted(range(0, 400), loaded), policy=loaded))
    ledger.add({"rag_qa": 0.4}, day=budget_day())  # 90%: half the rate
    half = statuses(budgeted.dispatch(admitted(range(400, 2400), loaded), policy=loaded))
    ledger.add({"rag_qa": 0.2}, day=budget_day())  # over budget: nothing new
    none = statuses(budgeted.dispatch(admitted(range(2400, 2600), loaded), policy=loaded))
    ledger.close()

    assert full == {"enqueued": 400}
    assert 850 <= half["enqueued"] <= 1150 and half["enqueued"] + half["shed"] == 2000
    assert none == {"shed": 200}
    assert shed_count("rag_qa", "app=support-bot", "budget") - before == half["shed"] + 200
    # The samples kept at half the rate are those the full rate keeps with the lower hash.
    assert len(queued_ids(redis_client, "rag_qa")) == 400 + half["enqueued"]


def test_a_shadow_share_is_independent_of_the_sampling_rate() -> None:
    ids = [f"req-{n}" for n in range(20_000)]
    sampled = [sample_id for sample_id in ids if is_sampled(sample_id, 0.1, metric="rag_qa")]
    shadowed = [sample_id for sample_id in sampled if shadows(sample_id, share=0.5)]
    assert 0.45 <= len(shadowed) / len(sampled) <= 0.55
    assert all(shadows(sample_id, share=1.0) for sample_id in ids[:100])


def session_record(n: int, *, closed_by: str, turns: int = 2) -> dict[str, object]:
    trace_ids = [f"{n:016x}{t:016x}" for t in range(turns)]
    return {"id": version_id(f"conv-{n}", trace_ids), "input": "Weather in Oslo?",
            "output": "Rain.", "attributes": {"app": "support-bot"},
            "session": {"id": f"conv-{n}", "closed_by": closed_by, "turns": [
                {"trace_id": trace_id, "input": "Weather in Oslo?", "output": "Rain."}
                for trace_id in trace_ids]}}


def test_a_final_session_version_shed_still_goes_in_to_mark_its_verdict(
        psettings: Settings, redis_client: redis.Redis) -> None:
    metric = "conversation_goal_completion"
    loaded = policy(f"segments: {{by: [app]}}\nmetrics: {{{metric}: {{max_queue_depth: 1}}}}")
    redis_client.rpush(f"eval.{metric}", b"waiting")  # the queue is at its limit
    items = []
    for n, closed_by in enumerate(("idle", "final_wait", "end")):
        item = SCREEN.admit(session_record(n, closed_by=closed_by), record=f"r{n}",
                            policy=loaded, metrics=[metric], now_s=0.0)
        assert isinstance(item, Admitted), item
        items.append(SCREEN.redact(item, policy=loaded))
    before = shed_count(metric, "app=support-bot", "drop_new")
    fates = dispatcher(psettings, redis_client).dispatch(items, policy=loaded)
    # Judging is shed for all three (counted as such) ...
    assert statuses(fates) == {"shed": 3}
    assert shed_count(metric, "app=support-bot", "drop_new") - before == 3
    # ... but the final versions go in as jobs that only mark a verdict (no judge call).
    assert redis_client.lrem(f"eval.{metric}", 0, b"waiting") == 1
    jobs = [job for job, _ in queued(redis_client, metric)]
    assert [(job["sample"]["session"]["closed_by"], job.get("finalise_only"))
            for job in jobs] == [("final_wait", True), ("end", True)]
    assert [decode_job(job).finalise_only for job in jobs] == [True, True]
    # Sent again (a producer that retried), they are duplicates like any job.
    again = dispatcher(psettings, redis_client).dispatch(items[1:], policy=loaded)
    assert statuses(again) == {"duplicate": 2}
