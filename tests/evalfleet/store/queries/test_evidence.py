"""The evidence behind verdicts on both backends: kept samples, worst scores, retention."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

from click.testing import CliRunner

from evalfleet.cli import main
from evalfleet.core.settings import Settings
from evalfleet.ops.purger import Purger
from evalfleet.ops.retention import RetentionPolicy
from evalfleet.store import SqliteStore, SqlStore, VerdictKey, migrate
from evalfleet.store.queries.evidence import lowest_scoring, purge_samples
from tests.evalfleet.store.test_sql import NOW, record

SAMPLE = {"input": "q <b>", "output": "a", "context": ["c1"], "reference": None,
          "fields": {"evaluation_goal": "balanced"}}


def verdict(n: int, value: float, *, app: str = "bot", sample: bool = True,
            created_at: datetime = NOW, minutes_ago: int = 5) -> object:
    return record(VerdictKey(f"s{n}", "rag_qa", "v1", "judge"),
                  scores={"faithfulness": value}, raw_scores={"faithfulness": value},
                  reason=f"why {n}", attributes={"app": app, "route": "/chat"},
                  sample={**SAMPLE, "output": f"answer {n}"} if sample else None,
                  created_at=created_at, sample_ts=NOW - timedelta(minutes=minutes_ago))


def test_samples_are_kept_beside_verdicts_and_read_on_request(any_store: SqlStore) -> None:
    any_store.save(verdicts=[verdict(1, 0.5), verdict(2, 0.9, sample=False)], owner="o")
    with_samples = {v.key.sample_id: v.sample for v in any_store.iter_verdicts(
        with_samples=True)}
    assert with_samples == {"s1": {**SAMPLE, "output": "answer 1"}, "s2": None}
    assert [v.sample for v in any_store.iter_verdicts()] == [None, None]
    with any_store.engine.connect() as conn:
        assert conn.exec_driver_sql("SELECT count(*) FROM verdict_samples").scalar() == 1


def test_lowest_scoring_samples_of_a_segment(any_store: SqlStore) -> None:
    any_store.save(verdicts=[verdict(n, value, app=app) for n, (value, app) in enumerate(
        [(0.9, "bot"), (0.1, "bot"), (0.05, "other"), (0.4, "bot"), (0.2, "bot")])],
        owner="o")
    any_store.save(verdicts=[verdict(9, 0.0, minutes_ago=120)], owner="o")  # before the window
    with any_store.engine.connect() as conn:
        worst = lowest_scoring(conn, metric="rag_qa", score="faithfulness",
                               start=NOW - timedelta(hours=1), end=NOW,
                               labels={"app": "bot"}, filters={"route": ["/chat"]}, limit=3)
        other_route = lowest_scoring(conn, metric="rag_qa", score="faithfulness",
                                     start=NOW - timedelta(hours=1), end=NOW, labels={},
                                     filters={"route": ["/api"]})
        best = lowest_scoring(conn, metric="rag_qa", score="faithfulness",
                              start=NOW - timedelta(hours=1), end=NOW, labels={},
                              limit=1, highest=True)
    assert [(e.sample_id, e.value, e.reason) for e in worst] == [
        ("s1", 0.1, "why 1"), ("s4", 0.2, "why 4"), ("s3", 0.4, "why 3")]
    assert worst[0].sample == {**SAMPLE, "output": "answer 1"}
    assert worst[0].attributes == {"app": "bot", "route": "/chat"}
    assert other_route == []
    assert [e.sample_id for e in best] == ["s0"]


#: An agent's run whose second step, a tool call, went wrong.
AGENT_SAMPLE = {**SAMPLE, "trajectory": {
    "steps": [{"type": "model", "output": [{"role": "assistant", "tool_calls": [
                  {"id": "c1", "name": "weather", "arguments": {"city": "Olso"}}]}]},
              {"type": "tool", "name": "weather", "call_id": "c1",
               "arguments": {"city": "Olso \x1b[31m<b>"}, "result": "no such city"}],
    "final_answer": "I could not find it."}}


def test_the_step_the_judge_named_goes_with_the_worst_samples(any_store: SqlStore) -> None:
    from evalfleet.alerts.alert import evidence_line
    from evalfleet.alerts.evidence import evidence_details, failed_step_line

    any_store.save(verdicts=[
        record(VerdictKey(sample_id, "agent_tool_use", "v1", "judge"),
               scores={"tool_use": value}, raw_scores={"tool_use": value},
               reason="the city was misspelt", sample=sample, failed_step=step,
               attributes={"app": "bot"}, sample_ts=NOW - timedelta(minutes=5))
        for sample_id, value, step, sample in [
            ("named", 0.1, 2, AGENT_SAMPLE), ("gone", 0.2, 2, None),
            ("past-the-end", 0.3, 9, AGENT_SAMPLE), ("none", 0.4, None, AGENT_SAMPLE)]],
        owner="o")
    with any_store.engine.connect() as conn:
        worst = lowest_scoring(conn, metric="agent_tool_use", score="tool_use",
                               start=NOW - timedelta(hours=1), end=NOW, labels={})
    assert [(e.sample_id, e.failed_step) for e in worst] == [
        ("named", 2), ("gone", 2), ("past-the-end", 9), ("none", None)]
    # The escape inside the arguments stays JSON-escaped text: nothing for a terminal to run.
    assert [failed_step_line(e) for e in worst] == [
        'step 2 of 2: tool call weather {"city": "Olso \\u001b[31m<b>"} -> no such city',
        "step 2", "step 9", None]
    details = evidence_details(worst)
    assert [(d.get("failed_step"), d.get("step")) for d in details] == [
        (2, "tool call weather"), (2, None), (9, None), (None, None)]
    assert evidence_line(details[0]) == (
        "0.1 named at step 2, tool call weather: the city was misspelt")
    assert evidence_line(details[3]) == "0.4 none: the city was misspelt"


def test_sample_retention_purges_samples_and_keeps_verdicts(any_store: SqlStore) -> None:
    any_store.save(verdicts=[verdict(n, 0.5, created_at=NOW - timedelta(days=age))
                             for n, age in enumerate([9, 8, 7, 1, 0])], owner="o")
    assert purge_samples(any_store.engine, before=NOW - timedelta(days=5), dry_run=True) == (
        3, 0)
    assert purge_samples(any_store.engine, before=NOW - timedelta(days=5), batch_rows=2) == (
        3, 2)
    kept = [v.sample is not None for v in any_store.iter_verdicts(with_samples=True)]
    assert kept == [False, False, False, True, True]


def test_purging_a_verdict_deletes_its_sample_and_scores(any_store: SqlStore) -> None:
    any_store.save(verdicts=[verdict(1, 0.5, created_at=NOW - timedelta(days=3)),
                             verdict(2, 0.5)], owner="o")
    Purger(any_store, RetentionPolicy(verdict_days=2)).run(now=NOW)
    with any_store.engine.begin() as conn:
        for table in ("verdicts", "verdict_samples", "verdict_scores"):
            assert conn.exec_driver_sql(f"SELECT count(*) FROM {table}").scalar() == 1


def test_export_adds_the_sample_only_when_asked(store: SqlStore, database_url: str) -> None:
    store.save(verdicts=[verdict(1, 0.5), verdict(2, 0.7, sample=False)], owner="o")
    env = Settings(database_url=database_url).as_environment()
    plain = CliRunner().invoke(main, ["export"], env=env, catch_exceptions=False).output
    rows = [json.loads(line) for line in plain.splitlines()]
    assert all("sample" not in row for row in rows) and len(rows) == 2
    full = CliRunner().invoke(main, ["export", "--with-sample"], env=env,
                              catch_exceptions=False).output
    assert [json.loads(line)["sample"] for line in full.splitlines()] == [
        {**SAMPLE, "output": "answer 1"}, None]


def test_read_only_commands_read_the_read_url(store: SqlStore, database_url: str,
                                             tmp_path: Path) -> None:
    replica = SqliteStore(f"sqlite:///{tmp_path / 'replica.db'}")
    migrate(replica.engine)
    replica.save(verdicts=[verdict(1, 0.5)], owner="o")
    replica.close()
    store.save(verdicts=[verdict(2, 0.5), verdict(3, 0.5)], owner="o")
    env = {**Settings(database_url=database_url).as_environment(),
           "EVALFLEET_DATABASE_READ_URL": f"sqlite:///{tmp_path / 'replica.db'}"}
    out = CliRunner().invoke(main, ["export"], env=env, catch_exceptions=False).output
    assert [json.loads(line)["sample_id"] for line in out.splitlines()] == ["s1"]
    # Writes go to the primary: the purge deletes there.
    CliRunner().invoke(main, ["purge"], env={**env, "EVALFLEET_VERDICT_RETENTION_DAYS": "0.001"},
                       catch_exceptions=False)
    assert store.counts().verdicts == 0


def test_purge_command_applies_the_sample_retention(store: SqlStore, database_url: str) -> None:
    now = datetime.now(UTC)
    store.save(verdicts=[verdict(n, 0.5, created_at=now - timedelta(days=age))
                         for n, age in enumerate([10, 1])], owner="o")
    env = {**Settings(database_url=database_url).as_environment(),
           "EVALFLEET_SAMPLE_RETENTION_DAYS": "3"}
    dry = CliRunner().invoke(main, ["purge", "--dry-run"], env=env, catch_exceptions=False)
    assert "samples to delete: 1 of verdicts created before" in dry.output
    out = CliRunner().invoke(main, ["purge"], env=env, catch_exceptions=False)
    assert "samples deleted: 1 of verdicts created before" in out.output
    assert [v.sample is not None for v in store.iter_verdicts(with_samples=True)] == [
        False, True]
