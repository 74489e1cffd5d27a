"""``evalfleet status``, ``dead-letters`` and ``purge`` end to end: real Postgres and Redis."""

from __future__ import annotations

import json
import time
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import redis
from click.testing import CliRunner, Result

from evalfleet.cli import main
from evalfleet.core.settings import Settings
from evalfleet.store import SqlStore
from producers.enqueuer import Enqueuer
from producers.traces.conversation import TurnIn
from producers.traces.sessions import RedisSessionBuffer, SessionTiming
from tests.evalfleet.ops.builders import dead_letter, job, verdict
from tests.helpers import queued_ids


def run(settings: Settings, *args: str, **env: str) -> Result:
    return CliRunner().invoke(main, list(args), env={**settings.as_environment(), **env},
                              catch_exceptions=False)


def test_status_reads_queues_and_recent_verdicts(settings: Settings, store: SqlStore) -> None:
    now = datetime.now(UTC)
    enqueuer = Enqueuer(settings)
    enqueuer.send_many([replace(job(f"q{n}"), enqueued_at=now - timedelta(hours=1))
                        for n in range(40)])
    enqueuer.close()
    store.save(verdicts=[verdict(f"v{n}", created_at=now - timedelta(seconds=n))
                         for n in range(30)]
               + [verdict("bad", status="failed", error_class="schema", created_at=now)],
               dead_letters=[dead_letter("d", created_at=now)], owner="t")
    result = run(settings, "status", "--metric", "rag_qa", "--sample", "0", "--json",
                 "--window", "1m", "--concurrency", "4")
    assert result.exit_code == 0, result.output
    (queue,) = json.loads(result.output)["queues"]
    assert (queue["queue"], queue["waiting_jobs"], queue["in_flight_jobs"]) == (
        "eval.rag_qa", 40, 0)
    assert queue["completed_per_s"] == pytest.approx(32 / 60)
    assert 3600 <= queue["oldest_job_age_s"] < 3700
    assert [(f["error_class"], f["outcome"]) for f in queue["failures"]] == [
        ("judge_unavailable", "dead_letter"), ("schema", "failed")]
    assert queue["judge_latency_s"] == pytest.approx(0.5)
    assert queue["recommended_workers"] == 1 and queue["drain_workers"] == 1
    table = run(settings, "status", "--metric", "rag_qa", "--sample", "0").output
    assert "eval.rag_qa" in table and "waiting" in table and "judge call" in table
    assert "eval.rag_qa: failures judge_unavailable (dead letter) 1" in table


def test_status_shows_the_conversations_the_ingest_holds(settings: Settings,
                                                         store: SqlStore) -> None:
    client = redis.Redis.from_url(str(settings.resolved_shared_redis_url()))
    buffer = RedisSessionBuffer(client, timing=SessionTiming())
    first = time.time() - 2 * 3600
    buffer.add([TurnIn("conv-old", "t1", '{"order": 1}')], now_s=first)
    buffer.add([TurnIn("conv-new", "t2", '{"order": 2}')], now_s=first + 3000)
    result = run(settings, "status", "--metric", "rag_qa", "--sample", "0", "--json")
    assert result.exit_code == 0, result.output
    sessions = json.loads(result.output)["sessions"]
    assert sessions["open"] == 2 and 7200 <= sessions["oldest_age_s"] < 7300
    table = run(settings, "status", "--metric", "rag_qa", "--sample", "0").output
    assert "conversations: 2 session(s) held by the ingest" in table and "2h" in table
    client.close()


def test_status_shows_a_judge_that_changed_what_it_reports(settings: Settings,
                                                          store: SqlStore) -> None:
    now = datetime.now(UTC)
    store.save(verdicts=[
        verdict(f"a{n}", created_at=now - timedelta(hours=2, seconds=n),
                judge_reported_model="judge-2026-10", judge_fingerprint="fp_a")
        for n in range(3)
    ] + [
        verdict(f"b{n}", created_at=now - timedelta(minutes=n),
                judge_reported_model="judge-2026-11", judge_fingerprint="fp_b")
        for n in range(2)
    ] + [verdict("old", created_at=now - timedelta(days=3), judge_fingerprint="fp_0")],
        owner="t")
    result = run(settings, "status", "--metric", "rag_qa", "--sample", "0", "--json")
    identities = json.loads(result.output)["judge_identities"]
    assert [(i["reported_model"], i["fingerprint"], i["verdicts"]) for i in identities] == [
        ("judge-2026-10", "fp_a", 3), ("judge-2026-11", "fp_b", 2)]  # a day back only
    table = run(settings, "status", "--metric", "rag_qa", "--sample", "0").output
    (note,) = [line for line in table.splitlines() if "changed what it reports" in line]
    assert "judge-2026-10 (fingerprint fp_a, 3 verdicts" in note
    assert "; then judge-2026-11 (fingerprint fp_b, 2 verdicts" in note


def test_status_is_quiet_about_a_judge_that_kept_its_identity(settings: Settings,
                                                            store: SqlStore) -> None:
    now = datetime.now(UTC)
    store.save(verdicts=[verdict(f"a{n}", created_at=now, judge_reported_model="judge",
                                 judge_fingerprint="fp_a") for n in range(3)], owner="t")
    table = run(settings, "status", "--metric", "rag_qa", "--sample", "0").output
    assert "changed what it reports" not in table


def test_status_watch_estimates_arrivals_from_the_backlog(settings: Settings,
                                                          store: SqlStore) -> None:
    result = run(settings, "status", "--metric", "bbh_match", "--sample", "0", "--json",
                 "--watch", "--interval", "0.2", "--count", "2")
    frames = [json.loads(line) for line in result.output.splitlines()]
    assert len(frames) == 2
    assert frames[0]["queues"][0]["arrival_basis"] == \
        "window completions (backlog change unknown)"
    assert frames[1]["queues"][0]["arrival_basis"].startswith("completions + backlog change")


def test_status_on_the_embedded_broker_counts_its_files(store: SqlStore, database_url: str,
                                                         tmp_path: Path) -> None:
    settings = Settings(database_url=database_url, data_dir=tmp_path, batch_size=2)
    enqueuer = Enqueuer(settings)
    enqueuer.send_many([job(f"fs-{n}") for n in range(5)])
    enqueuer.close()
    result = run(settings, "status", "--metric", "rag_qa", "--sample", "0")
    assert result.exit_code == 0, result.output
    row = next(line for line in result.output.splitlines() if line.startswith("eval.rag_qa "))
    assert row.split()[1:3] == ["5", "?"]
    assert "eval.rag_qa: embedded broker: jobs a worker holds are not on disk" in result.output
    assert "eval.rag_qa: judge latency unknown: no verdicts yet" in result.output


def test_status_rejects_an_unknown_metric(settings: Settings) -> None:
    result = CliRunner().invoke(main, ["status", "--metric", "nope"],
                                env=settings.as_environment())
    assert result.exit_code == 2 and "unknown metric 'nope'" in result.output


def test_dead_letters_list_replay_purge(settings: Settings, store: SqlStore,
                                        redis_url: str) -> None:
    store.save(dead_letters=[dead_letter("a"), dead_letter("b", error_class="judge_rejected"),
                             dead_letter("c", metric="bbh_match")], owner="t")
    listed = run(settings, "dead-letters", "list", "--metric", "rag_qa").output
    assert "judge_rejected" in listed and "3 dead letters" not in listed
    assert listed.strip().endswith("2 dead letters")
    lines = run(settings, "dead-letters", "list", "--json").output.splitlines()
    assert [json.loads(line)["sample_id"] for line in lines] == ["a", "b", "c"]

    dry = run(settings, "dead-letters", "replay", "--metric", "rag_qa", "--dry-run").output
    assert dry.strip() == "would replay 2 dead letters: 2 to eval.rag_qa"
    done = run(settings, "dead-letters", "replay", "--error-class", "judge_unavailable")
    assert done.output.strip() == ("replayed 2 dead letters: 1 to eval.bbh_match, "
                                   "1 to eval.rag_qa")
    client = redis.Redis.from_url(redis_url)
    assert queued_ids(client, "rag_qa") == ["a"] and queued_ids(client, "bbh_match") == ["c"]

    refused = CliRunner().invoke(main, ["dead-letters", "purge"], env=settings.as_environment())
    assert refused.exit_code == 2 and "--yes" in refused.output
    assert run(settings, "dead-letters", "purge", "--yes").output.strip() == \
        "deleted 1 dead letter"


def test_bad_times_are_usage_errors(settings: Settings) -> None:
    result = CliRunner().invoke(main, ["dead-letters", "list", "--since", "yesterday"],
                                env=settings.as_environment())
    assert result.exit_code == 2 and "not an ISO 8601 time" in result.output


def test_purge_applies_the_retention_settings(settings: Settings, store: SqlStore) -> None:
    now = datetime.now(UTC)
    store.save(verdicts=[verdict(f"s{n}", created_at=now - timedelta(days=age))
                         for n, age in enumerate([60, 45, 20, 10, 1])], owner="t")
    assert "nothing to purge" in run(settings, "purge").output
    env = {"EVALFLEET_VERDICT_RETENTION_DAYS": "30",
           "EVALFLEET_RAW_OUTPUT_RETENTION_DAYS": "7"}
    dry = run(settings, "purge", "--dry-run", **env).output
    assert "rag_qa  2                   2" in dry and "dry run: nothing changed" in dry
    out = run(settings, "purge", **env).output
    assert "rag_qa  2                 2" in out
    assert [r.raw_output is not None for r in store.iter_verdicts()] == [False, False, True]


def test_status_names_the_endpoint_each_cascade_tier_is_asked_on(
        settings: Settings, store: SqlStore, tmp_path: Path) -> None:
    from evalfleet.core.endpoint import JudgeEndpoint
    from testkit.metrics import cascade_metrics

    metrics_dir = cascade_metrics(tmp_path / "metrics", (
        "  cascade:\n    - {check: {check: matches, pattern: 'x'}, name: answered, on_fail: 0}\n"
        "    - {model: small, endpoint: local}\n    - {model: mid, endpoint: spare}\n"
        "    - {model: large}\n"))
    named = Settings.model_validate({
        **settings.model_dump(), "metrics_dir": metrics_dir,
        "openai_base_url": "http://judge.example:8000/v1",
        "judge_endpoints": {"local": JudgeEndpoint(base_url="http://bob:pw@10.0.0.5:8080/v1")}})
    result = run(named, "status", "--metric", "bbh_match", "--sample", "0", "--json")
    assert result.exit_code == 0, result.output
    (queue,) = json.loads(result.output)["queues"]
    assert queue["judge_model"] == "large"
    # The check tier (1) runs in the worker; the password never shows.
    assert queue["judge_endpoints"] == [
        {"tier": 2, "model": "small", "endpoint": "local", "url": "http://10.0.0.5:8080/v1",
         "defined": True},
        {"tier": 3, "model": "mid", "endpoint": "spare", "url": None, "defined": False},
        {"tier": 4, "model": "large", "endpoint": None, "url": "http://judge.example:8000/v1",
         "defined": True}]
    table = run(named, "status", "--metric", "bbh_match", "--sample", "0").output
    assert ("eval.bbh_match: cascade tier 2 small on endpoint local (http://10.0.0.5:8080/v1); "
            "tier 3 mid on endpoint spare (not defined in EVALFLEET_JUDGE_ENDPOINTS: workers "
            "refuse to start); tier 4 large on the fleet's judge (http://judge.example:8000/v1)"
            ) in table
    assert "pw" not in result.output + table
    plain = run(settings, "status", "--metric", "rag_qa", "--sample", "0", "--json").output
    assert json.loads(plain)["queues"][0]["judge_endpoints"] == []
