"""Where a trace's spans wait until the trace is complete.

    base.py     the contract, timing, the claim lease
    redis.py    in Redis, shared by every ingest replica
    memory.py   in this process (produce --format otlp-json, the embedded setup)
"""

from __future__ import annotations

from producers.traces.buffer.base import (
    CLAIM_LEASE_S,
    Added,
    ClaimedTrace,
    Timing,
    TraceBuffer,
)
from producers.traces.buffer.memory import MemoryTraceBuffer
from producers.traces.buffer.redis import RedisTraceBuffer

__all__ = ["CLAIM_LEASE_S", "Added", "ClaimedTrace", "MemoryTraceBuffer", "RedisTraceBuffer",
           "Timing", "TraceBuffer"]
