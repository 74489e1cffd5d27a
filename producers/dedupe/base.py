"""Deduplication of repeated jobs within a window: the interface.

A job is checked before publishing and marked only after it was published. A
crash in between means the job may be published again after a restart (a
repeat the workers judge once), never that it is taken for a repeat and lost.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence


def dedupe_key(metric: str, sample_id: str, *, final_session: bool = False) -> str:
    """The key of one job: a sample id is judged once per metric. A session version
    sent again to be made final (``evalfleet.core.session.Session.final``) is a job of
    its own: it repeats the idle version's id, and dropping it as a repeat would leave
    that verdict provisional."""
    return f"{metric}:{sample_id}" + (":final" if final_session else "")


class Deduper(ABC):
    """Remembers which jobs were published within the last ``window_s``."""

    @abstractmethod
    def seen(self, keys: Sequence[str]) -> list[bool]:
        """Which of ``keys`` were marked within the window.

        Args:
            keys: Job keys from :func:`dedupe_key`.

        Returns:
            For each key, True when it is a repeat.

        Raises:
            BrokerUnavailable: When the shared store cannot be reached.
        """

    @abstractmethod
    def mark(self, keys: Sequence[str]) -> None:
        """Remember ``keys`` as published, for the window.

        Raises:
            BrokerUnavailable: When the shared store cannot be reached.
        """
