"""Tailing a file: complete lines only, rotation, truncation, resuming."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from producers.tail import Tail, TailLine


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


def append(path: Path, *lines: str, newline: bool = True) -> None:
    with path.open("ab") as stream:
        stream.write("".join(f"{line}\n" if newline else line for line in lines).encode())


def read(tail: Tail, clock: Clock | None = None, *, polls: int = 5) -> list[TailLine]:
    out: list[TailLine] = []
    for _ in range(polls):
        out.extend(tail.poll(max_lines=100))
        if clock is not None:
            clock.now += 0.6
    return out


def texts(lines: list[TailLine]) -> list[str]:
    return [line.data.decode().rstrip("\n") for line in lines]


def test_only_complete_lines(tmp_path: Path) -> None:
    path = tmp_path / "app.log"
    append(path, "a", "b")
    append(path, "c-part", newline=False)
    tail = Tail(path, start=None)
    lines = tail.poll(max_lines=10)
    assert texts(lines) == ["a", "b"]
    assert [line.number for line in lines] == [1, 2]
    assert lines[-1].position.offset == 4 and lines[-1].position.line == 2
    assert tail.poll(max_lines=10) == []
    append(path, "-end")
    assert texts(tail.poll(max_lines=10)) == ["c-part-end"]
    tail.close()


def test_max_lines(tmp_path: Path) -> None:
    path = tmp_path / "app.log"
    append(path, *"abcde")
    tail = Tail(path, start=None)
    assert texts(tail.poll(max_lines=2)) == ["a", "b"]
    assert texts(tail.poll(max_lines=10)) == ["c", "d", "e"]
    tail.close()


def test_rotation_finishes_the_old_file_then_reads_the_new(tmp_path: Path,
                                                           clock: Clock) -> None:
    path = tmp_path / "app.log"
    append(path, "1", "2")
    tail = Tail(path, start=None, clock=clock)
    assert texts(tail.poll(max_lines=10)) == ["1", "2"]
    os.rename(path, tmp_path / "app.log.1")
    append(tmp_path / "app.log.1", "3")  # the writer finishes the old file
    append(path, "4", "5")
    lines = read(tail, clock)
    assert texts(lines) == ["3", "4", "5"]
    assert [line.number for line in lines] == [3, 1, 2]  # numbered per file
    tail.close()


def test_rotation_waits_while_the_old_file_is_written(tmp_path: Path, clock: Clock) -> None:
    path = tmp_path / "app.log"
    append(path, "1")
    tail = Tail(path, start=None, clock=clock, rotation_grace_s=1.0)
    tail.poll(max_lines=10)
    os.rename(path, tmp_path / "app.log.1")
    append(path, "new")
    assert tail.poll(max_lines=10) == []  # rotation seen, grace starts
    clock.now = 0.8
    append(tmp_path / "app.log.1", "late")
    assert texts(tail.poll(max_lines=10)) == ["late"]  # grace starts again
    clock.now = 1.5
    assert tail.poll(max_lines=10) == []
    clock.now = 1.9
    assert texts(tail.poll(max_lines=10)) + texts(tail.poll(max_lines=10)) == ["new"]
    tail.close()


def test_a_rotated_file_without_a_final_newline_loses_nothing(tmp_path: Path,
                                                              clock: Clock) -> None:
    path = tmp_path / "app.log"
    append(path, "1")
    append(path, "cut", newline=False)
    tail = Tail(path, start=None, clock=clock)
    assert texts(tail.poll(max_lines=10)) == ["1"]
    os.rename(path, tmp_path / "app.log.1")
    append(path, "2")
    assert texts(read(tail, clock)) == ["cut", "2"]
    tail.close()


def test_truncation_starts_over(tmp_path: Path) -> None:
    path = tmp_path / "app.log"
    append(path, "aaaa", "bbbb")
    tail = Tail(path, start=None)
    tail.poll(max_lines=10)
    path.write_bytes(b"")  # copytruncate
    append(path, "c")
    assert tail.poll(max_lines=10) == []  # notices the truncation
    lines = tail.poll(max_lines=10)
    assert texts(lines) == ["c"] and lines[0].number == 1
    tail.close()


def test_a_missing_file_is_waited_for(tmp_path: Path) -> None:
    path = tmp_path / "app.log"
    tail = Tail(path, start=None)
    assert tail.poll(max_lines=10) == []
    append(path, "x")
    assert texts(tail.poll(max_lines=10)) == ["x"]
    tail.close()


def test_resume_from_a_position(tmp_path: Path) -> None:
    path = tmp_path / "app.log"
    append(path, *"abc")
    first = Tail(path, start=None)
    position = first.poll(max_lines=2)[-1].position
    first.close()
    append(path, "d")
    second = Tail(path, start=position)
    lines = second.poll(max_lines=10)
    assert texts(lines) == ["c", "d"] and lines[0].number == 3
    second.close()


def test_resume_after_a_rotation_while_stopped(tmp_path: Path, clock: Clock) -> None:
    path = tmp_path / "app.log"
    append(path, *"abc")
    first = Tail(path, start=None)
    position = first.poll(max_lines=1)[-1].position
    first.close()
    os.rename(path, tmp_path / "app.log.1")
    append(path, "d", "e")
    second = Tail(path, start=position, clock=clock)
    lines = read(second, clock)
    assert texts(lines) == ["b", "c", "d", "e"]
    assert lines[0].source == "app.log.1" and lines[2].source == "app.log"
    second.close()


def test_resume_when_the_old_file_is_gone(tmp_path: Path, clock: Clock) -> None:
    path = tmp_path / "app.log"
    append(path, *"abc")
    first = Tail(path, start=None)
    position = first.poll(max_lines=3)[-1].position
    first.close()
    path.unlink()
    append(path, "new-1", "new-2")
    assert texts(read(Tail(path, start=position, clock=clock), clock)) == ["new-1", "new-2"]


def test_a_new_file_reusing_the_inode_is_not_taken_for_the_old(tmp_path: Path) -> None:
    path = tmp_path / "app.log"
    append(path, "first file, line 1", "first file, line 2")
    first = Tail(path, start=None)
    position = first.poll(max_lines=10)[-1].position
    first.close()
    with path.open("r+b") as stream:  # same inode, different content: as if reused
        stream.write(b"SECOND")
    second = Tail(path, start=position)
    assert texts(second.poll(max_lines=10))[0].startswith("SECOND")
    second.close()


def size(line: TailLine) -> int:
    return getattr(line.data, "size_bytes", 0)


def test_an_oversized_line_is_skipped_whole_and_reported(tmp_path: Path) -> None:
    path = tmp_path / "app.log"
    path.write_bytes(b'{"id": "a"}\n' + b"x" * 5000 + b"\n" + b"y" * 100 + b'{"id": "b"}\n')
    tail = Tail(path, start=None, max_line_bytes=1000)
    lines = tail.poll(max_lines=10)
    tail.close()
    assert [(line.number, size(line), line.data) for line in lines] == [
        (1, 0, b'{"id": "a"}\n'), (2, 5001, b""), (3, 0, b"y" * 100 + b'{"id": "b"}\n')]


def test_an_oversized_line_still_being_written_waits_then_goes(tmp_path: Path) -> None:
    path = tmp_path / "app.log"
    path.write_bytes(b"x" * 3000)
    tail = Tail(path, start=None, max_line_bytes=1000)
    assert tail.poll(max_lines=10) == []
    with path.open("ab") as stream:
        stream.write(b"x" * 3000 + b'\n{"id": "c"}\n')
    lines = tail.poll(max_lines=10)
    tail.close()
    assert [(size(line), line.data) for line in lines] == [(6001, b""),
                                                               (0, b'{"id": "c"}\n')]
