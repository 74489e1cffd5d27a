"""Queue depth on the embedded file-system broker: one file per waiting job."""

from __future__ import annotations

import os
from pathlib import Path

from evalfleet.broker.depth.base import QueueDepth


class FilesystemQueueDepth(QueueDepth):
    """Counts the message files of a queue in the broker's folder."""

    def __init__(self, folder: Path) -> None:
        """Count files in ``folder`` (the broker's ``queue`` folder)."""
        self._folder = folder

    def depth(self, queue: str) -> int | None:
        """Files named ``<time>_<uuid>.<queue>.msg``; None when the folder is unreadable."""
        names = message_files(self._folder, queue)
        return None if names is None else len(names)


def message_files(folder: Path, queue: str) -> list[str] | None:
    """The names of ``queue``'s message files in ``folder``, oldest first (the order kombu
    delivers them in); None when the folder cannot be read.

    Args:
        folder: The broker's ``queue`` folder.
        queue: The queue, ``eval.<metric>``.
    """
    suffix = f"{queue}.msg"
    try:
        names = os.listdir(folder)
    except OSError:
        return None
    # kombu names a file <time>_<uuid>.<queue>.msg and matches it to its queue by
    # everything after the first dot; the time prefix sorts oldest first.
    return sorted(name for name in names if name.partition(".")[2] == suffix)
