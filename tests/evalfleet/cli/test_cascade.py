"""``evalfleet judge cascade status`` on a file of labelled items."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from evalfleet.cli import main


def write_items(path: Path) -> Path:
    sure = {"labels": {"correct": 1.0, "reasoning": 0.75}, "tiers": [
        {"model": "nano", "scores": {"correct": 1.0, "reasoning": 0.75}, "confidence": 0.98,
         "cost_usd": 0.0001},
        {"model": "large", "scores": {"correct": 1.0, "reasoning": 0.75}, "confidence": 0.99,
         "cost_usd": 0.003}]}
    unsure = {"labels": {"correct": 0.0, "reasoning": 0.25}, "tiers": [
        {"model": "nano", "scores": {"correct": 1.0, "reasoning": 0.25}, "confidence": 0.5,
         "cost_usd": 0.0001},
        {"model": "large", "scores": {"correct": 0.0, "reasoning": 0.25}, "confidence": 0.99,
         "cost_usd": 0.003}]}
    lines = [json.dumps(sure)] * 60 + [json.dumps(unsure)] * 60 + ["not json"]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_status_as_json_and_as_a_table(tmp_path: Path) -> None:
    items = write_items(tmp_path / "labels.jsonl")
    result = CliRunner().invoke(main, ["judge", "cascade", "status", str(items), "--metric",
                                       "bbh_match", "--json"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert result.stderr.startswith("skipped line 121: ")
    assert report["items"] == 120 and report["confidence_level"] == 0.9
    nano, large = report["tiers"]
    assert (nano["model"], nano["threshold"], nano["settled_share"]) == ("nano", 0.98, 0.5)
    assert nano["guaranteed_agreement"] >= 0.85
    assert (large["labels"], large["settled_share"]) == (60, 0.5)
    assert report["usd_per_1000"] < report["last_tier_usd_per_1000"]

    table = CliRunner().invoke(main, ["judge", "cascade", "status", str(items), "--metric",
                                      "bbh_match"], catch_exceptions=False)
    assert table.exit_code == 0
    assert "probability >= 90%" in table.stdout and "nano" in table.stdout
    assert "last tier alone: $3.0000" in table.stdout


def test_no_usable_items_is_a_clear_problem(tmp_path: Path) -> None:
    empty = tmp_path / "labels.jsonl"
    empty.write_text("{}\n", encoding="utf-8")
    result = CliRunner().invoke(main, ["judge", "cascade", "status", str(empty), "--metric",
                                       "bbh_match"])
    assert result.exit_code == 2
    assert "no labelled items" in result.stderr
