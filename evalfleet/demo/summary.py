"""The demo's summary table: verdicts and mean scores per metric and segment. Pure."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from statistics import fmean

from evalfleet.store import VerdictRecord

#: Attributes that make a segment in the summary.
SEGMENT_KEYS = ("app", "route", "prompt_version")


@dataclass
class SegmentSummary:
    """Verdict counts and score values of one metric in one segment."""

    metric: str
    segment: tuple[str, ...]
    ok: int = 0
    failed: int = 0
    values: dict[str, list[float]] = field(default_factory=dict)


def summarise(records: Iterable[VerdictRecord]) -> list[SegmentSummary]:
    """Group verdicts by metric and segment, sorted."""
    groups: dict[tuple[str, tuple[str, ...]], SegmentSummary] = {}
    for record in records:
        segment = tuple(record.attributes.get(key, "-") for key in SEGMENT_KEYS)
        group = groups.setdefault((record.key.metric, segment),
                                  SegmentSummary(record.key.metric, segment))
        if record.status == "ok":
            group.ok += 1
        else:
            group.failed += 1
        for name, value in record.scores.items():
            if value is not None:
                group.values.setdefault(name, []).append(value)
    return [groups[key] for key in sorted(groups)]


def format_summary(summaries: list[SegmentSummary]) -> str:
    """A plain-text table, one line per metric and segment, mean of each score."""
    score_names = sorted({name for s in summaries for name in s.values})
    header = ["metric", *SEGMENT_KEYS, "ok", "failed", *score_names]
    rows = [header]
    for summary in summaries:
        means = [f"{fmean(summary.values[name]):.2f}" if summary.values.get(name) else "-"
                 for name in score_names]
        rows.append([summary.metric, *summary.segment, str(summary.ok), str(summary.failed),
                     *means])
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    lines = ["  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True))
             for row in rows]
    lines.insert(1, "  ".join("-" * width for width in widths))
    return "\n".join(lines)
