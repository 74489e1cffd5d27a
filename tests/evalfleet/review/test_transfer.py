"""``evalfleet review``: reviewers, on-demand queueing, label import and export, status."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from evalfleet.cli import main
from evalfleet.core.gold import load_gold
from evalfleet.core.metric import load_registry
from evalfleet.store import SqlStore, VerdictKey, VerdictRecord
from evalfleet.store.queries.review_queue import ReviewQueue

NOW = datetime(2026, 11, 22, 12, 0, tzinfo=UTC)


def verdict(sample_id: str, *, correct: bool = True, reasoning: int = 4) -> VerdictRecord:
    return VerdictRecord(
        key=VerdictKey(sample_id, "bbh_match", "v1", "judge-1"), status="ok",
        error_class=None, error=None, reason="judged",
        scores={"correct": float(correct), "reasoning": (reasoning - 1) / 4},
        raw_scores={"correct": correct, "reasoning": reasoning}, raw_output="{}", attempts=1,
        latency_ms=5, prompt_tokens=None, completion_tokens=None, attributes={"app": "bot"},
        sample_ts=NOW, created_at=NOW,
        sample={"input": f"question {sample_id}", "output": "<b>answer</b>", "context": None,
                "reference": "answer", "fields": {}})


def run(store: SqlStore, *args: str, input: str | None = None) -> Result:
    url = store.engine.url.render_as_string(hide_password=False)
    return CliRunner().invoke(main, list(args), env={"EVALFLEET_DATABASE_URL": url},
                              input=input, catch_exceptions=False)


def lines(*records: object) -> str:
    return "\n".join(r if isinstance(r, str) else json.dumps(r) for r in records) + "\n"


def label(sample_id: str, score: str, value: object, reviewer: str = "ann",
          **extra: object) -> dict[str, object]:
    return {"sample_id": sample_id, "metric": "bbh_match", "score": score, "value": value,
            "reviewer": reviewer, **extra}


def test_import_keeps_good_lines_and_names_bad_ones(any_store: SqlStore,
                                                    tmp_path: Path) -> None:
    any_store.save(verdicts=[verdict("s1"), verdict("s2"), verdict("s3", correct=False)],
                   owner="t")
    file = tmp_path / "labels.jsonl"
    file.write_text(lines(
        label("s1", "correct", True, comment="<script>alert(1)</script>"),
        label("s1", "reasoning", 4),
        label("s2", "correct", None, reviewer="bob"),  # cannot say
        label("s1", "correct", False, reviewer="bob"),
        label("s3", "correct", False), label("s3", "correct", False, reviewer="bob"),
        "{not json",
        label("s1", "reasoning", 7),
        label("s1", "reasoning", True),
        label("s1", "faithfulness", 0.5),
        {**label("s1", "correct", True), "metric": "nope"},
        label("missing", "correct", True),
        {**label("s1", "correct", True), "reviewer": ""},
        {**label("s1", "correct", True), "extra": 1},
        {k: v for k, v in label("s1", "correct", True).items() if k != "value"},
        "[1, 2]",
    ))
    result = run(any_store, "review", "import", str(file))
    assert result.exit_code == 1
    assert "6 label(s) imported, 3 item(s) queued, 10 line(s) skipped" in result.stdout
    errors = result.stderr.splitlines()
    expected = [("line 7", None), ("line 8", "value"), ("line 9", "value"),
                ("line 10", "value"), ("line 11", "metric"), ("line 12", "sample_id"),
                ("line 13", "reviewer"), ("line 14", "extra"), ("line 15", "value"),
                ("line 16", None)]
    assert len(errors) == len(expected)
    for error, (where, field) in zip(errors, expected, strict=True):
        assert f"labels.jsonl: {where}" in error
        assert field is None or f"field '{field}'" in error or f"field {field}" in error, error
    queue = ReviewQueue(any_store)
    items = {item.sample_id: item for item in queue.iter_items()}
    assert {i.reason for i in items.values()} == {"import"}
    assert items["s1"].labels_given == 2 and items["s1"].probability is None

    # Labels come out as the lines that went in, and import again as they are.
    exported = run(any_store, "review", "export").stdout.splitlines()
    rows = [json.loads(line) for line in exported]
    assert [(r["sample_id"], r["score"], r["value"], r["reviewer"]) for r in rows] == [
        ("s1", "correct", True, "ann"), ("s1", "reasoning", 4, "ann"),
        ("s1", "correct", False, "bob"), ("s2", "correct", None, "bob"),
        ("s3", "correct", False, "ann"), ("s3", "correct", False, "bob")]
    assert rows[0]["comment"] == "<script>alert(1)</script>"
    again = tmp_path / "again.jsonl"
    again.write_text(lines(*({k: r[k] for k in ("sample_id", "metric", "score", "value",
                                                "reviewer", "comment")} for r in rows)))
    assert run(any_store, "review", "import", str(again)).exit_code == 0

    # The gold file is one `evalfleet calibrate` reads: s1's tie on correct makes no label
    # (its reasoning stays), s2 (cannot say) is left out, s3 agrees.
    gold = tmp_path / "gold.jsonl"
    assert run(any_store, "review", "export", "--metric", "bbh_match", "--gold",
               str(gold)).exit_code == 0
    items_read, problems = load_gold(gold, metric=load_registry().get("bbh_match"))
    assert problems == []
    assert {i.sample.id: i.labels for i in items_read} == {
        "s1": {"reasoning": 4.0}, "s3": {"correct": 0.0}}
    assert items_read[0].sample.output == "<b>answer</b>"


def test_reviewers_queue_and_status(any_store: SqlStore) -> None:
    any_store.save(verdicts=[verdict("s1", correct=False), verdict("s2")], owner="t")
    result = run(any_store, "review", "add-reviewer", "ann")
    token = result.stdout.strip()
    assert result.exit_code == 0 and len(token) >= 32
    assert ReviewQueue(any_store).reviewer_for(token) == "ann"
    assert run(any_store, "review", "add-reviewer", " ").exit_code == 2
    result = run(any_store, "review", "queue", "--metric", "bbh_match", "--score", "correct",
                 "--max", "0.5", "--segment", "app=bot", "--labels", "2")
    assert result.stdout.strip() == "1 item(s) queued"
    assert run(any_store, "review", "queue", "--id", "s1", "--id", "s2").stdout.strip() == (
        "1 item(s) queued")
    items = {i.sample_id: (i.reason, i.detail, i.labels_wanted)
             for i in ReviewQueue(any_store).iter_items()}
    assert items == {"s1": ("filter", "metric=bbh_match app=bot 0<=correct<=0.5", 2),
                     "s2": ("ids", None, 1)}
    table = run(any_store, "review", "status").stdout
    assert "bbh_match" in table and "random unlabelled" in table


@pytest.mark.parametrize("values, kind, expected", [
    ([True, True, False], "binary", True),
    ([True, False], "binary", None),
    ([True, None, None], "binary", True),
    ([2, 4, 5], "ordinal", 4),
    ([2, 4], "ordinal", 2),
    ([0.25, 0.75], "continuous", 0.5),
    ([None], "continuous", None),
])
def test_several_labels_make_one(values: list[object], kind: str, expected: object) -> None:
    from evalfleet.core.labels import combine_labels
    from evalfleet.core.scales import ScoreScale

    assert combine_labels(values, scale=ScoreScale(kind)) == expected  # type: ignore[arg-type]


def test_status_shows_agreement_from_random_items(any_store: SqlStore, tmp_path: Path) -> None:
    from evalfleet.core.review_slice import MetricSlice, ReviewSlice
    from evalfleet.store import open_store

    url = any_store.engine.url.render_as_string(hide_password=False)
    worker = open_store(url, pool_size=1, review=ReviewSlice({"bbh_match": MetricSlice(1.0)}))
    worker.save(verdicts=[verdict(f"s{n}", correct=n % 3 != 0) for n in range(12)],
                owner="t")
    worker.close()
    file = tmp_path / "labels.jsonl"
    file.write_text(lines(*(label(f"s{n}", "correct", True) for n in range(12))))
    assert run(any_store, "review", "import", str(file)).exit_code == 0
    result = run(any_store, "review", "status", "--json")
    found = json.loads(result.stdout)
    (entry,) = found["agreement"]
    assert (entry["metric"], entry["judge_model"], entry["score"], entry["items"]) == (
        "bbh_match", "judge-1", "correct", 12)
    assert entry["statistics"]["accuracy"]["value"] == pytest.approx(8 / 12)
    table = run(any_store, "review", "status").stdout
    assert "accuracy 0.667 [" in table


def test_an_alerts_evidence_is_queued_as_chosen(database_url: str, tmp_path: Path) -> None:
    from evalfleet.alerts import open_alert_engine
    from evalfleet.core.settings import Settings
    from evalfleet.store import open_store
    from tests.evalfleet.alerts import stream
    from tests.evalfleet.alerts.conftest import write_rules
    from tests.evalfleet.alerts.notifier.test_evidence import plant_worst
    from tests.evalfleet.alerts.test_engine import DROP_RULE, MINUTE, T0, history
    from tests.evalfleet.alerts.test_engine import run as run_engine

    rules = write_rules(tmp_path / "rules.yaml", DROP_RULE)
    engine = open_alert_engine(Settings(database_url=database_url, alert_rules_file=rules,
                                        data_dir=tmp_path), deliver=False)
    stream.write(engine.store.engine, history(T0) + stream.steady(
        start=T0, minutes=20, per_minute=20, mean=0.70, seed=2,
        attributes={"app": "support-bot"}))
    plant_worst(database_url)
    run_engine(engine, T0 - 5 * MINUTE, 16)
    engine.close()
    result = CliRunner().invoke(main, [
        "review", "queue", "--alert", "faithfulness_drop", "--alert-segment", "app=support-bot",
        "--limit", "3"], env={"EVALFLEET_DATABASE_URL": database_url,
                              "EVALFLEET_ALERT_RULES_FILE": str(rules)}, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert "3 item(s) queued from 3 worst sample(s) of faithfulness_drop" in result.stdout
    store = open_store(database_url)
    items = list(ReviewQueue(store).iter_items())
    store.close()
    assert sorted(i.sample_id for i in items) == ["worst-0", "worst-1", "worst-2"]
    assert {(i.reason, i.probability, i.detail) for i in items} == {
        ("alert", None, "faithfulness_drop app=support-bot")}
