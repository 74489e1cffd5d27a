"""The deduplication contract, on every backend."""

from __future__ import annotations

from producers.dedupe import Deduper, dedupe_key


def test_marked_keys_are_seen(deduper: Deduper) -> None:
    assert deduper.seen(["rag_qa:a", "rag_qa:b"]) == [False, False]
    deduper.mark(["rag_qa:a"])
    assert deduper.seen(["rag_qa:a", "rag_qa:b"]) == [True, False]


def test_only_marking_makes_a_repeat(deduper: Deduper) -> None:
    deduper.seen(["k"])  # a check claims nothing: a crash before publishing loses nothing
    assert deduper.seen(["k"]) == [False]


def test_keys_are_per_metric(deduper: Deduper) -> None:
    deduper.mark([dedupe_key("rag_qa", "id-1")])
    assert deduper.seen([dedupe_key("bbh_match", "id-1")]) == [False]
    assert deduper.seen([]) == []
    deduper.mark([])


def test_a_final_session_version_is_not_a_repeat_of_its_idle_version(
        deduper: Deduper) -> None:
    deduper.mark([dedupe_key("conversation_goal_completion", "conv-1#2-abc")])
    assert deduper.seen([dedupe_key("conversation_goal_completion", "conv-1#2-abc",
                                    final_session=True)]) == [False]
