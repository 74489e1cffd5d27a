"""Worker metrics: names, bounded segment labels, queue depth from Redis, the HTTP endpoint."""

from __future__ import annotations

import socket
import urllib.request
from datetime import UTC, datetime, timedelta

import pytest
import redis
from prometheus_client import CollectorRegistry, generate_latest

from evalfleet.broker.depth.redis import RedisQueueDepth
from evalfleet.broker.redis_keys import priority_keys
from workers.telemetry import (
    OTHER,
    QueueDepthCollector,
    SegmentLabeler,
    Telemetry,
    start_metrics_server,
)

NOW = datetime(2026, 11, 21, 12, 0, tzinfo=UTC)


def value(registry: CollectorRegistry, name: str, **labels: str) -> float | None:
    return registry.get_sample_value(name, labels)


def test_a_verdict_counts_its_outcome_scores_and_lag() -> None:
    registry = CollectorRegistry()
    telemetry = Telemetry(registry=registry, segment_keys=["app"], max_segment_values=5)
    telemetry.record_verdict(metric="rag_qa", status="ok", error_class=None,
                             attributes={"app": "bot", "route": "/x"},
                             scores={"faithfulness": 0.8, "semantic_similarity": None},
                             sample_ts=NOW - timedelta(seconds=42), created_at=NOW)
    assert value(registry, "evalfleet_verdicts_total", metric="rag_qa", status="ok",
                 error_class="", app="bot") == 1
    assert value(registry, "evalfleet_verdict_score_bucket", metric="rag_qa",
                 score="faithfulness", app="bot", le="0.8") == 1
    assert value(registry, "evalfleet_verdict_score_count", metric="rag_qa",
                 score="semantic_similarity", app="bot") is None
    assert value(registry, "evalfleet_sample_to_verdict_lag_seconds_sum", metric="rag_qa") == 42


def test_errors_waits_tokens_and_cost() -> None:
    registry = CollectorRegistry()
    telemetry = Telemetry(registry=registry)
    telemetry.record_judge_error(metric="rag_qa", error_class="judge_unavailable")
    telemetry.record_limiter_wait(metric="rag_qa", wait_s=0.3)
    telemetry.record_cost(metric="rag_qa", judge_model="gpt-4o-mini", prompt_tokens=1000,
                          completion_tokens=200, cost_usd=0.00027)
    telemetry.record_cost(metric="rag_qa", judge_model="unpriced", prompt_tokens=5,
                          completion_tokens=None, cost_usd=None)
    assert value(registry, "evalfleet_judge_errors_total", metric="rag_qa",
                 error_class="judge_unavailable") == 1
    assert value(registry, "evalfleet_rate_limiter_wait_seconds_sum", metric="rag_qa") == 0.3
    assert value(registry, "evalfleet_judge_tokens_total", metric="rag_qa",
                 model="gpt-4o-mini", kind="completion") == 200
    assert value(registry, "evalfleet_judge_cost_usd_total", metric="rag_qa",
                 model="gpt-4o-mini") == pytest.approx(0.00027)
    assert value(registry, "evalfleet_judge_cost_usd_total", metric="rag_qa",
                 model="unpriced") is None


def test_cached_prompt_tokens_are_counted_beside_the_prompt_tokens() -> None:
    registry = CollectorRegistry()
    telemetry = Telemetry(registry=registry)
    telemetry.record_cost(metric="rag_qa", judge_model="m", prompt_tokens=1500,
                          completion_tokens=100, cost_usd=None, cached_tokens=1024)
    telemetry.record_cost(metric="rag_qa", judge_model="m", prompt_tokens=1500,
                          completion_tokens=100, cost_usd=None)  # the judge reported none
    telemetry.record_cost(metric="rag_qa", judge_model="m", prompt_tokens=10,
                          completion_tokens=1, cost_usd=None, cached_tokens=64)  # over: 10
    assert value(registry, "evalfleet_judge_cached_prompt_tokens_total", metric="rag_qa",
                 model="m") == 1034
    assert value(registry, "evalfleet_judge_tokens_total", metric="rag_qa", model="m",
                 kind="prompt") == 3010


def test_segment_values_are_capped_per_key() -> None:
    labeler = SegmentLabeler(["app"], max_values=2)
    assert [labeler.values({"app": a})[0] for a in ("a", "b", "c", "a", "d")] == [
        "a", "b", OTHER, "a", OTHER]
    assert labeler.values({}) == [""]
    with pytest.raises(ValueError, match="cannot be a Prometheus label"):
        SegmentLabeler(["metric"], max_values=2)
    with pytest.raises(ValueError, match="cannot be a Prometheus label"):
        SegmentLabeler(["prompt-version"], max_values=2)


def test_queue_depth_is_read_from_redis_at_scrape_time(redis_url: str) -> None:
    """Depth is messages waiting, every priority counted, the same number producers and
    ``evalfleet status`` read."""
    client = redis.Redis.from_url(redis_url)
    client.rpush("eval.rag_qa", b"1", b"2", b"3")
    client.rpush(priority_keys("eval.rag_qa")[2], b"4", b"5")
    client.hset("unacked", "tag", b"job")
    registry = CollectorRegistry()
    registry.register(QueueDepthCollector(redis_url, ["eval.rag_qa", "eval.bbh_match"]))
    assert value(registry, "evalfleet_queue_depth", queue="eval.rag_qa") == 5
    assert RedisQueueDepth(client).depth("eval.rag_qa") == 5
    assert value(registry, "evalfleet_queue_depth", queue="eval.bbh_match") == 0
    assert value(registry, "evalfleet_unacked_jobs") == 1


def test_metrics_are_served_over_http() -> None:
    assert start_metrics_server(0) is None
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    registry = CollectorRegistry()
    Telemetry(registry=registry).record_judge_error(metric="rag_qa", error_class="truncated")
    server = start_metrics_server(port, registry=registry, host="127.0.0.1")
    try:
        text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read()
    finally:
        server.shutdown()
    assert b'evalfleet_judge_errors_total{error_class="truncated",metric="rag_qa"} 1.0' in text
    assert text == generate_latest(registry) or b"evalfleet_judge_errors_total" in text


def test_the_ops_rules_and_dashboard_use_only_metrics_that_exist(redis_url: str) -> None:
    import json
    import re
    from pathlib import Path

    import yaml

    from evalfleet.alerts.telemetry import AlertTelemetry, SegmentSample

    registry = CollectorRegistry()
    telemetry = Telemetry(registry=registry)
    telemetry.record_verdict(metric="rag_qa", status="ok", error_class=None, attributes={},
                             scores={"faithfulness": 0.5}, sample_ts=NOW, created_at=NOW)
    telemetry.record_judge_error(metric="rag_qa", error_class="schema")
    telemetry.record_limiter_wait(metric="rag_qa", wait_s=1)
    telemetry.record_cost(metric="rag_qa", judge_model="m", prompt_tokens=1, completion_tokens=1,
                          cost_usd=0.1)
    registry.register(QueueDepthCollector(redis_url, ["eval.rag_qa"]))
    alerts = AlertTelemetry(registry)
    alerts.evaluations.labels(rule="r").inc()
    alerts.notifications.labels(receiver="am", outcome="delivered").inc()
    alerts.cycle_seconds.observe(0.1)
    alerts.record_cycle([SegmentSample("r", "(all)", "ok", 40, 0.8, 0.85)], rules=["r"])
    exposed = {sample.name for family in registry.collect() for sample in family.samples}

    root = Path(__file__).resolve().parents[2] / "ops"
    rules = yaml.safe_load((root / "prometheus" / "alerts.yml").read_text())
    expressions = [rule["expr"] for group in rules["groups"] for rule in group["rules"]]
    dashboard = json.loads((root / "grafana" / "evalfleet-quality.json").read_text())
    expressions += [target["expr"] for panel in dashboard["panels"]
                    for target in panel.get("targets", [])]
    expressions += [v["definition"] for v in dashboard["templating"]["list"] if "definition" in v]
    used = {name for expr in expressions for name in re.findall(r"evalfleet_[a-z_]+", expr)}
    assert len(used) > 10
    assert used <= exposed, sorted(used - exposed)
