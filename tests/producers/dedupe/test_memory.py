"""In-memory deduplication: expiry and the bound on memory."""

from __future__ import annotations

from producers.dedupe import MemoryDeduper


def test_keys_expire_after_the_window() -> None:
    now = [0.0]
    deduper = MemoryDeduper(window_s=10, max_keys=100, clock=lambda: now[0])
    deduper.mark(["a"])
    now[0] = 9.9
    assert deduper.seen(["a"]) == [True]
    now[0] = 10.0
    assert deduper.seen(["a"]) == [False]


def test_bounded_oldest_forgotten_first() -> None:
    deduper = MemoryDeduper(window_s=3600, max_keys=3)
    deduper.mark(["a", "b", "c", "d"])
    assert deduper.seen(["a", "b", "c", "d"]) == [False, True, True, True]


def test_zero_window_is_off() -> None:
    deduper = MemoryDeduper(window_s=0, max_keys=3)
    deduper.mark(["a"])
    assert deduper.seen(["a"]) == [False]
