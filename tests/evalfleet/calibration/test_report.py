"""Comparing verdicts with gold labels, and the report's table."""

from __future__ import annotations

from evalfleet.calibration.report import Judged, compare, format_report
from evalfleet.core.gold import GoldItem
from evalfleet.core.metric import load_registry
from evalfleet.core.sample import Sample


def item(n: int, **labels: float) -> GoldItem:
    return GoldItem(Sample(id=f"g{n}"), dict(labels))


def ok(prompt: str = "p1", model: str = "m", **raw: object) -> Judged:
    return Judged("ok", raw, prompt, model)


def test_judge_scores_are_paired_with_labels_by_id() -> None:
    items = [item(n, correct=float(n % 2)) for n in range(8)]
    judged = {f"g{n}": ok(correct=bool(n % 2), reasoning=3) for n in range(8)}
    judged["g0"] = ok(correct=True, reasoning=3)  # one disagreement
    (report,) = compare(items, judged, metric=load_registry().get("bbh_match"), gold="g.jsonl")
    assert (report.items, report.failed, report.prompt_version) == (8, 0, "p1")
    assert set(report.scores) == {"correct"}  # only labelled scores are reported
    correct = report.scores["correct"]
    assert correct.confusion == [[3, 1], [0, 4]]
    assert correct.statistics["accuracy"].value == 7 / 8


def test_failed_and_missing_verdicts_are_left_out_and_counted() -> None:
    items = [item(n, faithfulness=n / 10) for n in range(6)]
    judged = {f"g{n}": ok(faithfulness=n / 10) for n in range(4)}
    judged["g4"] = Judged("failed", {}, "p1", "m")
    (report,) = compare(items, judged, metric=load_registry().get("rag_qa"), gold="g.jsonl")
    assert (report.items, report.failed) == (5, 1)
    faithfulness = report.scores["faithfulness"]
    assert (faithfulness.pairs, faithfulness.skipped) == (4, 1)
    assert faithfulness.statistics["mae"].value == 0.0


def test_one_report_per_prompt_version_and_judge_model() -> None:
    items = [item(n, faithfulness=n / 10) for n in range(6)]
    judged = {f"g{n}": ok("p1" if n < 3 else "p2", faithfulness=n / 10) for n in range(6)}
    reports = compare(items, judged, metric=load_registry().get("rag_qa"), gold="g.jsonl")
    assert [(r.prompt_version, r.items) for r in reports] == [("p1", 3), ("p2", 3)]


def test_the_table_names_every_statistic_and_interval() -> None:
    items = [item(n, faithfulness=n / 20) for n in range(20)]
    judged = {f"g{n}": ok(faithfulness=min(1.0, n / 20 + 0.01 * (n % 7))) for n in range(20)}
    (report,) = compare(items, judged, metric=load_registry().get("rag_qa"), gold="g.jsonl")
    table = format_report(report)
    assert "rag_qa: prompt p1, judge m, against g.jsonl: 20 items, 0 failed verdicts" in table
    for statistic in ("spearman", "mae", "bias"):
        assert statistic in table
    assert "[" in table and "]" in table
    assert report.as_json()["scores"]["faithfulness"]["kind"] == "continuous"


def test_the_report_keeps_the_canary_baseline_of_each_labelled_score() -> None:
    items = [item(n, correct=float(n % 2)) for n in range(8)]
    judged = {f"g{n}": ok(correct=bool(n % 2), reasoning=3) for n in range(8)}
    judged["g0"] = ok(correct=True, reasoning=3)  # one disagreement: bias +1
    judged["g1"] = Judged("failed", {}, "p1", "m")  # no series
    (report,) = compare(items, judged, metric=load_registry().get("bbh_match"), gold="g.jsonl")
    assert report.canary_baseline == {"correct": {
        "agreement": {"n": 7, "total": 6.0, "total_sq": 6.0},
        "bias": {"n": 7, "total": 1.0, "total_sq": 1.0},
    }}
    assert report.as_json()["canary_baseline"] == report.canary_baseline
