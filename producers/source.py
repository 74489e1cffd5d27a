"""Where samples come from: JSONL files and standard input, line by line."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

from producers.screen import OversizedLine
from producers.tail import MAX_LINE_BYTES


def read_lines(path: str, *, max_line_bytes: int = MAX_LINE_BYTES) -> Iterator[tuple[int, bytes]]:
    """Yield ``(line number, raw bytes)`` for each line of ``path`` (``-`` for stdin).

    Bytes are not decoded here, so a line with bad encoding becomes one clear
    error for that line instead of stopping the file. A line over ``max_line_bytes``
    is read through without being kept and yielded as an :class:`OversizedLine`.
    """
    if path == "-":
        yield from _numbered(sys.stdin.buffer, max_line_bytes)
        return
    with Path(path).open("rb") as stream:
        yield from _numbered(stream, max_line_bytes)


def _numbered(stream: BinaryIO, max_line_bytes: int) -> Iterator[tuple[int, bytes]]:
    number = 0
    while True:
        line = stream.readline(max_line_bytes + 1)
        if not line:
            return
        number += 1
        if len(line) <= max_line_bytes or line.endswith(b"\n"):
            yield number, line if len(line) <= max_line_bytes else OversizedLine(len(line))
            continue
        size = len(line)
        while not line.endswith(b"\n"):
            line = stream.readline(1024 * 1024)
            if not line:
                break
            size += len(line)
        yield number, OversizedLine(size)
