"""Where a conversation's turns wait until it goes quiet.

    base.py     the contract, timing, bounds
    redis.py    in Redis, shared by every ingest replica (survives an ingest SIGKILL)
    memory.py   in this process (produce --format otlp-json, the embedded setup)
"""

from __future__ import annotations

from producers.traces.sessions.base import (
    SESSION_LEASE_S,
    ClaimedSession,
    SessionBuffer,
    SessionTiming,
)
from producers.traces.sessions.memory import MemorySessionBuffer
from producers.traces.sessions.redis import RedisSessionBuffer

__all__ = ["SESSION_LEASE_S", "ClaimedSession", "MemorySessionBuffer", "RedisSessionBuffer",
           "SessionBuffer", "SessionTiming"]
