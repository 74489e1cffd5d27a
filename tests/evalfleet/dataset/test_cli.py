"""``evalfleet dataset`` end to end on the store: a filter, a file of ids, exports,
retention through ``evalfleet purge``, erasure, calibrate's --dataset. (An alert's worst
samples: tests/evalfleet/alerts/test_save_samples.py.)"""

from __future__ import annotations

import csv
import json
import re
from pathlib import Path

from click.testing import CliRunner, Result

from evalfleet.cli import main
from evalfleet.core.settings import Settings
from evalfleet.dataset import csv_row_to_json
from evalfleet.store import open_store
from evalfleet.store.queries.review_queue import LabelValue, ReviewQueue
from tests.evalfleet.dataset.test_export import check_openai_chat_line
from tests.evalfleet.store.queries.test_datasets import HOSTILE, NOW, record


def dataset(url: str, *args: str, rules: Path | None = None, **env: str) -> Result:
    settings = Settings(database_url=url, alert_rules_file=rules) if rules else \
        Settings(database_url=url)
    return CliRunner().invoke(main, ["dataset", *args],
                              env={**settings.as_environment(), **env})


def test_filters_files_exports_retention_and_erasure(database_url: str,
                                                     tmp_path: Path) -> None:
    store = open_store(database_url)
    store.save(verdicts=[record(f"s-{i}", score=i / 10, app="bot" if i % 2 else "shop",
                                minutes=i) for i in range(6)], owner="w")
    queue = ReviewQueue(store)
    queue.queue_chosen(reason="ids", detail=None, now=NOW, expire_s=3600, sample_ids=["s-1"])
    found = queue.find_item(sample_id="s-1", metric="rag_qa")
    assert found is not None
    queue.label(item_id=found.id, reviewer="ann", labels={"faithfulness": LabelValue(0.0, 0.0)},
                comment=None, source="import", now=NOW, require_lease=False)
    store.close()

    ids = tmp_path / "ids.txt"
    ids.write_bytes(b"s-2\n\x00bad\n")
    bad = dataset(database_url, "create", "from-file", "--ids-file", str(ids))
    assert bad.exit_code == 2 and "sample_id: ids.txt: line 2" in bad.output
    assert dataset(database_url, "create", "bad/name", "--id", "s-1").exit_code == 2
    assert "segment" in dataset(database_url, "create", "seg", "--segment", "app").output
    assert "score: --min and --max need --score" in dataset(database_url, "create", "lo",
                                                            "--max", "0.2").output

    made = dataset(database_url, "create", "bots", "--segment", "app=bot", "--score",
                   "faithfulness", "--max", "0.4", "--description", "<b>low</b>")
    assert made.exit_code == 0 and "bots version 1: 2 item(s)" in made.output
    ids.write_bytes(b"s-4\n\ns-5\n")
    assert "version 2: 4 item(s)" in dataset(database_url, "add", "bots", "--ids-file",
                                             str(ids)).output
    assert "version 3: 3 item(s)" in dataset(database_url, "remove", "bots", "--id",
                                             "s-4").output
    listed = dataset(database_url, "list").output
    assert "bots  3        3" in listed and "<b>low</b>" in listed
    assert re.search(r"  \d{4}-\d\d-\d\dT\d\d:\d\dZ  ", listed)  # one format for people

    out = tmp_path / "v2.csv"
    assert dataset(database_url, "export", "bots", "--version", "2", "--format", "csv",
                   "-o", str(out)).exit_code == 0
    with out.open(newline="", encoding="utf-8") as rows:
        read = [csv_row_to_json(row) for row in csv.DictReader(rows)]
    lines = dataset(database_url, "export", "bots", "--version", "2").stdout.splitlines()
    assert read == [json.loads(line) for line in lines]
    assert [r["sample_id"] for r in read] == ["s-1", "s-3", "s-4", "s-5"]
    assert read[0]["labels"] == {"faithfulness": 0.0}
    assert read[0]["sample"]["input"] == f"question s-1 {HOSTILE}"
    tuning = dataset(database_url, "export", "bots", "--format", "openai").stdout
    assert len([check_openai_chat_line(line) for line in tuning.splitlines()]) == 3
    disputed = dataset(database_url, "create", "disputed", "--disagree", "0.05")
    assert "disputed version 1: 1 item(s)" in disputed.output
    gold = dataset(database_url, "export", "bots", "--format", "gold", "--metric", "rag_qa")
    assert [json.loads(line)["id"] for line in gold.stdout.splitlines()] == ["s-1"]
    assert "left out 's-3' (rag_qa): no labels from people" in gold.stderr

    # calibrate --dataset reads the same gold set (here: none labelled for bbh_match).
    settings = Settings(database_url=database_url)
    nothing = CliRunner().invoke(main, ["calibrate", "--metric", "bbh_match", "--dataset",
                                        "bots"], env=settings.as_environment())
    assert nothing.exit_code == 2 and "no bbh_match item that people labelled" in nothing.output

    # The datasets' copies outlive their verdicts; their own retention deletes them.
    env = {"EVALFLEET_VERDICT_RETENTION_DAYS": "0.000001",
           "EVALFLEET_SAMPLE_RETENTION_DAYS": "0.000001"}
    purged = CliRunner().invoke(main, ["purge"], env={**settings.as_environment(), **env})
    assert purged.exit_code == 0, purged.output
    assert "datasets deleted" not in purged.output
    assert "s-5" in dataset(database_url, "show", "bots").output
    assert dataset(database_url, "create", "other", "--id", "s-5").exit_code == 2  # purged
    assert "1 item copies deleted" in dataset(database_url, "erase", "--id", "s-5").output
    assert "s-5" not in dataset(database_url, "show", "bots", "--version", "2").output
    expire = CliRunner().invoke(main, ["purge"], env={
        **settings.as_environment(), "EVALFLEET_DATASET_RETENTION_DAYS": "0.000001"})
    assert "datasets deleted: bots" in expire.output
    assert "name" in dataset(database_url, "delete", "bots").output
