"""The trace buffer contract: spans kept per trace until the trace is due.

A trace is *due* once its root span has ended and no span of it arrived for the quiet
period, or once the longest wait since its first span passed. :meth:`TraceBuffer.claim_due`
hands due traces out with a lease (a claimer that dies before :meth:`TraceBuffer.finish`
leaves them to be claimed again when the lease ends), so every buffered span ends in a
produced trace; :meth:`TraceBuffer.finish` forgets a trace and remembers for a while that
it was produced, so a span arriving later is counted, never produced a second time.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field

from evalfleet.core.errors import TraceBufferFull
from producers.traces.span import Span, SpanRejection

#: Seconds a claimed trace stays with its claimer before it is due again.
CLAIM_LEASE_S = 30.0


@dataclass(frozen=True, slots=True)
class Timing:
    """When traces are due, and how much is kept."""

    quiet_s: float = 3.0
    """Due this long after its last span, once its root span has ended."""
    max_wait_s: float = 60.0
    """Due this long after its first span at the latest."""
    agent_max_wait_s: float = 600.0
    """The same for an agent's trace (a span of it has a tool or an agent: see
    :func:`producers.traces.steps.has_agent_marks`), whose run may last minutes."""
    max_spans_per_trace: int = 1000
    """Spans kept per trace; later ones are rejected."""
    max_trace_bytes: int = 16 * 1024 * 1024
    """Bytes kept per trace (its spans as buffered); later spans are rejected."""
    max_open_traces: int = 100_000
    """Traces buffered at once; a request opening more is refused (retry later)."""

    @property
    def done_ttl_s(self) -> float:
        """How long a produced trace is remembered, to count late spans."""
        return max(600.0, 10 * self.max_wait_s, 2 * self.agent_max_wait_s)

    def longest_wait_s(self, *, agent: bool) -> float:
        """How long after its first span a trace is due at the latest."""
        return self.agent_max_wait_s if agent else self.max_wait_s

    def full(self) -> TraceBufferFull:
        """The error of a request that would open too many traces."""
        return TraceBufferFull(f"{self.max_open_traces:,} traces are being assembled "
                               "(EVALFLEET_OTLP_MAX_OPEN_TRACES); send the spans again later")

    def over_limit(self, span: Span) -> SpanRejection:
        """The rejection of a span that would take its trace past its limits."""
        return SpanRejection(span.trace_id, span.span_id, "traceId",
                             f"the trace would be over its limit of "
                             f"{self.max_spans_per_trace:,} spans or "
                             f"{self.max_trace_bytes:,} bytes "
                             "(EVALFLEET_OTLP_MAX_SPANS_PER_TRACE, _MAX_TRACE_BYTES)")


@dataclass(frozen=True, slots=True)
class Added:
    """What became of the spans of one request."""

    rejections: list[SpanRejection] = field(default_factory=list)
    """Spans over their trace's limit."""
    late: int = 0
    """Spans of traces already produced (counted, not kept)."""


@dataclass(frozen=True, slots=True)
class ClaimedTrace:
    """A due trace, leased to one claimer."""

    trace_id: str
    """The trace."""
    spans: list[Span]
    """Its spans as buffered."""


class TraceBuffer(ABC):
    """Where spans wait for their trace to be complete. Thread-safe."""

    @abstractmethod
    def add(self, spans: Sequence[Span], *, now_s: float) -> Added:
        """Keep ``spans`` with their traces.

        Raises:
            TraceBufferFull: When this would open more traces than allowed (nothing kept).
            BrokerUnavailable: When the buffer cannot be reached (nothing kept).
        """

    @abstractmethod
    def claim_due(self, *, now_s: float, limit: int) -> list[ClaimedTrace]:
        """Lease up to ``limit`` due traces to the caller.

        Raises:
            BrokerUnavailable: When the buffer cannot be reached.
        """

    @abstractmethod
    def finish(self, traces: Sequence[ClaimedTrace]) -> int:
        """Forget produced traces and remember them as produced.

        Returns:
            Spans that arrived after the trace was claimed (counted as late).

        Raises:
            BrokerUnavailable: When the buffer cannot be reached.
        """

    @abstractmethod
    def open_traces(self) -> int:
        """Traces buffered now."""
