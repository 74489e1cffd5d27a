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
        suffix = f"{queue}.msg"
        try:
            names = os.listdir(self._folder)
        except OSError:
            return None
        # kombu matches a file to its queue by everything after the first dot.
        return sum(1 for name in names if name.partition(".")[2] == suffix)
