"""Spans in, samples out: the sampling decision before buffering, and the sweep that
produces each due trace once.

:meth:`TraceAssembly.accept` takes the decoded spans of one request: a span whose trace
no metric's rate keeps (each metric's sampling hash of the trace id, as the pipeline
takes it later) is dropped at once (so a trace that is not sampled costs nothing), the
rest are buffered with their trace. :meth:`TraceAssembly.sweep`
claims the traces that are due, maps each to samples, leaves out the metrics a sample
lacks the inputs of (counted), and runs the samples through the ordinary producer
pipeline (filters, segment minimums, redaction, deduplication, backpressure), with the
trace id as sampling key. A trace is finished in the buffer only once its jobs are
published; a sweeper that dies before that leaves it to be claimed again when its lease
ends, and deduplication on the sample id keeps the second publication out.
:class:`TraceSweeper` runs the sweep on a thread of each ingest replica.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from evalfleet.core.errors import (
    BrokerUnavailable,
    EvalfleetError,
    InvalidSample,
    TraceBufferFull,
)
from evalfleet.core.metric import Metric
from producers import telemetry
from producers.pipeline import Pipeline, RecordResult
from producers.policy import Policy
from producers.sampler import is_sampled
from producers.screen import Keyed
from producers.traces.buffer import ClaimedTrace, TraceBuffer
from producers.traces.mapping import MappedSample, map_trace
from producers.traces.session_assembly import SessionAssembly
from producers.traces.span import Span, SpanRejection

log = logging.getLogger(__name__)

#: Traces claimed per sweep.
SWEEP_LIMIT = 500

#: Seconds between sweeps.
SWEEP_INTERVAL_S = 0.5


@dataclass(frozen=True, slots=True)
class Sweep:
    """What one sweep did."""

    traces: int = 0
    """Traces claimed and produced."""
    results: list[RecordResult] = field(default_factory=list)
    """What became of each sample built from them."""


class TraceAssembly:
    """Buffers sampled spans and produces due traces. Thread-safe."""

    def __init__(self, *, buffer: TraceBuffer, pipeline: Pipeline,
                 metrics: Mapping[str, Metric], clock: Callable[[], float] = time.time,
                 sessions: SessionAssembly | None = None) -> None:
        """Wire the buffer to the pipeline.

        Args:
            buffer: Where spans wait.
            pipeline: The producer pipeline samples go through.
            metrics: Metric definitions by name (to check the inputs a sample carries).
            clock: Wall-clock time source.
            sessions: Where each produced trace is offered as a turn of its session
                (None: no session metric is produced).
        """
        self.sessions = sessions
        self._buffer = buffer
        self._pipeline = pipeline
        self._metrics = metrics
        self._clock = clock

    def accept(self, spans: Sequence[Span]) -> list[SpanRejection]:
        """Buffer the spans of sampled traces.

        Returns:
            The spans rejected (their trace is over its span limit).

        Raises:
            TraceBufferFull: When the buffer holds as many traces as allowed.
            BrokerUnavailable: When the buffer cannot be reached.
        """
        policy = self._pipeline.policy()
        rates = self._rates(policy)
        # A session metric's decision waits for the span naming the session (see
        # producers.traces.session_assembly): until then every trace is kept.
        deferred = self.sessions is not None and any(
            rate > 0 for _, rate in self.sessions.metric_rates(policy))
        decisions = {trace_id: deferred or any(is_sampled(trace_id, rate, metric=metric)
                                               for metric, rate in rates)
                     for trace_id in {span.trace_id for span in spans}}
        kept = [span for span in spans if decisions[span.trace_id]]
        telemetry.OTLP_SPANS.labels("sampled_out").inc(len(spans) - len(kept))
        try:
            added = self._buffer.add(kept, now_s=self._clock())
        except TraceBufferFull:
            telemetry.OTLP_SPANS.labels("too_many_open_traces").inc(len(kept))
            raise
        except BrokerUnavailable:
            telemetry.OTLP_SPANS.labels("buffer_unavailable").inc(len(kept))
            raise
        telemetry.OTLP_SPANS.labels("late").inc(added.late)
        telemetry.OTLP_SPANS.labels("trace_too_large").inc(len(added.rejections))
        telemetry.OTLP_SPANS.labels("buffered").inc(
            len(kept) - added.late - len(added.rejections))
        return added.rejections

    def sweep(self, *, limit: int = SWEEP_LIMIT, now_s: float | None = None) -> Sweep:
        """Produce the traces that are due.

        Args:
            limit: Most traces claimed.
            now_s: The time to judge due-ness by (default: the clock's); infinity
                produces every trace (a file read to its end).

        Returns:
            The traces produced and the samples' results.

        Raises:
            BrokerUnavailable: When the buffer or the broker cannot be reached (the
                claimed traces are claimed again once their lease ends).
        """
        claimed = self._buffer.claim_due(
            now_s=self._clock() if now_s is None else now_s, limit=limit)
        if not claimed:
            return Sweep()
        policy = self._pipeline.policy()
        groups: dict[tuple[str, ...], list[tuple[str, Any]]] = {}
        outcomes: Counter[str] = Counter()
        mapped = []
        for trace in claimed:
            samples = self._samples(trace, policy, outcomes)
            mapped.append((trace, samples))
            for sample in samples:
                wanted = tuple(self._metrics_for(sample.record, policy))
                if wanted:
                    groups.setdefault(wanted, []).append(
                        (f"trace {trace.trace_id}", Keyed(sample.record, sample.sampling_key)))
        for outcome, count in outcomes.items():
            telemetry.OTLP_TRACES.labels(outcome).inc(count)
        results: list[RecordResult] = []
        for metrics, records in groups.items():
            results.extend(self._pipeline.process(records, metrics=list(metrics)))
        for result in results:
            for error in result.errors:
                telemetry.OTLP_METRIC_SKIPPED.labels(
                    self._metric_of(error), error.field or "record").inc()
        if self.sessions is not None:  # kept before the traces are finished: nothing lost
            self.sessions.offer(mapped, policy=policy, spec=policy.spec.traces.sessions)
        telemetry.OTLP_SPANS.labels("late").inc(self._buffer.finish(claimed))
        return Sweep(len(claimed), results)

    def _samples(self, trace: ClaimedTrace, policy: Policy,
                 outcomes: Counter[str]) -> list[MappedSample]:
        """The trace's samples; its outcome counted in ``outcomes``."""
        try:
            mapping = map_trace(trace.spans, spec=policy.spec.traces)
        except Exception:  # one trace the mapping cannot read never blocks the others
            log.exception("trace %s could not be mapped", trace.trace_id)
            outcomes["unreadable"] += 1
            return []
        outcomes[mapping.reason or "produced"] += 1
        return mapping.samples

    def _metrics_for(self, record: Mapping[str, Any], policy: Policy) -> list[str]:
        """The metrics whose inputs the record carries; a metric that reads the
        retrieved context is left out of a trace that retrieved nothing, and a metric
        that judges a whole trace out of one without a trajectory (both counted)."""
        kept = []
        for name in self._pipeline.metrics(policy):
            metric = self._metrics.get(name)
            if metric is not None and metric.spec.unit == "session":
                continue  # judged on the session's versions (session_assembly)
            reads_context = metric is not None and any(
                variable.source == "context" for variable in metric.spec.variables.values())
            if reads_context and not record.get("context"):
                telemetry.OTLP_METRIC_SKIPPED.labels(name, "context").inc()
                continue
            if metric is not None and metric.spec.unit == "trace" and not record.get("trajectory"):
                telemetry.OTLP_METRIC_SKIPPED.labels(name, "trajectory").inc()
                continue
            kept.append(name)
        return kept

    def _metric_of(self, error: InvalidSample) -> str:
        """The metric an error left out (the screen ends the reason with its name), or
        ``all`` for a sample refused as a whole (a field over its limit)."""
        reason = error.reason
        name = reason[reason.rfind("(") + 1:-1] if reason.endswith(")") else ""
        return name if name in self._metrics else "all"

    def _rates(self, policy: Policy) -> list[tuple[str, float]]:
        """Each metric produced per trace and its rate (a trace is buffered when one
        keeps it)."""
        return [(name, policy.rule_for(name, rate=self._pipeline.rate).rate)
                for name in self._pipeline.metrics(policy)
                if (metric := self._metrics.get(name)) is None or metric.spec.unit != "session"]


class TraceSweeper:
    """Runs :meth:`TraceAssembly.sweep` on a daemon thread until stopped."""

    def __init__(self, assembly: TraceAssembly, *, buffer: TraceBuffer,
                 interval_s: float = SWEEP_INTERVAL_S) -> None:
        """Sweep ``assembly`` every ``interval_s`` (at once again after a full sweep)."""
        self._assembly = assembly
        self._buffer = buffer
        self._interval_s = interval_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="trace-sweeper", daemon=True)

    def start(self) -> None:
        """Start sweeping."""
        self._thread.start()

    def stop(self) -> None:
        """Stop after the sweep in progress."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=30)

    def _run(self) -> None:
        sessions = self._assembly.sessions
        while not self._stop.is_set():
            produced = 0
            try:
                produced = self._assembly.sweep().traces
                telemetry.OPEN_TRACES.set(self._buffer.open_traces())
                if sessions is not None:
                    sessions.sweep()
                    telemetry.OPEN_SESSIONS.set(sessions.buffer.open_sessions())
            except EvalfleetError as exc:
                log.warning("trace sweep failed, retrying: %s", exc)
            except Exception:  # the sweeper outlives any one bad trace
                log.exception("trace sweep failed")
            if produced < SWEEP_LIMIT:
                self._stop.wait(self._interval_s)


