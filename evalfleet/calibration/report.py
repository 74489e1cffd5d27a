"""A calibration report: the judge's verdicts on a gold set against people's labels. Pure."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from evalfleet.core.agreement import Agreement, agreement
from evalfleet.core.canary import canary_series, canary_series_names
from evalfleet.core.gold import GoldItem
from evalfleet.core.metric import Metric
from evalfleet.core.scales import ScoreScale, score_scales


@dataclass(frozen=True)
class Judged:
    """What the judge said about one gold item (from its verdict)."""

    status: str
    """``ok`` or ``failed``."""
    raw_scores: Mapping[str, Any]
    """The verdict's scores on the judge's scale."""
    prompt_version: str
    judge_model: str


@dataclass(frozen=True)
class CalibrationReport:
    """Agreement on one gold set, for one metric, prompt version and judge model."""

    metric: str
    prompt_version: str
    judge_model: str
    gold: str
    """What the judge is compared with: a gold set's name (its file name), or
    ``judge:<model>`` when a shadow judge is compared with the current one."""
    items: int
    """Gold items this report covers."""
    failed: int
    """Items whose verdict failed (no scores): left out of every statistic."""
    scores: dict[str, Agreement] = field(default_factory=dict)
    """By score name, for the scores the gold set labels."""
    canary_baseline: dict[str, dict[str, dict[str, float]]] = field(default_factory=dict)
    """Gold sets only, by score name: the summary (``n``, ``total``, ``total_sq``) of
    each canary series (``agreement``, ``bias``; see ``core.canary.canary_series``) over this
    run's verdicts: the baseline the ``judge_drift`` alert rule tests canaries against."""

    def as_json(self) -> dict[str, Any]:
        """The report as JSON-safe data (``--json`` and the store)."""
        return asdict(self)


def compare(items: Sequence[GoldItem], judged: Mapping[str, Judged], *, metric: Metric,
            gold: str, seed: int = 0) -> list[CalibrationReport]:
    """Compare the judge's verdicts with the gold labels.

    Args:
        items: The gold items.
        judged: The verdict of each gold item, by the item's sample id (missing: not judged).
        metric: The metric judged.
        gold: The gold set's name.
        seed: Bootstrap seed.

    Returns:
        One report per prompt version and judge model found among the verdicts (usually
        one), in order of first appearance.
    """
    pairs = [(dict(item.labels), judged[item.sample.id]) for item in items
             if item.sample.id in judged]
    return _reports(pairs, metric=metric, reference=gold, seed=seed, baselines=True)


def compare_judges(current: Mapping[str, Judged], shadow: Mapping[str, Judged], *,
                   metric: Metric, seed: int = 0) -> list[CalibrationReport]:
    """Compare a shadow judge's verdicts with the current judge's, on the same samples.

    Args:
        current: The current judge's verdicts, by sample id.
        shadow: The shadow judge's verdicts, by sample id.
        metric: The metric judged.
        seed: Bootstrap seed.

    Returns:
        One report per shadow prompt version and judge model; the reference is the current
        judge (``judge:<model>``), and samples the current judge failed on are left out.
    """
    pairs = [({name: value for name in metric.spec.scores
               if (value := _value(current[sample_id], name)) is not None}, verdict)
             for sample_id, verdict in shadow.items() if sample_id in current]
    models = sorted({current[sample_id].judge_model for sample_id in shadow
                     if sample_id in current})
    return _reports(pairs, metric=metric, reference=f"judge:{','.join(models)}", seed=seed)


def _reports(pairs: Sequence[tuple[dict[str, float], Judged]], *, metric: Metric,
             reference: str, seed: int, baselines: bool = False) -> list[CalibrationReport]:
    """One report per prompt version and judge model among ``pairs`` (reference, verdict)."""
    scales = score_scales(metric)
    groups: dict[tuple[str, str], list[tuple[dict[str, float], Judged]]] = {}
    for pair in pairs:
        groups.setdefault((pair[1].prompt_version, pair[1].judge_model), []).append(pair)
    reports = []
    for (prompt_version, judge_model), group in groups.items():
        labelled = [name for name in scales if any(name in labels for labels, _ in group)]
        scores = {
            name: agreement([_value(verdict, name) for _, verdict in group],
                            [labels.get(name) for labels, _ in group],
                            kind=scales[name].kind, categories=scales[name].categories,
                            seed=seed)
            for name in labelled
        }
        reports.append(CalibrationReport(
            metric=metric.name, prompt_version=prompt_version, judge_model=judge_model,
            gold=reference, items=len(group),
            failed=sum(1 for _, verdict in group if verdict.status != "ok"), scores=scores,
            canary_baseline=_canary_baseline(group, scales=scales) if baselines else {}))
    return reports


def _canary_baseline(group: Sequence[tuple[dict[str, float], Judged]], *,
                     scales: Mapping[str, ScoreScale]) -> dict[str, dict[str, dict[str, float]]]:
    """Per score, the summaries of the canary series the verdicts of ``group`` make."""
    sums: dict[str, dict[str, dict[str, float]]] = {}
    for labels, verdict in group:
        if verdict.status != "ok":
            continue
        series = canary_series(verdict.raw_scores, labels, scales=scales)
        for name in labels:
            for part, series_name in zip(("agreement", "bias"), canary_series_names(name),
                                         strict=True):
                if series_name not in series:
                    continue
                value = series[series_name]
                summary = sums.setdefault(name, {}).setdefault(
                    part, {"n": 0, "total": 0.0, "total_sq": 0.0})
                summary["n"] += 1
                summary["total"] += value
                summary["total_sq"] += value * value
    return sums


def _value(verdict: Judged, name: str) -> float | None:
    if verdict.status != "ok":
        return None
    raw = verdict.raw_scores.get(name)
    return None if raw is None else float(raw)


def format_report(report: CalibrationReport) -> str:
    """The report as a table for the terminal."""
    lines = [
        f"{report.metric}: prompt {report.prompt_version}, judge {report.judge_model}, "
        f"against {report.gold}: {report.items} items, {report.failed} failed verdicts",
        f"  {'score':<22} {'kind':<10} {'n':>4}  {'statistic':<15} {'value':>7}  95% interval",
    ]
    for name, result in report.scores.items():
        head = f"  {name:<22} {result.kind:<10} {result.pairs:>4}"
        for number, (statistic, estimate) in enumerate(result.statistics.items()):
            prefix = head if number == 0 else " " * len(head)
            lines.append(f"{prefix}  {statistic:<15} {_number(estimate.value):>7}  "
                         f"{_interval(estimate.low, estimate.high)}")
        if result.confusion is not None:
            (tn, fp), (fn, tp) = result.confusion
            lines.append(f"{' ' * 30}confusion: people no/judge no {tn}, people no/judge yes "
                         f"{fp}, people yes/judge no {fn}, people yes/judge yes {tp}")
    return "\n".join(lines)


def _number(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def _interval(low: float | None, high: float | None) -> str:
    if low is None or high is None:
        return "(not enough variety)"
    return f"[{low:.3f}, {high:.3f}]"
