"""What each page shows, read from the store and shaped for its template.

Every method returns plain data; the templates escape it. Text from samples, judges
and errors is passed as text (never marked safe); secrets are masked in error text.
"""

from __future__ import annotations

import functools
import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from evalfleet.alerts.alert import detector_lines, drift_line
from evalfleet.alerts.evidence import (
    context_excerpt,
    failed_step_line,
    session_line,
)
from evalfleet.alerts.rule import (
    CalibrationBaseline,
    PinnedBaseline,
    Rule,
    RuleSet,
)
from evalfleet.alerts.segment import Segment
from evalfleet.alerts.state import ATTENTION_ORDER
from evalfleet.alerts.view import load_alert_view, load_histogram, load_history, load_trend
from evalfleet.core.durations import format_duration, parse_duration
from evalfleet.core.errors import InvalidInput
from evalfleet.core.log import scrub
from evalfleet.core.metric import MetricRegistry
from evalfleet.core.simulator import judged_by_simulator
from evalfleet.review.estimate import LABEL_WINDOW, ScoreEstimate, metric_estimates
from evalfleet.store.queries.estimate import EstimateReads
from evalfleet.store.queries.pages import (
    count_by_metric,
    load_dead_letters,
    load_points,
    load_state_rows,
    load_verdict,
)
from evalfleet.store.sql import SqlStore
from evalfleet.web.charts import histogram, polyline, shared_top, time_ticks, y_of
from evalfleet.web.session import session_view
from evalfleet.web.trajectory import trajectory_view

#: Evaluations a sparkline shows.
SPARK_POINTS = 48

#: Ranges the trend page offers.
RANGES = ("1h", "6h", "24h", "2d")

#: Estimates the pages keep (rule, segment and window each).
ESTIMATES_KEPT = 256

#: Chart boxes, in SVG units.
SPARK_W, SPARK_H = 120.0, 24.0
CHART_W, CHART_H = 720.0, 200.0
HIST_W, HIST_H = 300.0, 120.0


#: How far back the pages look for verdicts the judge simulator gave.
SIMULATED_LOOKBACK = timedelta(days=7)

#: How long that answer is kept before the store is asked again, in seconds.
SIMULATED_TTL_S = 60.0


@dataclass
class PageData:
    """The sources the pages read.

    Args:
        store: The verdict store.
        rules: The alert rules.
        secrets: Masked in error text.
        health: Reads the fleet's queues and activity (None: not available).
        registry: The metrics (None: no corrected means).
    """

    store: SqlStore
    rules: RuleSet
    secrets: Sequence[str] = ()
    health_reader: Callable[[], dict[str, Any]] | None = None
    registry: MetricRegistry | None = None
    """The metrics, for corrected means beside the judge's (None: not shown)."""
    _simulated: tuple[float, bool] | None = field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        # An estimate reads its whole label pool: seconds at millions of verdicts. A
        # page's window ends at the rule's last evaluation, so the views between two
        # evaluations share one estimate, until a label is given (then it is read again,
        # so a reviewer sees their labels move the corrected mean).
        self._estimates = functools.lru_cache(maxsize=ESTIMATES_KEPT)(self._compute_estimate)

    def overview(self) -> dict[str, Any]:
        """Every rule and segment: state, sparkline of window against baseline, last change."""
        rules = {rule.name: rule for rule in self.rules.rules}
        with self.store.connect() as conn:
            states = [s for s in load_state_rows(conn) if s.rule in rules]
            points: dict[tuple[str, str], list[Any]] = {}
            for name, rule in rules.items():
                latest = max((s.evaluated_at for s in states if s.rule == name), default=None)
                if latest is None:
                    continue
                since = latest - rule.spec.interval * SPARK_POINTS
                for key, series in load_points(conn, rule=name, since=since).items():
                    points[(name, key)] = series[-SPARK_POINTS:]
        rows: list[dict[str, Any]] = []
        for state in states:
            series = points.get((state.rule, state.segment_key), [])
            segment = Segment(state.labels)
            rows.append({
                "rule": state.rule, "segment": str(segment), "depth": segment.depth,
                "state": state.state, "since": state.since,
                "n": state.finding.get("n"), "mean": state.finding.get("mean"),
                "baseline_mean": state.finding.get("baseline_mean"),
                "window_line": polyline([p.mean for p in series], width=SPARK_W,
                                        height=SPARK_H),
                "baseline_line": polyline([p.baseline_mean for p in series], width=SPARK_W,
                                          height=SPARK_H),
            })
        rows.sort(key=lambda r: (ATTENTION_ORDER.get(r["state"], 9), r["rule"], r["depth"],
                                 r["segment"]))
        counts: dict[str, int] = {}
        for row in rows:
            counts[row["state"]] = counts.get(row["state"], 0) + 1
        return {"rows": rows, "counts": counts, "rules": list(rules.values()),
                "spark": {"w": SPARK_W, "h": SPARK_H}, "simulated": self.simulated()}

    def simulated(self) -> bool:
        """Whether verdicts stored in the last week came from the judge simulator (the
        store is asked at most once a minute)."""
        now = time.monotonic()
        if self._simulated is None or now - self._simulated[0] > SIMULATED_TTL_S:
            identities = self.store.judge_identities(
                since=datetime.now(UTC) - SIMULATED_LOOKBACK)
            self._simulated = (now, any(judged_by_simulator(identity.fingerprint)
                                        for identity in identities))
        return self._simulated[1]

    def alert(self, rule_name: str, *, segment: str) -> dict[str, Any] | None:
        """One rule and segment: tests, distributions, worst samples, history."""
        rule = self._rule(rule_name)
        parsed = _segment_of(segment, rule) if rule else None
        if rule is None or parsed is None:
            return None
        view = load_alert_view(self.store, rule, parsed, worst=10)
        window, baseline, baseline_label = self._distributions(rule, view)
        return {
            "simulated": self.simulated(),
            "rule": rule, "spec": rule.spec, "segment": str(parsed), "view": view,
            "finding": view.finding, "tests": view.finding.get("tests", []),
            "detectors": detector_lines(view.finding),
            "judge_drift": (drift_line(view.finding["judge_drift"])
                            if view.finding.get("judge_drift") else None),
            **_histograms(window, baseline),
            "window_count": sum(window), "baseline_count": sum(baseline),
            "baseline_label": baseline_label,
            "worst": [{**_evidence_row(item)} for item in view.worst],
            "scored_by": self._scored_by(rule),
            "check": view.finding.get("judge_check"),
            "estimate": self._estimate(rule, parsed, start=view.at - rule.spec.window,
                                       end=view.at),
        }

    def _distributions(self, rule: Rule, view: Any) -> tuple[list[int], list[int], str]:
        """The window's and the baseline's histograms (counts per bin), and what the
        baseline's shows."""
        spec = rule.spec
        at, baseline = view.at, spec.baseline
        window = view.histogram
        if isinstance(baseline, PinnedBaseline):
            label = view.finding.get("baseline_segment")
            source = _segment_of(label, rule) if label else None
            if source is None:
                return window, [], "no baseline segment yet"
            shown = min(spec.window, baseline.window)  # as a trailing baseline's, below
            with self.store.connect() as conn:
                shown_counts = load_histogram(conn, rule, source, start=at - shown, end=at)
            return window, shown_counts, f"{source}, last {format_duration(shown)}"
        if isinstance(baseline, CalibrationBaseline):
            return window, [], str(view.finding.get("note") or "the last calibration")
        # The baseline's whole set of samples is not read for a picture (a day of a busy
        # segment is a million rows): its last window-length, the tests' numbers are its all.
        shown = min(spec.window, baseline.window)
        return window, view.baseline_histogram, (
            f"the same segment, the last {format_duration(shown)} of the"
            f" {format_duration(baseline.window)} before the window (firing periods included)")

    def trend(self, rule_name: str, *, segment: str | None, span: str,
              filter_text: str) -> dict[str, Any] | None:
        """A segment's mean over ``span`` with the baseline band and alert markers."""
        rule = self._rule(rule_name)
        if rule is None:
            return None
        span = span if span in RANGES else "6h"
        width = parse_duration(span)
        wanted = _labels_of(filter_text)
        with self.store.connect() as conn:
            states = [s for s in load_state_rows(conn) if s.rule == rule.name]
            matching = [Segment(s.labels) for s in states
                        if wanted.items() <= dict(s.labels).items()]
            chosen = _chosen_segment(_segment_of(segment, rule) or Segment(), wanted,
                                     matching)
            choices = [str(s) for s in matching]
            if str(chosen) not in choices:  # the list shows what the heading says
                choices.insert(0, str(chosen))
            end = max((s.evaluated_at for s in states), default=datetime.now(UTC))
            buckets = load_trend(conn, rule, chosen, end=end, span=width, buckets=48)
            points = load_points(conn, rule=rule.name, since=end - width,
                                 segment_key=chosen.key).get(chosen.key, [])
            history = [t for t in load_history(conn, rule=rule.name, segment=chosen)
                       if t.at >= end - width]
        start = end - width
        return {
            "rule": rule, "spec": rule.spec, "segment": str(chosen), "choices": choices,
            "filter": filter_text, "range": span, "ranges": RANGES,
            "chart": _trend_chart(buckets, points, history, start=start, end=end,
                                  min_effect=rule.spec.min_effect),
            "buckets": buckets, "history": history, "start": start, "end": end,
            "estimate": self._estimate(rule, chosen, start=start, end=end),
            "scored_by": self._scored_by(rule),
        }

    def _scored_by(self, rule: Rule) -> str:
        """Who gave the rule's scores: ``check`` for a metric scored by code, else ``judge``."""
        metric = rule.spec.metric
        if self.registry is None or metric not in self.registry.names():
            return "judge"
        return "check" if self.registry.get(metric).spec.kind == "check" else "judge"

    def _estimate(self, rule: Rule, segment: Segment, *, start: datetime,
                  end: datetime) -> ScoreEstimate | None:
        """The rule's score over the window: the judge's mean and the corrected one."""
        return self._estimates(rule.name, segment, start, end,
                               EstimateReads(self.store).labels_mark())

    def _compute_estimate(self, rule_name: str, segment: Segment, start: datetime,
                          end: datetime, labels_mark: tuple[int, datetime | None]
                          ) -> ScoreEstimate | None:
        """The estimate; ``labels_mark`` only keys the cache (the labels it was read with)."""
        rule = self._rule(rule_name)
        if rule is None:
            return None
        spec = rule.spec
        if self.registry is None or spec.kind != "app" or spec.metric not in \
                self.registry.names():
            return None
        try:
            (found,) = metric_estimates(
                EstimateReads(self.store), metric=self.registry.get(spec.metric),
                scores=[spec.score], segment=segment.as_dict(), filters=rule.spec.filter_values,
                start=start,
                end=end, label_start=end - LABEL_WINDOW)
        except InvalidInput:  # a stored score the metric file does not declare
            return None
        return found

    def verdict(self, verdict_id: int) -> dict[str, Any] | None:
        """One verdict and the sample it judged."""
        with self.store.connect() as conn:
            found = load_verdict(conn, verdict_id)
        if found is None:
            return None
        sample = found.get("sample") or None
        return {
            "v": found, "sample": sample,
            "trajectory": trajectory_view(sample.get("trajectory"),
                                          failed_step=found.get("failed_step"))
            if sample else None,
            "session": session_view(sample.get("session")) if sample else None,
            "fields_json": json.dumps(sample.get("fields") or {}, indent=2, ensure_ascii=False)
            if sample else "",
            "error": self._mask(found.get("error")),
            "raw_output": self._mask(found.get("raw_output")),
        }

    def dead_letters(self) -> dict[str, Any]:
        """The newest dead letters, with their payloads."""
        with self.store.connect() as conn:
            letters = load_dead_letters(conn)
        return {"letters": [
            {**letter, "error": self._mask(letter["error"]),
             "payload_json": self._mask(json.dumps(letter["payload"], indent=2,
                                                   ensure_ascii=False)[:20_000])}
            for letter in letters]}

    def health(self) -> dict[str, Any]:
        """Queues (depth, in flight, lag, failures) and coverage per metric."""
        with self.store.connect() as conn:
            counts = count_by_metric(conn)
        queues = self.health_reader() if self.health_reader else {"queues": []}
        waiting = {q["metric"]: (q.get("waiting_jobs"), q.get("in_flight_jobs"))
                   for q in queues.get("queues", [])}
        coverage = []
        for metric in sorted(set(counts) | set(waiting)):
            numbers = counts.get(metric, {})
            judged = numbers.get("ok", 0) + numbers.get("failed", 0)
            dead = numbers.get("dead_letters", 0)
            queued, in_flight = waiting.get(metric, (None, None))
            known = queued is not None and in_flight is not None
            accepted = judged + dead + ((queued or 0) + (in_flight or 0))
            coverage.append({"metric": metric, "ok": numbers.get("ok", 0),
                             "failed": numbers.get("failed", 0), "dead": dead,
                             "waiting": queued, "in_flight": in_flight,
                             "share": judged / accepted if accepted and known else None})
        return {"queues": queues.get("queues", []), "coverage": coverage,
                "queue_error": queues.get("error")}

    def _rule(self, name: str) -> Rule | None:
        return next((rule for rule in self.rules.rules if rule.name == name), None)

    def _mask(self, text: str | None) -> str | None:
        return scrub(text, self.secrets) if text else text


def _labels_of(text: str | None) -> dict[str, str]:
    labels: dict[str, str] = {}
    for part in (text or "").split(","):
        key, sep, value = part.partition("=")
        if sep and key.strip():
            labels[key.strip()] = value.strip()
    return labels


def _chosen_segment(asked: Segment, wanted: dict[str, str],
                    matching: Sequence[Segment]) -> Segment:
    """The segment a trend shows: the one asked for when it has the filter's attributes,
    else the broadest segment that has them (the filter filters), else the one asked for."""
    if wanted.items() <= asked.as_dict().items() or not matching:
        return asked
    return min(matching, key=lambda s: (len(s.labels), str(s)))


def _segment_of(text: str | None, rule: Rule) -> Segment | None:
    """A segment as printed, in the rule's key order; None when it is not a level."""
    if text is None or text.strip() in ("", "(all)"):
        return Segment()
    labels = _labels_of(text)
    keys = rule.spec.segment_keys[: len(labels)]
    if sorted(labels) != sorted(keys):
        return None
    return Segment(tuple((key, labels[key]) for key in keys))


def _histograms(window: Sequence[int], baseline: Sequence[int]) -> dict[str, Any]:
    """The window's and the baseline's histograms on one scale (share of each one's
    samples), so their bars compare by height; no baseline draws empty bins."""
    baseline = baseline or [0] * len(window)
    top = shared_top(window, baseline)
    return {"window_bars": histogram(window, width=HIST_W, height=HIST_H, top_share=top),
            "baseline_bars": histogram(baseline, width=HIST_W, height=HIST_H, top_share=top),
            "hist": {"w": HIST_W, "h": HIST_H, "top": top}}


def _evidence_row(item: Any) -> dict[str, Any]:
    sample = item.sample or {}
    context, more = context_excerpt(sample.get("context"))
    return {"verdict_id": item.verdict_id, "sample_id": item.sample_id, "value": item.value,
            "reason": item.reason, "at": item.sample_ts, "attributes": item.attributes,
            "input": sample.get("input"), "output": sample.get("output"),
            "context": context, "more_context": more, "kept": item.sample is not None,
            "failed_step": failed_step_line(item), "step_number": item.failed_step,
            "session": session_line(item)}


def _trend_chart(buckets: Sequence[Any], points: Sequence[Any], history: Sequence[Any], *,
                 start: datetime, end: datetime, min_effect: float) -> dict[str, Any]:
    span_s = (end - start).total_seconds() or 1.0

    def x_at(moment: datetime) -> float:
        return round((moment - start).total_seconds() / span_s * CHART_W, 1)

    band_top = [(x_at(p.at), y_of(p.baseline_mean, height=CHART_H)) for p in points
                if p.baseline_mean is not None]
    band_bottom = [(x_at(p.at), y_of(max(0.0, p.baseline_mean - min_effect), height=CHART_H))
                   for p in points if p.baseline_mean is not None]
    band = " ".join(f"{x},{y}" for x, y in band_top + band_bottom[::-1])
    count = len(buckets) or 1
    dots = [{"x": round((i + 0.5) * CHART_W / count, 1), "y": y_of(b.mean, height=CHART_H),
             "n": b.n, "mean": b.mean, "at": b.start}
            for i, b in enumerate(buckets) if b.mean is not None]
    return {
        "w": CHART_W, "h": CHART_H,
        "line": " ".join(f"{dot['x']},{dot['y']}" for dot in dots),
        "dots": dots,
        "step": format_duration((end - start) / count),
        "band": band,
        "markers": [{"x": x_at(t.at), "state": t.state, "at": t.at} for t in history
                    if t.state in ("firing", "resolved")],
        # ``g``: 0.25 stays 0.25 (a fixed one decimal showed it as 0.2).
        "grid": [{"y": y_of(v, height=CHART_H), "label": f"{v:g}"}
                 for v in (0.0, 0.25, 0.5, 0.75, 1.0)],
        "ticks": time_ticks(start, end, width=CHART_W),
    }
