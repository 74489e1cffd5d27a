"""Group commit without a database: every call gets its own outcome, once, whoever leads."""

from __future__ import annotations

import random
import threading
import time
from datetime import UTC, datetime

import pytest

from evalfleet.store.base import VerdictKey
from evalfleet.store.group import ClaimAndSave, GroupCommit


@pytest.mark.parametrize("leaders", [1, 2, 3])
def test_many_threads_each_get_their_own_outcome_and_groups_keep_their_bounds(
        leaders: int) -> None:
    groups: list[list[ClaimAndSave]] = []
    running: list[list[ClaimAndSave]] = []
    overlaps: list[str] = []
    lock = threading.Lock()

    def run(group: list[ClaimAndSave]) -> None:
        keys = {key for call in group for key in call.keys}
        with lock:
            groups.append(group)
            if len(running) >= leaders:
                overlaps.append(f"{len(running) + 1} groups at once")
            if any(keys & {key for other in running for call in other for key in call.keys}):
                overlaps.append("a key in two groups at once")
            running.append(group)
        time.sleep(0)  # let another leader in
        with lock:
            running.remove(group)
        for call in group:  # a call of an owner ending in 7 fails, alone
            if call.owner.endswith("7"):
                call.error = ValueError(call.owner)
            else:
                call.claims = []
            call.done = True

    commit = GroupCommit(run, max_group=4, leaders=leaders)
    outcomes: dict[str, str] = {}

    def caller(thread: int) -> None:
        chooser = random.Random(thread)
        for n in range(50):
            owner = f"{thread}-{n}"
            key = VerdictKey(f"s-{chooser.randrange(8)}", "m", "v", "check:x")
            try:
                commit.submit(ClaimAndSave([key], owner, 60, datetime.now(UTC),
                                           lambda claims: []))
                outcomes[owner] = "stored"
            except ValueError as exc:
                outcomes[owner] = f"failed {exc}"

    threads = [threading.Thread(target=caller, args=(n,)) for n in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert not any(thread.is_alive() for thread in threads)
    assert outcomes == {f"{t}-{n}": f"failed {t}-{n}" if f"{t}-{n}".endswith("7") else "stored"
                        for t in range(16) for n in range(50)}
    assert sum(len(group) for group in groups) == 16 * 50 and commit.waiting == 0
    assert overlaps == []
    for group in groups:
        keys = [key for call in group for key in call.keys]
        assert len(group) <= 4 and len(keys) == len(set(keys))


def test_a_run_that_raises_fails_its_group_and_the_next_call_leads() -> None:
    def run(group: list[ClaimAndSave]) -> None:
        if any(call.owner == "bad" for call in group):
            raise RuntimeError("a bug in the run")
        for call in group:
            call.done = True

    commit = GroupCommit(run, leaders=2)
    key = VerdictKey("s-1", "m", "v", "check:x")
    try:
        commit.submit(ClaimAndSave([key], "bad", 60, datetime.now(UTC), lambda claims: []))
    except RuntimeError as exc:
        assert str(exc) == "a bug in the run"
    else:
        raise AssertionError("the run's error was not raised")
    assert commit.submit(ClaimAndSave([key], "good", 60, datetime.now(UTC),
                                      lambda claims: [])) == []
