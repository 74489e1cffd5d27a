"""``evalfleet alerts``: evaluate the alert rules once (``check``) or show states (``list``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import click

from evalfleet.cli.context import CliState, open_existing_store, parse_time, pass_state
from evalfleet.cli.jsonout import echo_json
from evalfleet.core.durations import format_moment
from evalfleet.core.errors import EvalfleetError

if TYPE_CHECKING:
    from evalfleet.alerts.segment import Segment


@click.group()
def alerts() -> None:
    """Alert rules on score drops: evaluate them, list their states."""


@alerts.command("check")
@click.option("--at", "at_text", default=None,
              help="Evaluate as of this time (ISO 8601, or 15m/2h ago); default now.")
@click.option("--no-deliver", is_flag=True, help="Queue notifications without sending them.")
@pass_state
def alerts_check(state: CliState, at_text: str | None, no_deliver: bool) -> None:
    """Evaluate every rule once, deliver notifications and print a table (for cron and tests).

    Exits with status 1 when any segment is firing.
    """
    from evalfleet.alerts import open_alert_engine
    from evalfleet.alerts.terminal import format_number

    try:
        at = parse_time(at_text)
        engine = open_alert_engine(state.settings, deliver=not no_deliver)
    except (ValueError, EvalfleetError) as exc:
        raise click.UsageError(str(exc)) from None
    try:
        report = engine.check(at=at)
    finally:
        engine.close()
    click.echo(f"alerts evaluated at {format_moment(report.at)}")
    rows = [[row.rule, row.segment, row.previous, row.state, str(row.n),
             format_number(row.mean), format_number(row.baseline_mean),
             format_number(row.effect), format_number(row.q_value), row.test or "",
             ",".join(row.events)] for row in report.rows]
    click.echo(render_table(["rule", "segment", "was", "state", "n", "mean", "baseline",
                             "effect", "q", "test", "notified"], rows))
    for row in report.rows:
        if row.note:
            click.echo(f"{row.rule}: {row.note}")
    for name in report.skipped:
        click.echo(f"{name}: already evaluated in this cycle by another evaluator")
    delivery = report.delivery
    for label, counts in (("delivered", delivery.delivered), ("retrying", delivery.retrying),
                          ("failed", delivery.failed)):
        for receiver, count in sorted(counts.items()):
            click.echo(f"notifications {label}: {receiver} {count}")
    if any(row.state == "firing" for row in report.rows):
        raise SystemExit(1)


@alerts.command("list")
@click.option("--all", "show_all", is_flag=True, help="Include segments that are ok.")
@click.option("--json", "as_json", is_flag=True, help="Print the states as JSON.")
@pass_state
def alerts_list(state: CliState, show_all: bool, as_json: bool) -> None:
    """Show the current state of every rule and segment (not ok ones unless --all)."""
    from evalfleet.alerts.ledger import load_states
    from evalfleet.alerts.state import ATTENTION_ORDER
    from evalfleet.alerts.terminal import format_number

    load_rules(state)  # a missing or bad rules file is reported as `alerts check` does
    store = open_existing_store(state.settings.resolved_read_database_url(), pool_size=1)
    try:
        with store.connect() as conn:
            stored = load_states(conn)
    finally:
        store.close()
    # What needs a person first, as on the overview page.
    stored.sort(key=lambda s: (ATTENTION_ORDER.get(s.state.state, 9), s.rule, s.segment.depth,
                               str(s.segment)))
    if as_json:
        echo_json([{"rule": s.rule, "segment": str(s.segment), "state": s.state.state,
                    "since": s.state.since, "evaluated_at": s.evaluated_at,
                    "finding": s.finding}
                   for s in stored if show_all or s.state.state != "ok"])
        return
    rows = [
        [s.rule, str(s.segment), s.state.state, format_moment(s.state.since),
         str(s.finding.get("n", 0)), format_number(s.finding.get("mean")),
         format_number(s.finding.get("baseline_mean")),
         format_moment(s.evaluated_at)]
        for s in stored if show_all or s.state.state != "ok"
    ]
    click.echo(render_table(["rule", "segment", "state", "since", "n", "mean", "baseline",
                             "evaluated"], rows))


@alerts.command("rebaseline")
@click.argument("rule_name", metavar="RULE")
@click.argument("segment_text", metavar="[SEGMENT]", required=False)
@pass_state
def alerts_rebaseline(state: CliState, rule_name: str, segment_text: str | None) -> None:
    """Let the baseline of RULE (one SEGMENT, e.g. app=support-bot, or all) take in every
    sample again, the ones from periods it (or a segment above it) fired included.

    The way back from a false alarm, or from a change that is the new normal: the next
    cycles compare the segment with what it does now, and it resolves by the rule's
    recovery settings.
    """
    from evalfleet.alerts.ledger import rebaseline

    rule = find_rule(state, rule_name)
    segment = None if segment_text is None else parse_segment(segment_text)
    store = open_existing_store(state.settings.resolved_database_url(), pool_size=1)
    try:
        with store.begin() as conn:
            forgotten = rebaseline(conn, rule=rule.name, segment=segment)
    finally:
        store.close()
    where = "every segment" if segment_text is None else segment_text
    click.echo(f"{rule.name}, {where}: {forgotten} firing period(s) back in the baseline; "
               "the next cycles compare with every sample")


@alerts.command("show")
@click.argument("rule_name", metavar="RULE")
@click.argument("segment_text", metavar="[SEGMENT]", required=False)
@click.option("--at", "at_text", default=None,
              help="Look at the window ending here (ISO 8601, or 15m/2h ago); default: the "
                   "segment's last evaluation.")
@click.option("--worst", type=click.IntRange(1, 50), default=5, show_default=True,
              help="Worst samples shown.")
@click.option("--json", "as_json", is_flag=True, help="Print the alert as JSON.")
@pass_state
def alerts_show(state: CliState, rule_name: str, segment_text: str | None,
                at_text: str | None, worst: int, as_json: bool) -> None:
    """Show one alert: its state history, the window against the baseline with a small
    chart, and the worst samples of the window with the judge's reasoning.

    SEGMENT is written as alerts list prints it (app=support-bot,prompt_version=v12);
    without it, the most specific firing segment, else the whole rule.
    """
    from evalfleet.alerts.terminal import render_alert_view
    from evalfleet.alerts.view import load_alert_view

    try:
        at = parse_time(at_text)
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None
    store = open_existing_store(state.settings.resolved_read_database_url(), pool_size=1)
    try:
        rule, segment = alert_target(state, store, rule_name, segment_text)
        view = load_alert_view(store, rule, segment, at=at, worst=worst)
    finally:
        store.close()
    if as_json:
        echo_json(alert_json(view))
        return
    click.echo(render_alert_view(view))


def alert_json(view: Any) -> dict[str, Any]:
    """What ``alerts show --json`` prints: the view as plain data."""
    stored = view.stored
    return {"rule": view.rule.name, "segment": str(view.segment), "at": view.at,
            "window_start": view.window_start,
            "state": stored.state.state if stored else None,
            "since": stored.state.since if stored else None,
            "evaluated_at": stored.evaluated_at if stored else None,
            "finding": view.finding, "history": view.history, "trend": view.trend,
            "worst": view.worst}


def alert_target(state: CliState, store: Any, rule_name: str,
                 segment_text: str | None) -> tuple[Any, Segment]:
    """The rule named and the segment meant: as written, else the most specific firing
    one, else the whole rule.

    Raises:
        click.UsageError: For an unknown rule, a bad rules file or a segment not of the rule.
    """
    from evalfleet.alerts.ledger import load_states
    from evalfleet.alerts.terminal import most_telling

    rule = find_rule(state, rule_name)
    if segment_text is not None:
        return rule, rule_segment(parse_segment(segment_text), rule.spec.segment_keys)
    with store.connect() as conn:
        return rule, most_telling(load_states(conn, rule.name))


def find_rule(state: CliState, rule_name: str) -> Any:
    """The rule of the configured rules file named ``rule_name``.

    Raises:
        click.UsageError: For a bad rules file or an unknown rule (the known ones named).
    """
    rules = load_rules(state)
    rule = next((r for r in rules.rules if r.name == rule_name), None)
    if rule is None:
        known = ", ".join(r.name for r in rules.rules)
        raise click.UsageError(f"no rule {rule_name!r} (rules: {known})")
    return rule


def load_rules(state: CliState) -> Any:
    """The configured rule set.

    Raises:
        click.UsageError: For a missing or bad rules file.
    """
    from evalfleet.alerts import load_rule_set

    try:
        return load_rule_set(state.settings)
    except EvalfleetError as exc:
        raise click.UsageError(str(exc)) from None


def rule_segment(segment: Segment, keys: Sequence[str]) -> Segment:
    """``segment`` with its labels in the rule's order.

    Raises:
        click.UsageError: When its keys are not a level of the rule (a prefix of its keys).
    """
    labels = segment.as_dict()
    wanted = list(keys[: len(labels)])
    if sorted(labels) != sorted(wanted):
        levels = ", ".join(",".join(keys[:depth]) for depth in range(1, len(keys) + 1))
        raise click.UsageError(f"segment {str(segment)!r} is not a level of this rule "
                               f"(levels: {levels or 'only (all)'})")
    return type(segment)(tuple((key, labels[key]) for key in wanted))


def parse_segment(text: str) -> Segment:
    """A segment as printed (``app=support-bot,prompt_version=v12``, or ``(all)``).

    Raises:
        click.UsageError: For text that is not ``key=value`` pairs.
    """
    from evalfleet.alerts.segment import Segment

    if text.strip() in ("", "(all)", "all"):
        return Segment()
    pairs = []
    for part in text.split(","):
        key, sep, value = part.partition("=")
        if not sep or not key.strip():
            raise click.UsageError(f"segment {text!r}: expected key=value[,key=value...]")
        pairs.append((key.strip(), value.strip()))
    return Segment(tuple(pairs))


def render_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """A plain-text table with aligned columns."""
    widths = [max(len(str(cell)) for cell in column) for column in zip(header, *rows,
                                                                        strict=False)]
    lines = ["  ".join(str(cell).ljust(width) for cell, width in zip(line, widths, strict=True))
             .rstrip() for line in (header, *rows)]
    return "\n".join(lines)


@alerts.command("plan")
@click.argument("rule_name", metavar="RULE")
@click.option("--drop", type=click.FloatRange(0.001, 1.0), default=0.05, show_default=True,
              help="The drop to plan for, on the 0..1 scale.")
@click.option("--within", "within_text", default="1h", show_default=True,
              help="How soon it should be detected (a duration: 30m, 1h, 1d).")
@click.option("--traffic", "traffic_text", default="1d", show_default=True,
              help="How far back the segments' traffic is measured.")
@click.option("--at", "at_text", default=None,
              help="Measure the traffic up to here (ISO 8601, or 15m/2h ago); default: now.")
@pass_state
def alerts_plan(state: CliState, rule_name: str, drop: float, within_text: str,
                traffic_text: str, at_text: str | None) -> None:
    """What a rule can see at each segment's recent traffic: expected false alarms a
    month, the smallest drop detected within an hour and within a day, and the judged
    samples a minute (judge calls and cost a day) that would detect --drop within
    --within. Figures of the sequential detector, whatever the rule's test."""
    from datetime import UTC, datetime, timedelta

    from evalfleet.alerts.planner import plan_segment, rule_false_alarms_per_month
    from evalfleet.alerts.window import WindowQuery, fetch_summaries
    from evalfleet.core.durations import format_duration, parse_duration

    try:
        within, span = parse_duration(within_text), parse_duration(traffic_text)
        now = parse_time(at_text) or datetime.now(UTC)
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None
    rule = find_rule(state, rule_name)
    store = open_existing_store(state.settings.resolved_read_database_url(), pool_size=1)
    try:
        with store.connect() as conn:
            recent = fetch_summaries(conn, WindowQuery.for_rule(rule), start=now - span,
                                     end=now)
        costs = store.daily_costs(since=now - timedelta(days=7))
    finally:
        store.close()
    spent = [row for row in costs if row.metric == rule.spec.metric]
    verdicts = sum(row.verdicts for row in spent)
    per_call = sum(row.cost_usd for row in spent) / verdicts if verdicts else None
    spec = rule.spec
    click.echo(f"{spec.name}: {spec.score} of {spec.metric}, run length "
               f"{format_duration(spec.run_length)}: false alarms a month, all segments "
               f"together, at most {rule_false_alarms_per_month(rule):.2g} on average")
    if not spec.sequential:
        click.echo("the rule uses `test: fixed`, whose false alarms are not bounded over "
                   "time: these are the figures it would have with `test: sequential`")
    rows = []
    for segment, summary in sorted(recent.items(), key=lambda item: -item[1].n):
        plan = plan_segment(rule, summary, span=span, drop=drop, within=within)
        needed = plan.needed_per_minute
        calls = needed * 1440 if needed is not None else None
        rows.append([
            str(segment), f"{plan.samples_per_minute:.3g}", f"{plan.mean:.3f}",
            f"{plan.false_alarms_per_month:.2g}", _drop_text(plan.smallest_drop_hour),
            _drop_text(plan.smallest_drop_day),
            "never" if needed is None else f"{needed:.3g}",
            "-" if calls is None else f"{calls:,.0f}",
            "-" if calls is None or per_call is None else f"{calls * per_call:,.2f}",
        ])
    if not rows:
        click.echo(f"no scored samples in the last {format_duration(span)}")
        return
    click.echo(render_table(
        ["segment", "samples/min", "mean", "false alarms/month", "drop seen in 1h",
         "in 1d", f"samples/min for {drop:g} in {format_duration(within)}",
         "judge calls/day", "USD/day"], rows))


def _drop_text(drop: float | None) -> str:
    return "none" if drop is None else f"{drop:.3f}"
