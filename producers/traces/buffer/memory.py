"""The trace buffer in this process's memory: ``evalfleet produce --format otlp-json``,
and ``evalfleet ingest`` on one machine without Redis (the embedded broker). Spans of an
ingest killed mid-assembly are lost with it; the Redis buffer is the one that survives.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field

from producers.traces.buffer.base import (
    CLAIM_LEASE_S,
    Added,
    ClaimedTrace,
    Timing,
    TraceBuffer,
)
from producers.traces.span import Span
from producers.traces.steps import has_agent_marks

#: Produced traces remembered at most (to count their late spans), oldest forgotten.
MAX_DONE = 100_000


@dataclass
class _Open:
    first_s: float
    due_s: float = 0.0
    root: bool = False
    agent: bool = False
    spans: list[Span] = field(default_factory=list)
    size_bytes: int = 0


class MemoryTraceBuffer(TraceBuffer):
    """Spans per trace in a dict, due times kept beside them. Thread-safe."""

    def __init__(self, *, timing: Timing) -> None:
        """Buffer with ``timing``."""
        self._timing = timing
        self._open: dict[str, _Open] = {}
        self._done: OrderedDict[str, float] = OrderedDict()
        self._lock = threading.Lock()

    def add(self, spans: Sequence[Span], *, now_s: float) -> Added:
        """See :meth:`TraceBuffer.add`."""
        timing = self._timing
        with self._lock:
            self._forget_done(now_s)
            new = {s.trace_id for s in spans} - self._open.keys() - self._done.keys()
            if new and len(self._open) + len(new) > timing.max_open_traces:
                raise timing.full()
            late = 0
            rejections = []
            for span in spans:
                if span.trace_id in self._done:
                    late += 1
                    continue
                entry = self._open.setdefault(span.trace_id, _Open(first_s=now_s))
                size = len(span.to_json())
                if (len(entry.spans) >= timing.max_spans_per_trace
                        or entry.size_bytes + size > timing.max_trace_bytes):
                    rejections.append(timing.over_limit(span))
                    continue
                entry.spans.append(span)
                entry.size_bytes += size
                entry.root = entry.root or span.is_root
                entry.agent = entry.agent or has_agent_marks(span.attributes)
                entry.due_s = entry.first_s + timing.longest_wait_s(agent=entry.agent)
                if entry.root:
                    entry.due_s = min(entry.due_s, now_s + timing.quiet_s)
        return Added(rejections=rejections, late=late)

    def claim_due(self, *, now_s: float, limit: int) -> list[ClaimedTrace]:
        """See :meth:`TraceBuffer.claim_due`."""
        with self._lock:
            due = sorted((entry.due_s, trace_id) for trace_id, entry in self._open.items()
                         if entry.due_s <= now_s)[:limit]
            claimed = []
            for _, trace_id in due:
                entry = self._open[trace_id]
                entry.due_s = now_s + CLAIM_LEASE_S
                claimed.append(ClaimedTrace(trace_id, list(entry.spans)))
            return claimed

    def finish(self, traces: Sequence[ClaimedTrace]) -> int:
        """See :meth:`TraceBuffer.finish`."""
        late = 0
        with self._lock:
            for trace in traces:
                entry = self._open.pop(trace.trace_id, None)
                if entry is not None:
                    late += max(0, len(entry.spans) - len(trace.spans))
                    self._done[trace.trace_id] = entry.first_s + self._timing.done_ttl_s
                    while len(self._done) > MAX_DONE:
                        self._done.popitem(last=False)
        return late

    def open_traces(self) -> int:
        """See :meth:`TraceBuffer.open_traces`."""
        with self._lock:
            return len(self._open)

    def _forget_done(self, now_s: float) -> None:
        while self._done and next(iter(self._done.values())) <= now_s:
            self._done.popitem(last=False)
