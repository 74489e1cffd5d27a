"""Batch judging on ``/metrics``: read from the store at scrape time (``evalfleet beat``)."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from datetime import UTC, datetime

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from evalfleet.store.queries.batchspool import BatchSpool

logger = logging.getLogger(__name__)


class BatchGauges(Collector):
    """Open batches, their age and request counts, the oldest unfinished batch-mode job,
    the jobs waiting for a batch, and the money batching saved."""

    def __init__(self, spool: BatchSpool) -> None:
        self.spool = spool

    def collect(self) -> Iterator[Metric]:
        """Yield the ``evalfleet_batch_*`` families (none while the store is away)."""
        try:
            summary = self.spool.summary()
            cost, saved = self.spool.saved()
        except Exception as exc:  # a scrape must not fail because the database is down
            logger.warning("cannot read the batch spool: %s", type(exc).__name__)
            return
        now = datetime.now(UTC)
        open_batches = GaugeMetricFamily("evalfleet_batch_open",
                                         "Batches sent and not yet collected, per judge model.",
                                         labels=["judge_model"])
        requests = GaugeMetricFamily(
            "evalfleet_batch_requests", "Requests of open batches by state (total, "
            "completed, failed as the provider last reported).", labels=["state"])
        oldest_batch = GaugeMetricFamily("evalfleet_batch_oldest_age_seconds",
                                         "Age of the oldest open batch.")
        oldest_job = GaugeMetricFamily(
            "evalfleet_batch_oldest_job_age_seconds",
            "Age of the oldest batch-mode job without a verdict (spooled or in a batch).")
        jobs = GaugeMetricFamily("evalfleet_batch_jobs", "Batch-mode jobs without a verdict.",
                                 labels=["where"])
        saved_total = CounterMetricFamily(
            "evalfleet_batch_saved_usd", "US dollars batch judging saved against the "
            "synchronous price, since the start.")
        cost_total = CounterMetricFamily("evalfleet_batch_cost_usd",
                                         "US dollars batch verdicts cost, since the start.")
        per_model: dict[str, int] = {}
        for batch in summary.open_batches:
            per_model[batch.judge_model] = per_model.get(batch.judge_model, 0) + 1
        for model, count in sorted(per_model.items()):
            open_batches.add_metric([model], count)
        requests.add_metric(["total"], sum(b.requests for b in summary.open_batches))
        requests.add_metric(["completed"], sum(b.completed for b in summary.open_batches))
        requests.add_metric(["failed"], sum(b.failed for b in summary.open_batches))
        if summary.open_batches:
            first = min(b.created_at for b in summary.open_batches)
            oldest_batch.add_metric([], (now - first).total_seconds())
        if summary.oldest_spooled_at is not None:
            oldest_job.add_metric([], (now - summary.oldest_spooled_at).total_seconds())
        jobs.add_metric(["waiting"], summary.waiting)
        jobs.add_metric(["in_batch"], summary.in_batches)
        saved_total.add_metric([], saved)
        cost_total.add_metric([], cost)
        yield from (open_batches, requests, oldest_batch, oldest_job, jobs, saved_total,
                    cost_total)
