"""`evalfleet review pending`: the slice for another labelling tool, and its labels back
by item id, counted as random."""

from __future__ import annotations

import dataclasses
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

from click.testing import CliRunner, Result

from evalfleet.cli import main
from evalfleet.core.metric import load_registry
from evalfleet.core.review_slice import MetricSlice, ReviewSlice, Stratum
from evalfleet.review.estimate import OK, estimate_score
from evalfleet.review.pending import label_studio_task
from evalfleet.store import SqlStore
from evalfleet.store.queries.estimate import EstimateReads
from evalfleet.store.queries.review_queue import ReviewQueue
from tests.evalfleet.store.queries.test_review_queue import record, reviewing

#: Verdicts stored, half with a low judge score.
N = 400

#: When they are stored: the command lists what waits now, so not a fixed day (its
#: items would expire two weeks after it).
AT = datetime.now(UTC)


def run(store: SqlStore, *args: str) -> Result:
    url = store.engine.url.render_as_string(hide_password=False)
    return CliRunner().invoke(main, list(args), env={"EVALFLEET_DATABASE_URL": url},
                              catch_exceptions=False)


def slice_of(store: SqlStore) -> dict[str, float]:
    """A stratified random slice of ``N`` verdicts, one chosen item besides; each
    sample's true score (people's), which the judge overstates by 0.2."""
    review = ReviewSlice({"rag_qa": MetricSlice(rate=0.3, strata=(Stratum(0.5, 0.8),))})
    worker = reviewing(store, review)
    truth = {f"s-{i}": (i % 10) / 10 for i in range(N)}
    worker.save(verdicts=[record(s, score=min(y + 0.2, 1.0), created_at=AT, sample_ts=AT)
                          for s, y in truth.items()], owner="w")
    worker.close()
    store.save(verdicts=[record("chosen", score=0.1, created_at=AT, sample_ts=AT)], owner="w")
    ReviewQueue(store).queue_chosen(reason="ids", detail=None, now=AT, expire_s=86400,
                                    sample_ids=["chosen"])
    truth["chosen"] = 0.0
    return truth


def test_the_pending_slice_imported_back_by_item_id_counts_as_random(
        any_store: SqlStore, tmp_path: Path) -> None:
    truth = slice_of(any_store)
    listed = run(any_store, "review", "pending", "--json", "--limit", "100000")
    rows = [json.loads(line) for line in listed.stdout.splitlines()]
    random = [r for r in rows if r["reason"] == "random"]
    assert {(r["reason"], r["probability"], r["stratum"]) for r in rows} == {
        ("random", 0.3, None), ("random", 0.8, "below 0.5"), ("ids", None, None)}
    assert len(random) > 150 and rows[0]["sample"]["input"] == "q <b>"
    assert rows[0]["scores"] == list(load_registry().get("rag_qa").spec.scores)
    assert "judge_scores" not in rows[0]  # as on the page: no anchoring

    # The tool sends labels back by item id alone (and a few bad lines).
    labels = tmp_path / "labels.jsonl"
    lines = [{"item_id": r["item_id"], "score": "faithfulness",
              "value": truth[r["sample_id"]], "reviewer": "tool"} for r in rows]
    bad = [{"item_id": 10**9, "score": "faithfulness", "value": 0.5, "reviewer": "tool"},
           {"item_id": "7", "score": "faithfulness", "value": 0.5, "reviewer": "tool"},
           {"item_id": True, "score": "faithfulness", "value": 0.5, "reviewer": "tool"},
           {"item_id": rows[0]["item_id"], "sample_id": "someone-else", "score":
            "faithfulness", "value": 0.5, "reviewer": "tool"},
           {"item_id": rows[0]["item_id"], "metric": "bbh_match", "score": "correct",
            "value": True, "reviewer": "tool"}]
    labels.write_text("\n".join(json.dumps(line) for line in [*lines, *bad]) + "\n")
    result = run(any_store, "review", "import", str(labels))
    assert result.exit_code == 1
    assert f"{len(rows)} label(s) imported, 0 item(s) queued, 5 line(s) skipped" in \
        result.stdout
    fields = ["item_id", "item_id", "item_id", "sample_id", "metric"]
    for n, (error, field) in enumerate(zip(result.stderr.splitlines(), fields, strict=True)):
        assert f"line {len(rows) + n + 1}" in error
        assert f"field '{field}'" in error or f"field {field}" in error, error

    found = estimate_score(EstimateReads(any_store), metric=load_registry().get("rag_qa"),
                           score="faithfulness", segment={}, start=AT - timedelta(hours=1),
                           end=AT + timedelta(hours=1), label_start=AT - timedelta(hours=1))
    assert found.status == OK and found.corrected is not None and found.raw is not None
    assert (found.labels, found.refused) == (len(random), 1)
    people = sum(y for s, y in truth.items() if s != "chosen") / N
    assert found.corrected.low <= people <= found.corrected.high < found.raw.low
    assert run(any_store, "review", "pending", "--json").stdout == ""


def test_label_studio_tasks_and_a_tools_lease(any_store: SqlStore) -> None:
    slice_of(any_store)
    tasks = json.loads(run(any_store, "review", "pending", "--format", "label-studio",
                           "--limit", "5").stdout)
    assert len(tasks) == 5 and set(tasks[0]) == {"data"}
    data = tasks[0]["data"]
    assert (data["input"], data["output"], data["context"]) == ("q <b>", "a", "c")
    assert data["reason"] == "random" and data["probability"] in (0.3, 0.8)

    leased = run(any_store, "review", "pending", "--lease-to", "labelstudio", "--lease",
                 "2h", "--limit", "3", "--json")
    held = {json.loads(line)["item_id"] for line in leased.stdout.splitlines()}
    assert len(held) == 3
    # Neither the page nor the listing hands them out while the tool holds them.
    listed = run(any_store, "review", "pending", "--json", "--limit", "100000").stdout
    assert held.isdisjoint(json.loads(line)["item_id"] for line in listed.splitlines())
    queue = ReviewQueue(any_store)
    for n in range(20):
        taken = queue.take(reviewer=f"r{n}", now=AT, lease_s=60)
        assert taken is not None and taken.id not in held
    assert run(any_store, "review", "pending", "--lease-to", " ").exit_code == 2
    assert run(any_store, "review", "pending", "--lease-to", "x", "--lease",
               "soon").exit_code == 2


def test_a_label_studio_export_imports_back_by_item_id(any_store: SqlStore,
                                                      tmp_path: Path) -> None:
    slice_of(any_store)
    tasks = json.loads(run(any_store, "review", "pending", "--format", "label-studio",
                           "--limit", "4").stdout)
    # What Label Studio exports once the tasks are annotated (controls named for scores).
    for n, task in enumerate(tasks):
        task["id"] = 100 + n
        task["annotations"] = [
            {"completed_by": 7, "was_cancelled": False, "result": [
                {"from_name": "faithfulness", "to_name": "output", "type": "choices",
                 "value": {"choices": ["0.75" if n else "cannot say"]}},
                {"from_name": "comment", "to_name": "output", "type": "textarea",
                 "value": {"text": ["<b>fine</b>"]}}]},
            {"completed_by": 8, "was_cancelled": True, "result": []}]
    tasks[3]["annotations"][0]["result"][0]["value"] = {"rating": 9}
    tasks.append({"data": {"text": "not ours"}, "annotations": []})
    export = tmp_path / "project-1.json"
    export.write_text(json.dumps(tasks))
    result = run(any_store, "review", "import", "--format", "label-studio", str(export))
    assert result.exit_code == 1
    assert "3 label(s) imported, 0 item(s) queued, 2 line(s) skipped" in result.stdout
    errors = result.stderr.splitlines()
    assert "project-1.json: task 4, annotation 1, faithfulness" in errors[0]
    assert "project-1.json: task 5" in errors[1] and "data.item_id" in errors[1]
    queue = ReviewQueue(any_store)
    labels = {label.item_id: label for label in queue.iter_labels()}
    ids = [task["data"]["item_id"] for task in tasks[:3]]
    assert sorted(labels) == sorted(ids)
    assert {(lab.reviewer, lab.comment) for lab in labels.values()} == {
        ("label-studio:7", "<b>fine</b>")}
    assert [labels[i].raw_value for i in ids] == [None, 0.75, 0.75]
    assert {queue.item(i).reason for i in ids} == {"random"}  # type: ignore[union-attr]
    for hostile in (b"[" * 100_000, b"{}", b"not json"):
        export.write_bytes(hostile)
        bad = run(any_store, "review", "import", "--format", "label-studio", str(export))
        assert bad.exit_code == 1 and "project-1.json" in bad.stderr


def test_a_label_studio_task_carries_an_agents_steps_as_the_judge_reads_them(
        any_store: SqlStore) -> None:
    from tests.evalfleet.alerts.notifier.test_evidence import AGENT_RUN

    slice_of(any_store)
    item = ReviewQueue(any_store).take(reviewer="ann", now=AT, lease_s=60)
    assert item is not None and item.sample is not None
    plain = label_studio_task(item, scores=["faithfulness"])["data"]
    agent = label_studio_task(dataclasses.replace(item, sample={
        **item.sample, "trajectory": AGENT_RUN}), scores=["tool_use"])["data"]
    broken = label_studio_task(dataclasses.replace(item, sample={
        **item.sample, "trajectory": {"steps": [{"type": "warp"}]}}), scores=["tool_use"])
    assert plain["trajectory"] == ""
    assert agent["trajectory"].startswith(
        "Step 1: model call\n  [assistant] asks for tool weather (call c1) with arguments "
        '{"city": "Olso"}\nStep 2: tool call weather (call c1)\n')
    assert "no such city <!channel>" in agent["trajectory"]  # verbatim: the tool escapes
    assert broken["data"]["trajectory"] == "(the trajectory kept with this sample does not read)"
