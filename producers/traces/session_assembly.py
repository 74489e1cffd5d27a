"""Traces in, conversations out: each assembled trace offered to its session as a turn,
and the sweep that produces each due session's version once.

The sampling decision of a session metric is taken on the session id (each metric's
sampling hash of it), so every turn of a session shares it. A span does not always name
its session (pydantic-ai puts ``gen_ai.conversation.id`` on every span, OpenInference's
``session.id`` may be on the root only, which exporters send last), so while a session
metric is produced the trace assembly buffers every trace whatever its trace id's hash
(the decision is deferred), and the session's decision is taken here, on the assembled
trace, once some span has named its session. The version's samples then go through the
ordinary producer pipeline with the session id as sampling key: the same hash, so the
pipeline keeps what was kept here.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import orjson

from evalfleet.core.metric import Metric
from producers import telemetry
from producers.pipeline import Pipeline, RecordResult
from producers.policy import Policy
from producers.sampler import is_sampled
from producers.screen import Keyed
from producers.traces.buffer import ClaimedTrace
from producers.traces.config import SessionSpec
from producers.traces.conversation import TurnIn, mark_session, session_record, turn_envelope
from producers.traces.mapping import MappedSample
from producers.traces.sessions import ClaimedSession, SessionBuffer

#: Sessions claimed per sweep.
SESSION_SWEEP_LIMIT = 200


@dataclass(frozen=True, slots=True)
class SessionSweep:
    """What one session sweep did."""

    sessions: int = 0
    """Versions produced."""
    forgotten: int = 0
    """Sessions forgotten after their final wait."""
    results: list[RecordResult] = field(default_factory=list)
    """What became of each version's sample."""


class SessionAssembly:
    """Keeps turns per session and produces due versions. Thread-safe."""

    def __init__(self, *, buffer: SessionBuffer, pipeline: Pipeline,
                 metrics: Mapping[str, Metric], clock: Callable[[], float] = time.time) -> None:
        """Wire the session buffer to the pipeline.

        Args:
            buffer: Where turns wait.
            pipeline: The producer pipeline versions go through.
            metrics: Metric definitions by name (to find those of unit ``session``).
            clock: Wall-clock time source.
        """
        self._buffer = buffer
        self._pipeline = pipeline
        self._metrics = metrics
        self._clock = clock

    @property
    def buffer(self) -> SessionBuffer:
        """Where turns wait."""
        return self._buffer

    def metric_rates(self, policy: Policy) -> list[tuple[str, float]]:
        """Each session metric produced and its rate."""
        return [(name, policy.rule_for(name, rate=self._pipeline.rate).rate)
                for name in self._pipeline.metrics(policy)
                if (metric := self._metrics.get(name)) is not None
                and metric.spec.unit == "session"]

    def offer(self, traces: Sequence[tuple[ClaimedTrace, list[MappedSample]]], *,
              policy: Policy, spec: SessionSpec) -> None:
        """Keep each trace's turn with its session, when a session metric samples it.

        Args:
            traces: Assembled traces and the samples mapped from each.
            policy: The sampling policy in effect.
            spec: The ``traces.sessions`` section.

        Raises:
            BrokerUnavailable: When the buffer cannot be reached (nothing kept; the
                traces are claimed again once their lease ends).
        """
        rates = self.metric_rates(policy)
        if not rates:
            return
        outcomes: Counter[str] = Counter()
        turns = []
        for trace, samples in traces:
            spans = sorted(trace.spans, key=lambda s: (s.start_ns, s.span_id))
            mark = mark_session(spans, spec)
            if mark.session_id is None:
                outcomes[mark.problem or "no_session"] += 1
                continue
            if not any(is_sampled(mark.session_id, rate, metric=name) for name, rate in rates):
                outcomes["sampled_out"] += 1
                continue
            record = next((s.record for s in samples if s.record["id"] == trace.trace_id),
                          samples[-1].record if samples else None)
            body = None if record is None else orjson.dumps(turn_envelope(
                record, trace_id=trace.trace_id,
                order_ns=spans[0].start_ns if spans else 0)).decode()
            if body is not None or mark.ends:
                turns.append(TurnIn(mark.session_id, trace.trace_id, body, ends=mark.ends))
        shed = self._buffer.add(turns, now_s=self._clock())
        outcomes["kept"] += sum(1 for t in turns if t.body is not None) - len(shed)
        outcomes.update(s.reason for s in shed)
        for outcome, count in outcomes.items():
            telemetry.OTLP_TURNS.labels(outcome).inc(count)

    def sweep(self, *, limit: int = SESSION_SWEEP_LIMIT,
              now_s: float | None = None) -> SessionSweep:
        """Produce the versions of the sessions that are due.

        Args:
            limit: Most sessions claimed.
            now_s: The time to judge due-ness by (default: the clock's); infinity closes
                every session (a file read to its end).

        Returns:
            The versions produced and their samples' results.

        Raises:
            BrokerUnavailable: When the buffer or the broker cannot be reached (the
                claimed sessions are claimed again once their lease ends).
        """
        now = self._clock() if now_s is None else now_s
        claimed, forgotten = self._buffer.claim_due(now_s=now, limit=limit)
        telemetry.OTLP_SESSIONS.labels("forgotten").inc(forgotten)
        if not claimed:
            return SessionSweep(forgotten=forgotten)
        policy = self._pipeline.policy()
        metrics = [name for name, _ in self.metric_rates(policy)]
        results = self._pipeline.process(
            [(f"session {s.session_id}", Keyed(self._record(s), s.session_id))
             for s in claimed], metrics=metrics) if metrics else []
        self._buffer.finish(claimed, now_s=min(now, self._clock()))
        for session in claimed:
            telemetry.OTLP_SESSIONS.labels(session.closed_by).inc()
        return SessionSweep(len(claimed), forgotten, results)

    @staticmethod
    def _record(session: ClaimedSession) -> dict[str, object]:
        return session_record(session.session_id, session.envelopes,
                              closed_by=session.closed_by)
