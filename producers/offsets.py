"""Where ``produce --follow`` got to in a file, kept on disk across restarts.

A position names the file by device and inode (so a rotated file is recognised
under its new name) and by a fingerprint of its first bytes (so a new file that
reuses an old inode number is not mistaken for it). It is written atomically
(temporary file, fsync, rename) after the lines before it were published.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import asdict, dataclass, fields
from pathlib import Path

from evalfleet.core.errors import InvalidInput

#: Bytes at the start of a file that identify it beside its inode.
FINGERPRINT_BYTES = 1024


@dataclass(frozen=True, slots=True)
class Position:
    """A point in a followed file just after a complete line."""

    device: int
    """``st_dev`` of the file."""
    inode: int
    """``st_ino`` of the file."""
    offset: int
    """Bytes consumed: every line before this offset was published."""
    line: int
    """Lines consumed."""
    fingerprint: str
    """Hash of the file's first ``min(offset, FINGERPRINT_BYTES)`` bytes."""


def fingerprint(head: bytes) -> str:
    """The fingerprint of a file whose first bytes are ``head``."""
    return hashlib.blake2b(head[:FINGERPRINT_BYTES], digest_size=12).hexdigest()


def file_fingerprint(path: Path, *, length: int) -> str | None:
    """The fingerprint of the first ``min(length, FINGERPRINT_BYTES)`` bytes of ``path``.

    Returns:
        The fingerprint, or None when the file cannot be read or is shorter.
    """
    size = min(length, FINGERPRINT_BYTES)
    try:
        with open(path, "rb") as stream:
            head = stream.read(size)
    except OSError:
        return None
    return fingerprint(head) if len(head) == size else None


def default_offset_path(data_dir: Path, followed: Path) -> Path:
    """The offset file for ``followed``: in ``data_dir/follow``, named after its path."""
    resolved = str(followed.resolve())
    digest = hashlib.blake2b(resolved.encode(), digest_size=6).hexdigest()
    return data_dir / "follow" / f"{followed.name}.{digest}.offset.json"


class OffsetStore:
    """The saved position of one followed file."""

    def __init__(self, path: Path) -> None:
        """Keep the position in ``path`` (its folder is created on first save)."""
        self.path = path

    def load(self) -> Position | None:
        """The saved position, or None when there is none yet.

        Raises:
            InvalidInput: When the file exists but is not a position (delete it to
                start the followed file over).
        """
        try:
            data = json.loads(self.path.read_text())
            return Position(**{f.name: data[f.name] for f in fields(Position)})
        except FileNotFoundError:
            return None
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise InvalidInput(f"{self.path}: not a follow position ({exc}); delete it to "
                               "start the followed file from its beginning") from None

    def save(self, position: Position) -> None:
        """Write ``position`` atomically and durably."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        temporary = self.path.with_suffix(".tmp")
        with open(temporary, "w") as stream:
            stream.write(json.dumps(asdict(position)))
            stream.flush()
            os.fsync(stream.fileno())
        os.replace(temporary, self.path)
