"""Where samples come from: JSONL files and standard input, line by line."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO


def read_lines(path: str) -> Iterator[tuple[int, bytes]]:
    """Yield ``(line number, raw bytes)`` for each line of ``path`` (``-`` for stdin).

    Bytes are not decoded here, so a line with bad encoding becomes one clear
    error for that line instead of stopping the file.
    """
    if path == "-":
        yield from _numbered(sys.stdin.buffer)
        return
    with Path(path).open("rb") as stream:
        yield from _numbered(stream)


def _numbered(stream: BinaryIO) -> Iterator[tuple[int, bytes]]:
    yield from enumerate(stream, 1)
