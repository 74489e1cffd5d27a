"""Deduplication of repeated jobs (same sample id and metric) within a window.

    Deduper           base.py: the interface (check before publishing, mark after)
    ├── RedisDeduper  redis.py: expiring keys, shared by every producer
    └── MemoryDeduper memory.py: a bounded LRU in this process (other brokers)
"""

from __future__ import annotations

from producers.dedupe.base import Deduper, dedupe_key
from producers.dedupe.memory import MemoryDeduper
from producers.dedupe.redis import RedisDeduper

__all__ = ["Deduper", "MemoryDeduper", "RedisDeduper", "dedupe_key"]
