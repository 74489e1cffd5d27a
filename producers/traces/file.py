"""OTLP JSON lines, as the OpenTelemetry Collector's file exporter writes them (one
``ExportTraceServiceRequest`` per line), through the same mapping and assembly as
``POST /v1/traces``: ``evalfleet produce --format otlp-json``.

Every trace of the file is assembled in memory and produced once the file is read (a
file is complete: no quiet period to wait for). When more traces are open than the
buffer holds, the oldest are produced early; a later span of one of them is counted
as late.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable

from evalfleet.core.errors import InvalidTraces, TraceBufferFull
from producers.pipeline import ProduceStats
from producers.screen import OversizedLine
from producers.traces.assembly import SWEEP_LIMIT, TraceAssembly
from producers.traces.otlp import decode_json
from producers.traces.span import Span, SpanLimits


def produce_otlp_lines(
    lines: Iterable[tuple[int, bytes]], *, assembly: TraceAssembly, limits: SpanLimits,
    max_spans: int, on_error: Callable[[str], None], stats: ProduceStats,
) -> ProduceStats:
    """Assemble the traces of OTLP JSON lines and produce their samples.

    Args:
        lines: ``(line number, bytes)`` pairs (blank lines are skipped).
        assembly: The assembly, over an in-memory buffer.
        limits: What one span may hold.
        max_spans: Most spans on one line.
        on_error: Receives each error, naming the line (and the span).
        stats: Counts to add to: ``lines`` counts samples, ``rejected`` bad lines and spans.

    Returns:
        The counts.

    Raises:
        BrokerUnavailable: When the jobs cannot be published.
    """
    for number, line in lines:
        if isinstance(line, OversizedLine):
            _reject(stats, on_error, f"line {number}: a line of {line.size_bytes:,} bytes is "
                                     "too long to read; it was skipped")
            continue
        if not line.strip():
            continue
        try:
            decoded = decode_json(line, limits=limits, max_spans=max_spans)
        except InvalidTraces as exc:
            _reject(stats, on_error, f"line {number}: {exc}")
            continue
        for rejection in decoded.rejections:
            _reject(stats, on_error, f"line {number}: {rejection}")
        for message in _accept(assembly, decoded.spans, stats):
            _reject(stats, on_error, f"line {number}: {message}")
    while (sweep := assembly.sweep(now_s=math.inf)).traces:
        stats.add(sweep.results)
    if assembly.sessions is not None:  # every conversation of the file, closed at its end
        while (closed := assembly.sessions.sweep(now_s=math.inf)).sessions:
            stats.add(closed.results)
    return stats


def _accept(assembly: TraceAssembly, spans: list[Span], stats: ProduceStats) -> list[str]:
    while True:
        try:
            return [str(r) for r in assembly.accept(spans)]
        except TraceBufferFull:
            sweep = assembly.sweep(now_s=math.inf, limit=SWEEP_LIMIT)
            stats.add(sweep.results)
            if not sweep.traces:
                raise


def _reject(stats: ProduceStats, on_error: Callable[[str], None], message: str) -> None:
    stats.rejected += 1
    on_error(message)
