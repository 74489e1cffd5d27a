"""One evaluation cycle: every due rule read, tested, advanced, notified.

The steps, in order:

1. claim this cycle's slot of each rule (another evaluator that got there first
   has done the rule, so it is skipped);
2. summarise each rule's window and baseline per segment (``window``);
3. test every segment, then adjust all p-values of the cycle together
   (``detector``, ``statistic``);
4. per rule, under its lock, judge_drift rules first: advance each segment's state
   (``state``), store it, open or close baseline exclusions, and queue one
   notification per event and receiver (``ledger``, ``outbox``), all in one
   transaction; an app rule's numbers carry the judge drift suspected on its
   metric (a judge_drift rule firing there), with what the judge reported about
   itself in the window;
5. deliver what is due (``delivery``).
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any

from evalfleet.alerts import ledger, outbox
from evalfleet.alerts.alert import build_alert, format_time
from evalfleet.alerts.delivery import DeliveryReport, Dispatcher
from evalfleet.alerts.detector import (
    Finding,
    Judgement,
    drift_baseline,
    examine,
    examine_drift,
    finding_details,
    judge,
    pair_baselines,
)
from evalfleet.alerts.evidence import evidence_details, plain_text, window_evidence
from evalfleet.alerts.incident import heads_of
from evalfleet.alerts.incident_alert import (
    INCIDENT_RECEIVERS,
    build_incident_alert,
    incident_changes,
    outbox_key,
)
from evalfleet.alerts.judgecheck import JudgeCheckSource
from evalfleet.alerts.notifier import Notifier
from evalfleet.alerts.review_agreement import AgreementSource
from evalfleet.alerts.rule import (
    CalibrationBaseline,
    PinnedBaseline,
    Rule,
    RuleSet,
    TrailingBaseline,
)
from evalfleet.alerts.segment import Segment
from evalfleet.alerts.sequential import (
    Watch,
    after_events,
    carried_incident,
    incident_members,
    incidents_of,
    parse_stored,
    read_start,
    untested,
    watch,
)
from evalfleet.alerts.state import AlertState, Policy, Step, advance
from evalfleet.alerts.statistic import Summary
from evalfleet.alerts.telemetry import AgreementSample, AlertTelemetry, SegmentSample
from evalfleet.alerts.window import WindowQuery, fetch_explained, fetch_summaries
from evalfleet.store import SqlStore, StoreConnection
from evalfleet.store.queries.alert_ledger import AlertStateRow
from evalfleet.store.sql import (
    read_calibration_runs,
    read_judge_identities,
    read_judge_models,
    unavailable_as_store_error,
)

logger = logging.getLogger(__name__)

#: The whole of a rule's traffic.
ROOT = Segment()

#: Events a per-incident receiver hears of an incident, not of each segment in it.
INCIDENT_EVENTS = ("firing", "renotify", "resolved")

#: Calibration runs read for a judge_drift baseline: the newest gold-set run among them
#: counts (shadow comparisons are stored beside them).
CALIBRATION_RUNS_READ = 20

#: Judge identities shown beside a judge drift suspicion, and characters of each field.
IDENTITIES_SHOWN = 5
IDENTITY_CHARS = 80

#: The agreement gauges: the rolling window of items they cover (``review status``'s
#: default), and how often they are computed again.
AGREEMENT_WINDOW = timedelta(days=30)
AGREEMENT_REFRESH = timedelta(minutes=5)


@dataclass(frozen=True)
class ReportRow:
    """One rule and segment after a cycle, for people."""

    rule: str
    segment: str
    previous: str
    """State before the cycle."""
    state: str
    """State after it."""
    observation: str
    n: int
    mean: float | None
    baseline_mean: float | None
    effect: float | None
    """Of the most significant test."""
    p_value: float | None
    q_value: float | None
    test: str | None
    events: tuple[str, ...]
    """What was notified."""
    note: str | None = None
    """Why a test could not run (a judge_drift rule without a baseline)."""


@dataclass
class CycleReport:
    """What one cycle did."""

    at: datetime
    """The evaluation time."""
    rows: list[ReportRow] = field(default_factory=list)
    """Every segment evaluated."""
    skipped: list[str] = field(default_factory=list)
    """Rules another evaluator already ran in this cycle."""
    delivery: DeliveryReport = field(default_factory=DeliveryReport.empty)
    """What was delivered."""

    @property
    def events(self) -> list[tuple[str, str, str]]:
        """``(rule, segment, event)`` for every notified transition."""
        return [(row.rule, row.segment, event) for row in self.rows for event in row.events]


class AlertEngine:
    """Evaluates a rule set against the verdict store and notifies receivers.

    Args:
        store: The verdict store holding verdicts and alert state (Postgres or SQLite).
            The engine never executes SQL: its one-shot writes (a cycle's slot, the
            outbox's marks) are store functions taking the store, and a rule's reads and
            writes take the :data:`~evalfleet.store.StoreConnection` the store opens under
            the rule's lock, which the engine only passes along. Functions taking the
            store alone would each open their own connection, and a rule's reads must
            share its writes' transaction: on SQLite a second connection waits for that
            transaction's write lock.
        rules: The rules.
        dispatcher: Delivers queued notifications; None to only queue them.
        external_url: Where people look at alerts (each alert's ``generatorURL``).
        telemetry: Where metrics go; None for none.
        clock: The current time.
        notifiers: The dispatcher's notifiers, closed by :meth:`close`.
        secrets: Strings masked in the evidence notifications carry (the settings').
        agreement: The review queue, for review_agreement rules and the agreement gauges;
            None for neither.
        judge_check: The labels that say whether a firing app alert's drop is people's
            too (``judgecheck``); None for no check.
    """

    def __init__(
        self, *, store: SqlStore, rules: RuleSet, dispatcher: Dispatcher | None,
        external_url: str, telemetry: AlertTelemetry | None = None,
        clock: Callable[[], datetime] | None = None,
        notifiers: Mapping[str, Notifier] | None = None, secrets: Sequence[str] = (),
        agreement: AgreementSource | None = None,
        judge_check: JudgeCheckSource | None = None,
    ) -> None:
        self.store = store
        self.rules = rules
        self._dispatcher = dispatcher
        self._external_url = external_url
        self._telemetry = telemetry
        self._clock = clock or (lambda: datetime.now(UTC))
        self._notifiers = dict(notifiers or {})
        self._secrets = tuple(secrets)
        self._agreement = agreement
        self._agreement_at: datetime | None = None
        self._judge_check = judge_check

    def close(self) -> None:
        """Release the database connections and HTTP clients."""
        for notifier in self._notifiers.values():
            notifier.close()
        self.store.close()

    def check(self, *, at: datetime | None = None) -> CycleReport:
        """Run one cycle: evaluate every rule due at ``at``, then deliver.

        A database that is away ends the cycle with the store's
        :class:`~evalfleet.core.errors.StoreUnavailable`; the next cycle tries again.
        """
        with unavailable_as_store_error():
            return self._cycle(at)

    def _cycle(self, at: datetime | None) -> CycleReport:
        """The cycle :meth:`check` runs.

        Args:
            at: The evaluation time; windows end here. None for now. A time in the
                past evaluates the data as it stands (backfills included).

        Returns:
            What happened to every segment.
        """
        started_s = time.perf_counter()
        at = (at or self._clock()).astimezone(UTC)
        report = CycleReport(at=at)
        due = []
        for rule in self.rules.rules:
            slot = math.floor(at.timestamp() / rule.spec.interval.total_seconds())
            if ledger.claim_slot(self.store, rule=rule.name, slot=slot, at=at):
                due.append(rule)
            else:
                report.skipped.append(rule.name)
        findings = [(rule, finding) for rule in due for finding in self._examine(rule, at)]
        # Fixed-sample tests share the cycle's adjustment; a sequential rule's segments are
        # judged by their detectors, under the rule's lock (``_advance``).
        judgements = judge([(r, f) for r, f in findings if not r.spec.sequential],
                           false_discovery_rate=self.rules.false_discovery_rate)
        judgements += [Judgement(r, f, (), "hold") for r, f in findings if r.spec.sequential]
        # Drift first, so an app alert of this very cycle knows of it; rows in file order.
        rows = {rule.name: self._advance(rule, [j for j in judgements if j.rule is rule], at=at)
                for rule in sorted(due, key=lambda rule: rule.spec.kind != "judge_drift")}
        report.rows.extend(row for rule in due for row in rows[rule.name])
        if self._dispatcher is not None:
            report.delivery = self._dispatcher.deliver_due()
        self._record(report, due, elapsed_s=time.perf_counter() - started_s)
        return report

    def _examine(self, rule: Rule, at: datetime) -> list[Finding]:
        spec = rule.spec
        confidence = 1 - self.rules.false_discovery_rate
        if spec.kind == "judge_drift":
            return [self._examine_drift(rule, at, confidence=confidence)]
        if spec.kind == "review_agreement":
            return self._examine_agreement(rule, at, confidence=confidence)
        with self.store.connect() as conn:
            current = fetch_summaries(conn, WindowQuery.for_rule(rule),
                                      start=at - spec.window, end=at)
            reference = self._reference(conn, rule, at) if spec.uses_baseline else {}
        kept = _largest(current, limit=spec.max_segments)
        kept.setdefault(ROOT, Summary(n=0))  # the whole is always judged: no data is news
        paired = pair_baselines(rule, current=kept, reference=reference)
        if spec.sequential:
            return [untested(segment, summary, paired.get(segment))
                    for segment, summary in sorted(kept.items())]
        return [
            examine(rule, segment=segment, current=summary, baseline=paired.get(segment),
                    confidence=confidence)
            for segment, summary in sorted(kept.items())
        ]

    def _examine_drift(self, rule: Rule, at: datetime, *, confidence: float) -> Finding:
        spec = rule.spec
        assert spec.bias_series is not None  # a judge_drift rule's
        agreement_query = WindowQuery.for_rule(rule)
        bias_query = replace(agreement_query, score=spec.bias_series)
        with self.store.connect() as conn:
            current, bias = (
                fetch_summaries(conn, query, start=at - spec.window, end=at).get(ROOT)
                or Summary(n=0) for query in (agreement_query, bias_query))
            runs = read_calibration_runs(conn, metric=spec.metric, limit=CALIBRATION_RUNS_READ)
            judges = read_judge_models(conn, metric=spec.metric, purpose="canary",
                                       start=at - spec.window, end=at)
        return examine_drift(rule, current=current, bias=bias,
                             baseline=drift_baseline(runs, score=spec.score, judge_models=judges),
                             confidence=confidence)

    def _examine_agreement(self, rule: Rule, at: datetime, *,
                           confidence: float) -> list[Finding]:
        spec = rule.spec
        if self._agreement is None:
            return [replace(examine(rule, segment=ROOT, current=Summary(n=0), baseline=None,
                                    confidence=confidence),
                            note="no review queue to read agreement from")]
        current = self._agreement.summaries(rule, start=at - spec.window, end=at)
        reference: dict[Segment, Summary] = {}
        if spec.uses_baseline:
            baseline = spec.baseline
            assert isinstance(baseline, TrailingBaseline)  # a review_agreement rule's
            end = at - spec.window - baseline.gap
            reference = self._agreement.summaries(rule, start=end - baseline.window, end=end)
        kept = _largest(current, limit=spec.max_segments)
        paired = pair_baselines(rule, current=kept, reference=reference)
        return [examine(rule, segment=segment, current=summary, baseline=paired.get(segment),
                        confidence=confidence)
                for segment, summary in sorted(kept.items())]

    def _drift_suspicion(self, conn: StoreConnection, rule: Rule, at: datetime) -> dict[str, Any]:
        """The judge_drift rules firing on an app rule's metric, with what the judge
        reported about itself in the rule's window; empty when none fires."""
        if rule.spec.kind == "judge_drift":
            return {}
        firing = [
            {"rule": drift.name, "score": drift.spec.score,
             "since": format_time(stored.state.fired_at or stored.evaluated_at)}
            for drift in self.rules.rules
            if drift.spec.kind == "judge_drift" and drift.spec.metric == rule.spec.metric
            for stored in ledger.load_states(conn, drift.name) if stored.state.state == "firing"
        ]
        if not firing:
            return {}
        identities = read_judge_identities(conn, since=at - rule.spec.window, until=at,
                                           metric=rule.spec.metric, on_sample_time=True)
        # What a judge says about itself is its text: hostile, shown as one bounded line.
        return {"rules": firing, "identities": [
            {"judge_model": plain_text(i.judge_model, limit=IDENTITY_CHARS),
             "reported_model": plain_text(i.reported_model, limit=IDENTITY_CHARS),
             "fingerprint": plain_text(i.fingerprint, limit=IDENTITY_CHARS),
             "verdicts": i.verdicts, "first_at": format_time(i.first_at)}
            for i in identities[:IDENTITIES_SHOWN]]}

    def _reference(self, conn: StoreConnection, rule: Rule, at: datetime) -> dict[Segment, Summary]:
        spec = rule.spec
        baseline = spec.baseline
        if isinstance(baseline, CalibrationBaseline):
            return {}  # a judge_drift rule's baseline is read by _examine_drift
        if isinstance(baseline, PinnedBaseline):
            return fetch_summaries(conn, WindowQuery.for_rule(rule),
                                   start=at - baseline.window, end=at)
        end = at - spec.window - baseline.gap
        query = WindowQuery.for_rule(rule, exclude_firing=baseline.exclude_firing)
        return fetch_summaries(conn, query, start=end - baseline.window, end=end)

    def _advance(self, rule: Rule, judgements: list[Judgement], *,
                 at: datetime) -> list[ReportRow]:
        spec = rule.spec
        policy = Policy(for_count=spec.for_count, recovery_count=spec.recovery.for_count,
                        renotify=spec.renotify, no_data=spec.no_data)
        rows = []
        points: list[dict[str, Any]] = []
        states: list[AlertStateRow] = []  # written together at the end: one round trip
        transitions: list[dict[str, Any]] = []  # so are the changes of state
        now = self._clock()
        with ledger.rule_transaction(self.store, rule.name) as conn:
            suspicion = self._drift_suspicion(conn, rule, at)
            loaded = {s.segment: s for s in ledger.load_states(conn, rule.name)}
            stored = {segment: s.state for segment, s in loaded.items()}
            checks = {segment: s.finding.get("judge_check") for segment, s in loaded.items()}
            watches = self._watch(conn, rule, judgements, loaded, at=at)
            findings = {j.finding.segment: j.finding for j in judgements}
            firing = {segment for segment, state in stored.items() if state.state == "firing"}
            incidents = incidents_of(
                rule, findings, watches, firing,
                previous={segment: incident for segment, s in loaded.items()
                          if (incident := carried_incident(s.finding)) is not None},
                explained=self._explained(conn, rule, incident_members(
                    findings, watches, firing), at=at))
            seen = {j.finding.segment for j in judgements}
            for judgement in judgements:
                segment = judgement.finding.segment
                rows.append(self._step(conn, rule, segment, judgement, stored.get(segment),
                                       policy, at, now, points, states, transitions, suspicion,
                                       checks.get(segment), watches.get(segment),
                                       incident=incidents.get(segment)))
            # Segments known from earlier cycles with no samples now: too little data.
            for segment in sorted(set(stored) - seen):
                kept = loaded[segment].detector
                rows.append(self._step(conn, rule, segment, None, stored[segment], policy,
                                       at, now, points, states, transitions, suspicion,
                                       checks.get(segment),
                                       kept_detector=kept))
            if rule.spec.sequential:
                self._queue_incidents(conn, rule, loaded, incidents, watches, rows, at=at,
                                      now=now)
            ledger.save_states(conn, states)
            ledger.record_transitions(conn, transitions)
            ledger.record_points(conn, rule=rule.name, at=at, points=points)
        return rows

    def _explained(self, conn: StoreConnection, rule: Rule, members: set[Segment], *,
                   at: datetime) -> dict[Segment, Summary]:
        """The window under this cycle's incidents split by ``incident.explain_by``: read
        only in a cycle with an incident, for its segments' window only."""
        if not members or not rule.spec.explain_keys:
            return {}
        return fetch_explained(conn, WindowQuery.for_rule(rule), explain=rule.spec.explain_keys,
                               heads=heads_of(members), start=at - rule.spec.window, end=at)

    def _watch(self, conn: StoreConnection, rule: Rule, judgements: list[Judgement],
               loaded: Mapping[Segment, ledger.StoredState], *,
               at: datetime) -> dict[Segment, Watch]:
        """A sequential rule's detectors after this cycle's new samples, by segment; read
        under the rule's lock, so two evaluators never read the same samples twice."""
        if not rule.spec.sequential or not judgements:
            return {}
        stored = {segment: parse_stored(s.detector) for segment, s in loaded.items()}
        every = {f"{segment.key}/{name}": state for segment, states in stored.items()
                 for name, state in states.items()}
        start = read_start(every, rule=rule, at=at)
        increments = fetch_summaries(conn, WindowQuery.for_rule(rule), start=start, end=at)
        confidence = 1 - self.rules.false_discovery_rate
        watches = {}
        for judgement in judgements:
            segment = judgement.finding.segment
            previous = loaded.get(segment)
            firing = previous is not None and previous.state.state == "firing"
            watches[segment] = watch(
                rule, judgement.finding, stored=stored.get(segment, {}),
                increment=increments.get(segment, Summary(n=0)), start=start, at=at,
                firing=firing, confidence=confidence)
        return watches

    def _step(
        self, conn: StoreConnection, rule: Rule, segment: Segment, judgement: Judgement | None,
        previous: AlertState | None, policy: Policy, at: datetime, now: datetime,
        points: list[dict[str, Any]], states: list[AlertStateRow],
        transitions: list[dict[str, Any]], suspicion: dict[str, Any],
        last_check: dict[str, Any] | None = None, watched: Watch | None = None,
        kept_detector: dict[str, Any] | None = None,
        incident: dict[str, Any] | None = None,
    ) -> ReportRow:
        if judgement is not None and watched is not None:
            judgement = replace(judgement, observation=watched.observation)
        observation = judgement.observation if judgement else "insufficient_data"
        details: dict[str, Any] = (finding_details(judgement) if judgement else
                                   {"n": 0, "mean": None, "observation": observation})
        if watched is not None:
            details["sequential"] = watched.details
        if incident is not None:
            details["incident"] = incident
        if suspicion:
            details["judge_drift"] = suspicion
        current = previous or AlertState.initial(at)
        step = advance(current, observation, policy=policy, at=at)
        if any(event in ("firing", "renotify") for event in step.events) and \
                rule.spec.kind != "review_agreement":  # its evidence is in the review queue
            # What the bad answers look like travels with the alert, not just numbers.
            details = {**details, "evidence": evidence_details(
                window_evidence(conn, rule, segment, at=at), secrets=self._secrets)}
        check = self._check_labels(conn, rule, judgement, step, at=at, last=last_check)
        if check is not None:
            details["judge_check"] = check
        detector = kept_detector
        if watched is not None:
            detector = {name: state.to_json() for name, state in
                        after_events(watched.detectors, step.events).items()}
        states.append(ledger.state_row(rule=rule.name, segment=segment, state=step.state,
                                       at=at, finding=details, detector=detector))
        was = current.state if previous else "new"
        points.append({"segment_key": segment.key, "n": int(str(details.get("n") or 0)),
                       "mean": details.get("mean"), "baseline_n": details.get("baseline_n"),
                       "baseline_mean": details.get("baseline_mean"),
                       "state": step.state.state})
        if step.events or step.state.state != was:
            transitions.append(ledger.transition_row(
                rule=rule.name, segment=segment, at=at, previous=was, state=step.state.state,
                events=step.events, finding=details))
        self._keep_baseline_clean(conn, rule, segment, step, at)
        self._queue(conn, rule, segment, step, details, at=at, now=now)
        return _row(rule, segment, was, step, details)

    def _check_labels(self, conn: StoreConnection, rule: Rule, judgement: Judgement | None,
                      step: Step, *, at: datetime,
                      last: dict[str, Any] | None) -> dict[str, Any] | None:
        """Whether people's labels confirm the drop: read when the alert fires or
        notifies again (labels arrive hours late), kept as it was while it fires."""
        if step.state.state != "firing":
            return None
        if judgement is None or self._judge_check is None or not any(
                event in ("firing", "renotify") for event in step.events):
            return last
        return self._judge_check.check(rule, judgement.finding, at=at, conn=conn,
                                       confidence=1 - self.rules.false_discovery_rate)

    def _keep_baseline_clean(self, conn: StoreConnection, rule: Rule, segment: Segment, step: Step,
                             at: datetime) -> None:
        if "firing" in step.events:
            # The window that first breached already held bad samples.
            started = (step.state.breach_started_at or at) - rule.spec.window
            ledger.open_exclusion(conn, rule=rule.name, segment=segment, started_at=started)
        if "resolved" in step.events:
            ledger.close_exclusions(conn, rule=rule.name, segment=segment, ended_at=at)

    def _queue(self, conn: StoreConnection, rule: Rule, segment: Segment, step: Step,
               details: dict[str, Any], *, at: datetime, now: datetime) -> None:
        in_incident = isinstance(details.get("incident"), dict)
        for sequence, event in step.numbered():
            alert = build_alert(rule=rule, segment=segment, event=event, state=step.state,
                                details=details, at=at, external_url=self._external_url)
            for receiver in self.rules.receivers_of(rule):
                if in_incident and event in INCIDENT_EVENTS and \
                        self._per_incident(receiver):
                    continue  # told once per incident (_queue_incidents)
                key = outbox.idempotency_key(rule=rule.name, segment_key=segment.key,
                                             sequence=sequence, receiver=receiver)
                outbox.enqueue(conn, key=key, rule=rule.name, segment_key=segment.key,
                               receiver=receiver, kind=event, alert=alert, now=now)
            logger.warning("alert %s %s %s", rule.name, event, segment)

    def _per_incident(self, receiver: str) -> bool:
        spec = self.rules.receivers.get(receiver)
        return spec is not None and spec.type in INCIDENT_RECEIVERS

    def _queue_incidents(self, conn: StoreConnection, rule: Rule,
                         loaded: Mapping[Segment, ledger.StoredState],
                         incidents: Mapping[Segment, dict[str, Any]],
                         watches: Mapping[Segment, Watch], rows: list[ReportRow], *,
                         at: datetime, now: datetime) -> None:
        """One notification per incident opened, due again or closed this cycle, to the
        receivers that do not group alerts themselves (Slack, webhooks)."""
        receivers = [r for r in self.rules.receivers_of(rule) if self._per_incident(r)]
        if not receivers:
            return
        before: dict[str, dict[str, Any]] = {}
        fired: dict[str, datetime] = {}
        for stored in loaded.values():
            carried = carried_incident(stored.finding)
            if stored.state.state == "firing" and carried and isinstance(carried.get("key"), str):
                before[carried["key"]] = carried
                started = stored.state.fired_at or at
                fired[carried["key"]] = min(fired.get(carried["key"], started), started)
        named = {str(segment): segment for segment in (*loaded, *incidents)}
        after: dict[str, dict[str, Any]] = {}
        renotified = set()
        for row in rows:
            segment = named.get(row.segment)
            incident = incidents.get(segment) if segment is not None else None
            if row.state == "firing" and incident is not None:
                after[str(incident["key"])] = incident
                if "renotify" in row.events:
                    renotified.add(str(incident["key"]))
        for change in incident_changes(before=before, after=after, renotified=renotified):
            head = named.get(str(change.incident.get("head")), ROOT)
            watched = watches.get(head)
            alert = build_incident_alert(
                rule=rule, change=change, head=head,
                sequential=watched.details if watched is not None else None,
                started=fired.get(change.key, at), at=at, external_url=self._external_url)
            digest = outbox_key(change.key)
            for receiver in receivers:
                key = outbox.idempotency_key(rule=rule.name, segment_key=digest,
                                             sequence=int(at.timestamp()), receiver=receiver)
                outbox.enqueue(conn, key=key, rule=rule.name, segment_key=digest,
                               receiver=receiver, kind=change.event, alert=alert, now=now)
            logger.warning("alert %s incident %s %s", rule.name, change.event, change.key)

    def _record(self, report: CycleReport, due: list[Rule], *, elapsed_s: float) -> None:
        if self._telemetry is None:
            return
        telemetry = self._telemetry
        telemetry.cycle_seconds.observe(elapsed_s)
        for rule in due:
            telemetry.evaluations.labels(rule=rule.name).inc()
        for rule_name, _segment, event in report.events:
            telemetry.transitions.labels(rule=rule_name, event=event).inc()
        telemetry.record_cycle((
            SegmentSample(rule=row.rule, segment=row.segment, state=row.state, n=row.n,
                          mean=row.mean, baseline_mean=row.baseline_mean)
            for row in report.rows
        ), rules=[rule.name for rule in due])
        self._record_agreement(telemetry, at=report.at)

    def _record_agreement(self, telemetry: AlertTelemetry, *, at: datetime) -> None:
        """Compute the agreement gauges again when they are older than
        :data:`AGREEMENT_REFRESH` (the figures ``review status`` shows)."""
        if self._agreement is None or (
                self._agreement_at is not None and at - self._agreement_at < AGREEMENT_REFRESH
                and at >= self._agreement_at):
            return
        self._agreement_at = at
        figures = self._agreement.figures(since=at - AGREEMENT_WINDOW)
        telemetry.record_agreement([
            AgreementSample(metric=f.metric, judge_model=f.judge_model, score=f.score,
                            items=f.items, statistics={
                                name: (e.value, e.low, e.high)
                                for name, e in f.statistics.items()})
            for f in figures])


def _largest(summaries: dict[Segment, Summary], *, limit: int) -> dict[Segment, Summary]:
    ranked = sorted(summaries.items(), key=lambda item: (item[0] != ROOT, -item[1].n, item[0]))
    return dict(ranked[:limit])


def _row(rule: Rule, segment: Segment, previous: str, step: Step,
         details: dict[str, Any]) -> ReportRow:
    tests: Iterable[dict[str, Any]] = details.get("tests", [])
    best = min(tests, key=lambda t: t["q_value"], default=None)
    observation = str(details.get("observation"))
    if str(details.get("note", "")).startswith("no baseline"):
        observation = "no_baseline"
    return ReportRow(
        rule=rule.name, segment=str(segment), previous=previous, state=step.state.state,
        observation=observation, n=int(details.get("n") or 0),
        mean=details.get("mean"), baseline_mean=details.get("baseline_mean"),
        effect=best["effect"] if best else None, p_value=best["p_value"] if best else None,
        q_value=best["q_value"] if best else None, test=best["test"] if best else None,
        events=step.events, note=str(details["note"]) if observation == "no_baseline" else None,
    )
