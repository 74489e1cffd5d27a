"""Reading a growing log file line by line, across rotation and truncation.

Only complete lines (ending in a newline) are returned; a line still being
written is left for the next poll. When the file at the followed path is
replaced (rotation: ``app.log`` renamed to ``app.log.1`` and a new ``app.log``
created), the old file is read to its end first, until it has been quiet for
``rotation_grace_s`` (a writer may still be finishing its last lines), and then
the new one from its start. When the same file shrinks below the position
(``copytruncate``), reading restarts at its beginning.

Resuming from a saved :class:`~producers.offsets.Position`: the same file
continues from the offset; if it was rotated while nobody followed it, the old
file is looked up by inode in the same folder and finished first.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from producers.offsets import FINGERPRINT_BYTES, Position, file_fingerprint, fingerprint
from producers.screen import OversizedLine

logger = logging.getLogger(__name__)

#: Seconds the old file must stay quiet after a rotation before the new one is read.
ROTATION_GRACE_S = 1.0

#: Longest line read, in bytes; a longer one is skipped whole (to its newline) and
#: reported as an oversized record, so one line can neither exhaust memory nor stall
#: the follower (a line longer than the read limit never looked complete).
MAX_LINE_BYTES = 16 * 1024 * 1024

#: Bytes read at a time while skipping an oversized line.
_SKIP_CHUNK_BYTES = 1024 * 1024


@dataclass(frozen=True, slots=True)
class TailLine:
    """One complete line of a followed file."""

    number: int
    """Line number in its file, from 1."""
    data: bytes
    """The raw line, newline included (an :class:`OversizedLine` for one too long)."""
    source: str
    """The name of the file it was read from (``app.log.1`` after a rotation)."""
    position: Position
    """The position just after this line."""


class Tail:
    """Follows one path. Not thread-safe: one reader."""

    def __init__(self, path: Path, *, start: Position | None,
                 rotation_grace_s: float = ROTATION_GRACE_S,
                 clock: Callable[[], float] = time.monotonic,
                 max_line_bytes: int = MAX_LINE_BYTES) -> None:
        """Prepare to follow ``path`` from ``start`` (its beginning when None).

        Args:
            path: The followed path.
            start: A saved position, or None.
            rotation_grace_s: Quiet time of a rotated file before moving on.
            clock: Monotonic time source.
            max_line_bytes: Longest line read; longer ones are skipped and reported.
        """
        self.path = path
        self._max_line_bytes = max_line_bytes
        self._start = start
        self._grace_s = rotation_grace_s
        self._clock = clock
        self._file: BinaryIO | None = None
        self._name = path.name
        self._ident = (0, 0)
        self._offset = 0
        self._line = 0
        self._fingerprint = ""
        self._fingerprint_length = -1
        self._rotated_at: float | None = None

    def poll(self, *, max_lines: int) -> list[TailLine]:
        """The complete lines available now, up to ``max_lines``; [] when none.

        Args:
            max_lines: Most lines returned.

        Returns:
            Lines in file order, each with the position after it.
        """
        if self._file is None and not self._open_first():
            return []
        lines = self._read(max_lines)
        if lines:
            if self._rotated_at is not None:
                self._rotated_at = self._clock()
            return lines
        return self._at_end()

    def close(self) -> None:
        """Close the file."""
        if self._file is not None:
            self._file.close()
            self._file = None

    def _open_first(self) -> bool:
        start, self._start = self._start, None
        if start is None:
            return self._open(self.path, offset=0, line=0)
        identity = _identity(self.path)
        if identity == (start.device, start.inode) and self._same_file(self.path, start):
            return self._open(self.path, offset=start.offset, line=start.line)
        rotated = _find_by_inode(self.path.parent, start)
        if rotated is not None:
            logger.info("%s was rotated while not followed: finishing %s first",
                        self.path, rotated.name)
            opened = self._open(rotated, offset=start.offset, line=start.line)
            self._rotated_at = float("-inf")  # move on as soon as it is read to its end
            return opened
        logger.warning("%s was replaced and the file read before (inode %d) is gone: "
                       "reading the new file from its start", self.path, start.inode)
        return self._open(self.path, offset=0, line=0)

    def _same_file(self, path: Path, start: Position) -> bool:
        # An inode number can be reused by a new file; the first bytes tell them apart.
        if start.offset == 0:
            return True
        return file_fingerprint(path, length=start.offset) == start.fingerprint

    def _open(self, path: Path, *, offset: int, line: int) -> bool:
        try:
            stream = open(path, "rb")  # noqa: SIM115 - held open across polls
        except FileNotFoundError:
            return False
        stat = os.fstat(stream.fileno())
        if stat.st_size < offset:
            logger.warning("%s is shorter than the saved position: reading from its start",
                           path)
            offset, line = 0, 0
        stream.seek(offset)
        self._file, self._name = stream, path.name
        self._ident = (stat.st_dev, stat.st_ino)
        self._offset, self._line = offset, line
        self._fingerprint_length = -1
        return True

    def _read(self, max_lines: int) -> list[TailLine]:
        assert self._file is not None
        lines: list[TailLine] = []
        while len(lines) < max_lines:
            data = self._file.readline(self._max_line_bytes + 1)
            if len(data) > self._max_line_bytes:
                length = len(data) if data.endswith(b"\n") else self._skip_line(len(data))
                if length is None:
                    self._file.seek(self._offset)  # no newline yet: wait for it
                    break
                self._offset += length
                self._line += 1
                lines.append(TailLine(self._line, OversizedLine(length), self._name,
                                      self._position()))
                continue
            if not data.endswith(b"\n"):
                self._file.seek(self._offset)  # incomplete: wait for the rest of it
                break
            self._offset += len(data)
            self._line += 1
            lines.append(TailLine(self._line, data, self._name, self._position()))
        return lines

    def _skip_line(self, read: int) -> int | None:
        """Read on to the newline that ends an oversized line; its whole length, or
        None when the file ends first. Linear in the line, whatever its length."""
        assert self._file is not None
        length = read
        while True:
            chunk = self._file.read(_SKIP_CHUNK_BYTES)
            if not chunk:
                return None
            end = chunk.find(b"\n")
            if end >= 0:
                length += end + 1
                self._file.seek(self._offset + length)
                return length
            length += len(chunk)

    def _position(self) -> Position:
        length = min(self._offset, FINGERPRINT_BYTES)
        if self._fingerprint_length != length:
            assert self._file is not None
            self._fingerprint = fingerprint(os.pread(self._file.fileno(), length, 0))
            self._fingerprint_length = length
        return Position(device=self._ident[0], inode=self._ident[1], offset=self._offset,
                        line=self._line, fingerprint=self._fingerprint)

    def _at_end(self) -> list[TailLine]:
        assert self._file is not None
        identity = _identity(self.path)
        if identity == self._ident:
            self._rotated_at = None
            if os.fstat(self._file.fileno()).st_size < self._offset:
                logger.warning("%s was truncated: reading it again from its start", self.path)
                self._file.seek(0)
                self._offset, self._line, self._fingerprint_length = 0, 0, -1
            return []
        if identity is None:
            return []  # moved away, the new file not there yet: keep the old one open
        now = self._clock()
        if self._rotated_at is None:
            self._rotated_at = now
            return []
        if now - self._rotated_at < self._grace_s:
            return []
        last = self._finish()
        self.close()
        self._rotated_at = None
        self._open(self.path, offset=0, line=0)
        return last

    def _finish(self) -> list[TailLine]:
        """A last line without a newline at the end of a rotated file, as a line."""
        assert self._file is not None
        rest = self._file.read()
        if not rest:
            return []
        logger.warning("%s ended without a newline after rotation; read its last line as is",
                       self._name)
        self._offset += len(rest)
        self._line += 1
        return [TailLine(self._line, rest + b"\n", self._name, self._position())]


def _identity(path: Path) -> tuple[int, int] | None:
    try:
        stat = os.stat(path)
    except FileNotFoundError:
        return None
    return stat.st_dev, stat.st_ino


def _find_by_inode(folder: Path, start: Position) -> Path | None:
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return None
    for entry in entries:
        try:
            stat = entry.stat(follow_symlinks=False)
        except OSError:
            continue
        if (stat.st_dev, stat.st_ino) == (start.device, start.inode) and entry.is_file():
            path = Path(entry.path)
            if start.offset == 0 or \
                    file_fingerprint(path, length=start.offset) == start.fingerprint:
                return path
    return None
