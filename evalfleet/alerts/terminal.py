"""An alert as terminal text (``evalfleet alerts show`` and the demo). Pure.

Every sample and judge text is cleaned for a terminal (control characters and escape
sequences stripped, cut to a length) before it is printed: it is hostile by assumption.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from evalfleet.alerts.alert import detector_lines, drift_line
from evalfleet.alerts.evidence import (
    context_excerpt,
    failed_step_line,
    plain_text,
    session_line,
)
from evalfleet.alerts.judgecheck import check_line
from evalfleet.alerts.segment import Segment
from evalfleet.core.durations import format_duration, format_moment


def most_telling(states: Sequence[Any]) -> Segment:
    """The most specific firing segment (smallest q-value among equals), else the whole."""
    def q_value(stored: Any) -> float:
        tests = stored.finding.get("tests") or [{}]
        return min(float(t.get("q_value", 1.0)) for t in tests)

    firing = [s for s in states if s.state.state == "firing"]
    if not firing:
        return Segment()
    return min(firing, key=lambda s: (-s.segment.depth, q_value(s))).segment


#: What a rule of each kind other than ``app`` watches, in words.
_KIND_WORDS = {"judge_drift": "judge drift: canary agreement on ",
               "review_agreement": "judge against reviewers: live agreement on "}


def render_alert_view(view: Any) -> str:
    """``alerts show``'s text: every sample or judge text cleaned for a terminal."""
    spec, finding = view.rule.spec, view.finding
    clean = _cleaner(plain_text)
    lines = [f"{spec.name}  {clean(str(view.segment), 200)}",
             f"{_KIND_WORDS.get(spec.kind, '')}"
             f"score {spec.score} of {spec.metric}, alert on a {spec.direction}, "
             f"window {format_duration(spec.window)}"]
    if view.stored is None:
        lines.append("state: never evaluated (run evalfleet alerts check)")
    else:
        state = view.stored.state
        lines.append(f"state: {state.state} since {format_moment(state.since)} "
                     f"(evaluated {format_moment(view.stored.evaluated_at)})")
    if finding.get("judge_drift"):
        lines.append(clean(drift_line(finding["judge_drift"]), 2000))
    if finding.get("note"):
        lines.append(clean(finding["note"], 500))
    lines += ["", *_comparison(finding, clean)]
    if finding.get("judge_check"):
        lines.append(check_line(finding["judge_check"]))
    lines += ["", *_trend_lines(view)]
    lines += ["", "history", *(_transition_line(t) for t in view.history[-15:])]
    if not view.history:
        lines.append("  (no changes of state yet)")
    lines += ["", f"worst samples of the window {format_moment(view.window_start)} .. "
                  f"{format_moment(view.at)}"
              f" ({'highest' if spec.direction == 'increase' else 'lowest'} {spec.score} first)"]
    lines += _worst_lines(view.worst, clean) or ["  (no scored samples in the window)"]
    return "\n".join(lines)


def _cleaner(plain_text: Any) -> Any:
    def clean(text: Any, limit: int) -> str:
        return str(plain_text(None if text is None else str(text), limit=limit))
    return clean


def _comparison(finding: dict[str, Any], clean: Any) -> list[str]:
    width = 30
    lines = []
    for label, mean, n in (("window", finding.get("mean"), finding.get("n")),
                           ("baseline", finding.get("baseline_mean"), finding.get("baseline_n"))):
        if mean is None:
            lines.append(f"{label:<9}{'-':>6}  (no data)" if label == "window"
                         else f"{label:<9}{'-':>6}  (no baseline)")
            continue
        lines.append(f"{label:<9}{float(mean):>6.3f}  {_bar(float(mean), width)}  n={n}")
    if finding.get("baseline_segment"):
        lines.append(f"         baseline from {clean(finding['baseline_segment'], 200)}")
    for test in finding.get("tests", []):
        lines.append(f"{test['against']} test {test['test']}: "
                     f"effect {format_number(test['effect'])}, "
                     f"p {format_number(test['p_value'])}, q {format_number(test['q_value'])}")
    detectors = detector_lines(finding)
    lines += detectors
    if not finding.get("tests") and not detectors:
        lines.append(f"no test ran: {finding.get('observation', 'never evaluated')}")
    return lines


def _bar(value: float, width: int) -> str:
    eighths = round(max(0.0, min(1.0, value)) * width * 8)
    full, rest = divmod(eighths, 8)
    return ("█" * full + ("▏▎▍▌▋▊▉"[rest - 1] if rest else "")).ljust(width, "·")


def _trend_lines(view: Any) -> list[str]:
    points = view.trend
    if not points:
        return []
    means = [p.mean for p in points]
    known = [m for m in means if m is not None]
    step = (points[1].start - points[0].start) if len(points) > 1 else None
    every = format_duration(step) if step else "-"
    head = f"trend from {format_moment(points[0].start)}, one point per {every}"
    if not known:
        return [head, "  (no samples)"]
    blocks = "▁▂▃▄▅▆▇█"
    low, high = min(known), max(known)
    spread = (high - low) or 1.0
    line = "".join(" " if m is None else blocks[min(7, int((m - low) / spread * 8))]
                   for m in means)
    marks = "".join("^" if p.start >= view.window_start else " " for p in points)
    return [head, f"  {line}  {low:.2f} .. {high:.2f}", f"  {marks}  ^ current window"]


def _transition_line(transition: Any) -> str:
    events = f"  notified: {', '.join(transition.events)}" if transition.events else ""
    mean = transition.finding.get("mean")
    numbers = (f"  mean {format_number(mean)} n={transition.finding.get('n', 0)}"
               if mean is not None else "")
    return (f"  {format_moment(transition.at)}  {transition.previous} -> {transition.state}"
            f"{numbers}{events}")


def _worst_lines(worst: Sequence[Any], clean: Any) -> list[str]:
    lines = []
    for number, item in enumerate(worst, start=1):
        attributes = " ".join(f"{clean(k, 40)}={clean(v, 60)}"
                              for k, v in sorted(item.attributes.items()))
        lines.append(f"  {number}. {item.value:.2f}  {clean(item.sample_id, 80)}  "
                     f"{format_moment(item.sample_ts)}  {attributes}")
        sample = item.sample or {}
        if item.sample is None:
            lines.append("     (sample not kept)")
        conversation = session_line(item)
        if conversation:
            lines.append(f"     {'session:':<10}{conversation}")
        for label, key in (("question", "input"), ("answer", "output")):
            if sample.get(key):
                lines.append(f"     {label + ':':<10}{clean(sample[key], 300)}")
        chunks, more = context_excerpt(sample.get("context"), limit=300)
        lines += [f"     {'context:' if n == 1 else '':<10}[{n}] {chunk}"
                  for n, chunk in enumerate(chunks, start=1)]
        if more:
            lines.append(f"     {'':<10}({more} more chunk(s))")
        step = failed_step_line(item)
        if step:
            lines.append(f"     {'failed:':<10}{step}")
        lines.append(f"     {'judge:':<10}{clean(item.reason, 400) or '(no reasoning given)'}")
    return lines


def format_number(value: Any) -> str:
    """A statistic for a table: three decimals, two significant digits when tiny."""
    if value is None:
        return "-"
    value = float(value)
    return f"{value:.2g}" if 0 < abs(value) < 0.001 else f"{value:.3f}"
