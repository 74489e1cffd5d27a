"""From raw records to jobs: screen, redact, dispatch; count every outcome.

A :class:`Pipeline` handles one batch of records (JSONL lines, decoded JSON from
an HTTP request) and says what became of each: ``accepted`` (at least one job
published), ``sampled_out``, ``shed``, ``duplicate`` or ``rejected`` with errors
naming the record, id and field. :func:`run_lines` drives it over a file;
:func:`produce` is the simple per-job form the demo uses. The SDK (``evalfleet.sdk``)
runs the same pipeline in two steps, :meth:`Pipeline.screen` then
:meth:`Pipeline.publish`, so it can publish a screened batch again after a broker outage.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import islice
from typing import Any, Literal

from evalfleet.broker.depth import CachedQueueDepth, UnknownQueueDepth
from evalfleet.core.errors import InvalidSample
from evalfleet.core.message import Job
from evalfleet.core.metric import Metric
from producers import telemetry
from producers.dedupe import MemoryDeduper
from producers.dispatcher import Dispatcher, JobFate
from producers.limits import FieldLimits
from producers.policy import Fallbacks, Policy, default_policy
from producers.quota import SegmentQuota
from producers.screen import Admitted, OversizedLine, Rejected, SampledOut, Screen

RecordStatus = Literal["accepted", "sampled_out", "shed", "duplicate", "rejected"]


@dataclass(frozen=True, slots=True)
class RecordResult:
    """What became of one record."""

    index: int
    """Position in the batch, from 0."""
    record: str
    """Where it came from (``line 9``, ``samples[3]``)."""
    sample_id: str | None
    """Its id, when it could be read."""
    status: RecordStatus
    """``accepted`` when at least one job was published."""
    errors: tuple[InvalidSample, ...] = ()
    """What was wrong (also for an accepted record when one metric lacked inputs)."""
    jobs: tuple[JobFate, ...] = ()
    """The fate of each picked metric."""
    valid: bool = True
    """True when the record is a valid sample (even if it lacked a metric's inputs)."""
    segment: str | None = None
    """Its segment label, when valid."""
    redactions: Mapping[str, int] = field(default_factory=dict)
    """PII matches redacted, per kind."""


@dataclass
class ProduceStats:
    """Running counts of a produce run (also the summary ``evalfleet produce`` prints)."""

    lines: int = 0
    """Non-blank records read."""
    accepted: int = 0
    """Valid records (whether sampled in or out)."""
    rejected: int = 0
    """Records with at least one error."""
    sampled_out: int = 0
    """Valid records no metric kept."""
    enqueued: dict[str, int] = field(default_factory=dict)
    """Jobs published, per metric."""
    shed: Counter[tuple[str, str]] = field(default_factory=Counter)
    """Jobs shed under backpressure, per (metric, segment)."""
    duplicates: Counter[str] = field(default_factory=Counter)
    """Jobs left out as repeats within the deduplication window, per metric."""
    redactions: Counter[str] = field(default_factory=Counter)
    """PII matches redacted, per kind."""

    @property
    def jobs(self) -> int:
        """Jobs published in all."""
        return sum(self.enqueued.values())

    def add(self, results: Iterable[RecordResult]) -> None:
        """Count ``results`` in."""
        for result in results:
            self.lines += 1
            self.accepted += result.valid
            self.rejected += bool(result.errors)
            self.sampled_out += result.status == "sampled_out"
            self.redactions.update(result.redactions)
            for fate in result.jobs:
                if fate.status == "enqueued":
                    self.enqueued[fate.metric] = self.enqueued.get(fate.metric, 0) + 1
                elif fate.status == "shed":
                    self.shed[(fate.metric, telemetry.short_label(result.segment or ""))] += 1
                else:
                    self.duplicates[fate.metric] += 1


@dataclass(frozen=True, slots=True)
class Screened:
    """One batch screened and redacted, not yet published: a caller that must wait for the
    broker (the SDK) publishes the same again without screening twice."""

    policy: Policy
    """The sampling policy it was screened under (and is dispatched under)."""
    admitted: list[tuple[int, Admitted]]
    """The admitted records, redacted, with their positions in the batch."""
    settled: list[RecordResult]
    """The results of the others (sampled out, rejected): final at screening."""


class Pipeline:
    """Screens, redacts and dispatches batches of records. Thread-safe."""

    def __init__(
        self, *, screen: Screen, dispatcher: Dispatcher, policy: Callable[[], Policy],
        metrics: Sequence[str] | None = None, rate: float | None = None, source: str,
        clock: Callable[[], float] = time.time,
    ) -> None:
        """Wire the stages.

        Args:
            screen: Validation, limits, sampling, redaction.
            dispatcher: Deduplication, backpressure, publishing.
            policy: Returns the policy in effect (a reloader's ``current``).
            metrics: The metrics to produce for; None means those the policy lists.
            rate: A rate overriding the policy's (``--sample-rate``).
            source: Label of the source in telemetry (``file``, ``follow``, ``ingest``).
            clock: Wall-clock time source (segment windows).
        """
        self._screen = screen
        self._dispatcher = dispatcher
        self._policy = policy
        self._metrics = list(metrics) if metrics is not None else None
        self._rate = rate
        self._source = source
        self._clock = clock

    def process(self, records: Sequence[tuple[str, Any]], *,
                metrics: Sequence[str] | None = None) -> list[RecordResult]:
        """Handle one batch: :meth:`screen` it, then :meth:`publish` it.

        Args:
            records: ``(record label, raw)`` pairs; raw is a JSONL line (bytes) or
                decoded JSON.
            metrics: The metrics for this batch, among the pipeline's; None for all.

        Returns:
            One result per record, in order.

        Raises:
            BrokerUnavailable: When the batch could not be published; none of it counts
                as accepted.
        """
        return self.publish(self.screen(records, metrics=metrics))

    def screen(self, records: Sequence[tuple[str, Any]], *,
               metrics: Sequence[str] | None = None) -> Screened:
        """Validate, sample and redact one batch; nothing is published or counted yet.

        Args:
            records: ``(record label, raw)`` pairs.
            metrics: The metrics for this batch, among the pipeline's; None for all.

        Returns:
            The admitted records, redacted, and the results of the others.
        """
        policy = self._policy()
        if metrics is None:
            metrics = self.metrics(policy)
        now_s = self._clock()
        admitted: list[tuple[int, Admitted]] = []
        settled: list[RecordResult] = []
        screened = [self._screen.admit(raw, record=label, policy=policy, metrics=metrics,
                                       now_s=now_s, rate=self._rate) for label, raw in records]
        for index, item in enumerate(screened):
            if isinstance(item, Admitted):
                admitted.append((index, self._screen.redact(item, policy=policy)))
            else:
                settled.append(_other_result(index, item))
        return Screened(policy=policy, admitted=admitted, settled=settled)

    def publish(self, screened: Screened) -> list[RecordResult]:
        """Dispatch a screened batch's admitted records and count every result.

        Args:
            screened: From :meth:`screen` (the same again after a broker outage, or
                what of it is still worth publishing).

        Returns:
            One result per record, in the batch's order.

        Raises:
            BrokerUnavailable: When the batch could not be published; nothing is counted.
        """
        fates = self._dispatcher.dispatch([item for _, item in screened.admitted],
                                          policy=screened.policy)
        results = screened.settled + [
            _admitted_result(index, item, item_fates)
            for (index, item), item_fates in zip(screened.admitted, fates, strict=True)]
        results.sort(key=lambda result: result.index)
        self.count(results)
        return results

    def metrics(self, policy: Policy | None = None) -> list[str]:
        """The metrics this pipeline produces for under ``policy`` (default: in effect)."""
        if self._metrics is not None:
            return self._metrics
        return (policy or self._policy()).metric_names

    def policy(self) -> Policy:
        """The sampling policy in effect."""
        return self._policy()

    @property
    def rate(self) -> float | None:
        """The rate overriding the policy's, if any."""
        return self._rate

    def count(self, results: Sequence[RecordResult]) -> None:
        """Count ``results`` in the producer's telemetry (:meth:`publish` does)."""
        # Summed first: a labelled child is looked up under a lock, once per label here.
        statuses: Counter[str] = Counter(result.status for result in results)
        redactions: Counter[str] = Counter()
        for result in results:
            redactions.update(result.redactions)
        for status, count in statuses.items():
            telemetry.RECORDS.labels(self._source, status).inc(count)
        for kind, count in redactions.items():
            telemetry.REDACTIONS.labels(kind).inc(count)


def run_lines(
    lines: Iterable[tuple[int, bytes]], *, pipeline: Pipeline, batch_size: int,
    on_error: Callable[[InvalidSample], None],
    on_progress: Callable[[ProduceStats], None] | None = None,
    stats: ProduceStats | None = None,
) -> ProduceStats:
    """Run numbered JSONL lines through ``pipeline`` in batches.

    Args:
        lines: ``(line number, bytes)`` pairs; blank lines are skipped.
        pipeline: The pipeline.
        batch_size: Records per batch (one broker round trip each).
        on_error: Receives each error, naming the line, id and field.
        on_progress: Called after each batch with the running counts.
        stats: Counts to add to (so a caller still has them if a batch fails).

    Returns:
        The counts.

    Raises:
        BrokerUnavailable: When a batch cannot be published; ``stats`` holds the
            batches before it.
    """
    stats = stats if stats is not None else ProduceStats()
    records = ((f"line {n}", line) for n, line in lines
               if isinstance(line, OversizedLine) or line.strip())
    for batch in _chunks(records, batch_size):
        results = pipeline.process(batch)
        stats.add(results)
        for result in results:
            for error in result.errors:
                on_error(error)
        if on_progress is not None:
            on_progress(stats)
    return stats


def produce(
    lines: Iterable[tuple[int, bytes]], *, metrics: list[Metric], rate: float,
    send: Callable[[Job], None], on_error: Callable[[InvalidSample], None],
    on_progress: Callable[[ProduceStats], None] | None = None,
) -> ProduceStats:
    """Turn JSONL lines into jobs one at a time, publishing each with ``send``.

    The simple form (used by the demo): default limits and redaction, sampling at
    ``rate``, no queue limit, no deduplication across calls.

    Args:
        lines: ``(line number, bytes)`` pairs.
        metrics: The metrics to enqueue each kept sample for.
        rate: Sampling rate, 0..1, applied by sample id.
        send: Publishes one job.
        on_error: Receives each error.
        on_progress: Called after each line with the running counts.

    Returns:
        The counts.
    """
    policy = default_policy(Fallbacks(rate=rate, max_queue_depth=0))
    pipeline = Pipeline(
        screen=Screen(metrics={m.name: m for m in metrics}, limits=FieldLimits(),
                      quota=SegmentQuota(max_tracked=1)),
        dispatcher=Dispatcher(publisher=_SendEach(send),
                              deduper=MemoryDeduper(window_s=0, max_keys=1),
                              depth=CachedQueueDepth(UnknownQueueDepth())),
        policy=lambda: policy, metrics=[m.name for m in metrics], source="file",
    )
    return run_lines(lines, pipeline=pipeline, batch_size=1, on_error=on_error,
                     on_progress=on_progress)


class _SendEach:
    def __init__(self, send: Callable[[Job], None]) -> None:
        self._send = send

    def send_many(self, jobs: Sequence[Job], *,
                  delays_s: Mapping[str, float] | None = None) -> None:
        for job in jobs:
            self._send(job)


def _admitted_result(index: int, admitted: Admitted, fates: list[JobFate]) -> RecordResult:
    statuses = {fate.status for fate in fates}
    status: RecordStatus = (
        "accepted" if "enqueued" in statuses else "shed" if "shed" in statuses
        else "duplicate"
    )
    return RecordResult(
        index=index, record=admitted.record, sample_id=admitted.sample.id, status=status,
        errors=admitted.errors, jobs=tuple(fates), segment=admitted.segment,
        redactions=dict(admitted.redactions or {}),
    )


def _other_result(index: int, item: SampledOut | Rejected) -> RecordResult:
    if isinstance(item, SampledOut):
        return RecordResult(index=index, record=item.record, sample_id=item.sample_id,
                            status="sampled_out", segment=item.segment)
    return RecordResult(index=index, record=item.record, sample_id=item.errors[0].sample_id,
                        status="rejected", errors=item.errors, valid=item.valid)


def _chunks(items: Iterable[Any], size: int) -> Iterator[list[Any]]:
    iterator = iter(items)
    while batch := list(islice(iterator, size)):
        yield batch
