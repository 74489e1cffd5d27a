"""The depth cache: measured at most once per TTL, own publishes added in between."""

from __future__ import annotations

from evalfleet.broker.depth import CachedQueueDepth, QueueDepth, UnknownQueueDepth


class Counting(QueueDepth):
    def __init__(self) -> None:
        self.calls = 0
        self.value: int | None = 10

    def depth(self, queue: str) -> int | None:
        self.calls += 1
        return self.value


def test_cached_for_the_ttl_with_own_publishes_added() -> None:
    now = [0.0]
    probe = Counting()
    cached = CachedQueueDepth(probe, ttl_s=1.0, clock=lambda: now[0])
    assert cached.depth("q") == 10
    cached.add("q", 5)
    now[0] = 0.9
    assert cached.depth("q") == 15 and probe.calls == 1
    now[0] = 1.0
    probe.value = 3
    assert cached.depth("q") == 3 and probe.calls == 2


def test_unknown_stays_unknown() -> None:
    cached = CachedQueueDepth(UnknownQueueDepth())
    cached.add("q", 5)
    assert cached.depth("q") is None


def test_a_measured_message_counts_as_its_queues_jobs_per_message() -> None:
    cached = CachedQueueDepth(Counting(), jobs_per_message=16,
                              jobs_per_queue={"eval.checks": 64})
    assert cached.depth("eval.rag_qa") == 160
    assert cached.depth("eval.checks") == 640
