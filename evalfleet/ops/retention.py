"""Retention policy: what ``evalfleet purge`` removes, as cut-off times. Pure.

Two settings, each None to keep everything:

- ``verdict_retention_days``: verdicts created before ``now - days`` are deleted,
  their scores with them.
- ``raw_output_retention_days``: verdicts created before ``now - days`` keep their
  scores, reason and metadata but lose the judge's raw output and the error text
  (the bulky part, and the part that may quote sample text).

Both apply to creation time (``created_at``), not the sample's timestamp: a backfill
of old samples is kept as long as any other verdict.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from evalfleet.core.settings import Settings


@dataclass(frozen=True, slots=True)
class Cutoffs:
    """Creation times before which each retention task applies (None: it does not)."""

    verdicts_before: datetime | None
    raw_output_before: datetime | None


@dataclass(frozen=True, slots=True)
class RetentionPolicy:
    """How long verdicts and their raw outputs are kept, in days (None: forever)."""

    verdict_days: float | None = None
    raw_output_days: float | None = None

    @classmethod
    def from_settings(cls, settings: Settings) -> RetentionPolicy:
        """The policy the settings configure."""
        return cls(verdict_days=settings.retention.verdict_retention_days,
                   raw_output_days=settings.retention.raw_output_retention_days)

    @property
    def keeps_everything(self) -> bool:
        """True when neither retention is set."""
        return self.verdict_days is None and self.raw_output_days is None

    def cutoffs(self, *, now: datetime) -> Cutoffs:
        """The cut-off times as of ``now``."""
        return Cutoffs(
            verdicts_before=_before(now, self.verdict_days),
            raw_output_before=_before(now, self.raw_output_days),
        )


def raw_output_range(
    cutoffs: Cutoffs, *, done_until: datetime | None,
) -> tuple[datetime | None, datetime] | None:
    """The creation times whose raw outputs a purge still has to empty.

    Args:
        cutoffs: This run's cut-offs.
        done_until: How far earlier runs got (None: never ran).

    Returns:
        ``(start, end)``: from ``start`` (inclusive; None: the beginning) to ``end``
        (exclusive); None when there is nothing to do. Verdicts about to be deleted
        and those emptied by earlier runs are left out.
    """
    end = cutoffs.raw_output_before
    if end is None:
        return None
    starts = [moment for moment in (done_until, cutoffs.verdicts_before) if moment is not None]
    start = max(starts) if starts else None
    if start is not None and start >= end:
        return None
    return start, end


def _before(now: datetime, days: float | None) -> datetime | None:
    return None if days is None else now - timedelta(days=days)
