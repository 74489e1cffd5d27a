"""Carrying out the retention policy in small transactions (``evalfleet purge``).

On a partitioned Postgres store (``evalfleet.store.partitions``) the days wholly past
the verdicts' retention go first, a day's partitions of verdicts, scores and samples
dropped together in one short transaction (their rows counted per metric first,
through the (metric, created_at) index). What is left before the cut-off (the day at
the boundary, the default partition, the legacy partition until it is wholly past)
is trimmed row by row as below, and so is everything on SQLite.

Each task walks one metric at a time along the (metric, created_at) index of
``verdicts``, ``batch_rows`` verdicts per transaction, from a cursor on
``created_at``, so no transaction holds many row locks or runs long, and no batch
re-reads what an earlier one handled:

- deleting verdicts, with their scores and kept samples (found through their primary
  keys, bounded on the partition key), and their keys in ``verdict_keys``;
- emptying raw outputs and error texts, from where the last run stopped (kept per
  metric in ``retention_marks``) to this run's cut-off.

Each batch is one call of ``evalfleet.store.queries.retention``, which holds the SQL.

A run that stops half-way (crash, Ctrl-C) loses nothing: every committed batch is
complete, and the next run carries on.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime

from evalfleet.ops.retention import Cutoffs, RetentionPolicy, raw_output_range
from evalfleet.store.queries.retention import RAW_OUTPUT_TASK, VerdictRetention
from evalfleet.store.sql import SqlStore, to_utc

__all__ = ["PURGE_BATCH_ROWS", "RAW_OUTPUT_TASK", "VERDICTS_TASK", "PurgeReport", "Purger"]

#: Verdicts per transaction.
PURGE_BATCH_ROWS = 10_000

#: The task name of verdict deletion (in progress callbacks; it needs no mark).
VERDICTS_TASK = "verdicts"


@dataclass
class PurgeReport:
    """What a purge did (in a dry run: would do), per metric."""

    cutoffs: Cutoffs
    dry_run: bool
    verdicts_deleted: dict[str, int] = field(default_factory=dict)
    raw_outputs_emptied: dict[str, int] = field(default_factory=dict)
    partitions_dropped: list[str] = field(default_factory=list)
    """Suffixes of the days (``pYYYYMMDD``, ``legacy``) dropped whole (Postgres)."""
    pending_finals_forgotten: int = 0
    """Session versions noted final before the verdict cut-off whose verdict never came."""
    transactions: int = 0
    elapsed_s: float = 0.0


class Purger:
    """Applies a retention policy to a verdict store."""

    def __init__(self, store: SqlStore, policy: RetentionPolicy, *,
                 batch_rows: int = PURGE_BATCH_ROWS,
                 on_batch: Callable[[str, str, int], None] | None = None) -> None:
        """Purge ``store`` by ``policy``.

        Args:
            store: The verdict store.
            policy: The retention policy.
            batch_rows: Verdicts per transaction.
            on_batch: Called after each committed batch with (task, metric, rows).
        """
        self.store = store
        self.policy = policy
        self.batch_rows = batch_rows
        self._on_batch = on_batch
        self._rows = VerdictRetention(store, batch_rows=batch_rows)

    def run(self, *, now: datetime, dry_run: bool = False) -> PurgeReport:
        """Delete old verdicts, then empty old raw outputs, metric by metric.

        Args:
            now: The time the cut-offs count back from.
            dry_run: Count what would go; change nothing.

        Returns:
            The counts.
        """
        started = time.perf_counter()
        report = PurgeReport(self.policy.cutoffs(now=to_utc(now)), dry_run=dry_run)
        if not self.policy.keeps_everything:
            before = report.cutoffs.verdicts_before
            if before is not None:
                self._drop_partitions(before, report)
            for metric in self.metrics():
                self._purge_metric(metric, report)
            if before is not None:
                self._forget_pending_finals(before, report)
        report.elapsed_s = time.perf_counter() - started
        return report

    def metrics(self) -> list[str]:
        """The metrics that have verdicts."""
        return self._rows.metrics()

    def _purge_metric(self, metric: str, report: PurgeReport) -> None:
        cutoffs = report.cutoffs
        if cutoffs.verdicts_before is not None:
            report.verdicts_deleted[metric] = report.verdicts_deleted.get(metric, 0) + (
                self._rows.count_verdicts(metric, before=cutoffs.verdicts_before)
                if report.dry_run else
                self._delete_verdicts(metric, cutoffs.verdicts_before, report))
        span = raw_output_range(cutoffs, done_until=self._rows.raw_outputs_done_until(metric))
        if span is not None:
            report.raw_outputs_emptied[metric] = (
                self._rows.count_raw_outputs(metric, *span) if report.dry_run
                else self._empty_raw_outputs(metric, span, report))

    def _drop_partitions(self, before: datetime, report: PurgeReport) -> None:
        """Count then drop each day of verdicts, scores and samples wholly before ``before``
        (a dry run only lists them: its row counts cover every verdict to go)."""
        days = self._rows.expired_days(before)
        report.partitions_dropped.extend(day.suffix for day in days)
        if report.dry_run:
            return
        for day in days:
            counts = self._rows.drop_day(day)
            report.transactions += 1
            for metric, n in counts:
                report.verdicts_deleted[metric] = report.verdicts_deleted.get(metric, 0) + n
            if self._on_batch is not None:
                self._on_batch(VERDICTS_TASK, day.suffix, sum(n for _, n in counts))

    def _forget_pending_finals(self, before: datetime, report: PurgeReport) -> None:
        forgotten = self._rows.forget_pending_finals(before=before, dry_run=report.dry_run)
        report.pending_finals_forgotten = forgotten
        if forgotten and not report.dry_run:
            report.transactions += 1

    def _delete_verdicts(self, metric: str, before: datetime, report: PurgeReport) -> int:
        layout = self._rows.layout()
        return self._walk(VERDICTS_TASK, metric, lambda cursor: self._rows.delete_verdicts(
            metric, after=cursor, before=before, layout=layout), report)

    def _empty_raw_outputs(self, metric: str, span: tuple[datetime | None, datetime],
                           report: PurgeReport) -> int:
        start, end = span
        return self._walk(RAW_OUTPUT_TASK, metric, lambda cursor: self._rows.empty_raw_outputs(
            metric, cursor or start, end), report)

    def _walk(self, task: str, metric: str,
              step: Callable[[datetime | None], list[datetime]],
              report: PurgeReport) -> int:
        """Run ``step`` batch by batch (each its own transaction), moving the cursor on."""
        total, cursor = 0, None
        while True:
            moments = step(cursor)
            report.transactions += 1
            total += len(moments)
            if self._on_batch is not None:
                self._on_batch(task, metric, len(moments))
            if len(moments) < self.batch_rows:
                return total
            cursor = max(moments)
