"""The in-process SDK: ``sdk.submit(sample, metrics=...)`` from an application.

``submit`` never raises, never blocks and does no I/O: it appends the sample to a
bounded in-memory buffer and returns. A background thread runs the batches through the
producers' own pipeline (``producers.pipeline``: validation, limits, sampling,
redaction, then deduplication, backpressure and publishing), screening each batch once
and publishing it again while the broker is down. What cannot be kept is
dropped and counted (``stats()``, and ``evalfleet_producer_dropped_total``):

- ``buffer_full``: the buffer (``EVALFLEET_SDK_BUFFER_SIZE``) was full;
- ``broker_unavailable``: the broker stayed down longer than ``EVALFLEET_SDK_MAX_WAIT_S``;
- ``shutdown``: still buffered when the process exited and the final flush timed out;
- ``internal_error``: a bug or a configuration that cannot be loaded (logged).

Usage::

    from evalfleet import sdk
    sdk.configure(metrics=["rag_qa"])       # optional; else from the environment
    sdk.submit({"id": "req-1", "input": "...", "output": "..."})
    sdk.stats().dropped                           # what was dropped, by metric and reason
"""

from __future__ import annotations

import atexit
import logging
import os
import threading
import time
from collections import Counter, deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from evalfleet.core.errors import BrokerUnavailable
from evalfleet.core.sample import Sample
from producers import telemetry

if TYPE_CHECKING:
    from evalfleet.core.settings import Settings
    from producers.pipeline import Pipeline, RecordResult, Screened
    from producers.runtime import ProducerRuntime

logger = logging.getLogger(__name__)

SubmitOutcome = Literal["queued", "dropped", "rejected"]

#: Metric label of drops that happen before the sample's metrics are known.
ANY_METRIC = "*"

#: Seconds the background thread waits for more samples before publishing a partial batch.
LINGER_S = 0.05

#: Pauses between publish attempts while the broker is down, in seconds.
RETRY_DELAYS_S = (0.2, 0.5, 1.0, 2.0, 5.0)

#: Seconds the exit hook waits for the buffer to drain.
EXIT_FLUSH_S = 2.0


@dataclass(frozen=True)
class SubmitStats:
    """Counts of one :class:`Submitter` since it started."""

    submitted: int
    """Calls to ``submit``."""
    accepted: int
    """Samples with at least one job published."""
    sampled_out: int
    """Samples no metric kept."""
    rejected: int
    """Samples that were invalid (logged with record, id and field)."""
    enqueued: Mapping[str, int]
    """Jobs published, per metric."""
    shed: Mapping[tuple[str, str], int]
    """Jobs shed under backpressure, per (metric, segment)."""
    duplicates: Mapping[str, int]
    """Jobs left out as repeats within the deduplication window, per metric."""
    dropped: Mapping[tuple[str, str], int]
    """Jobs (or samples, metric ``*``) dropped, per (metric, reason)."""
    buffered: int
    """Samples waiting in the buffer now."""

    @property
    def dropped_total(self) -> int:
        """Everything dropped, whatever the reason."""
        return sum(self.dropped.values())


@dataclass
class _Counts:
    submitted: int = 0
    accepted: int = 0
    sampled_out: int = 0
    rejected: int = 0
    enqueued: Counter[str] = field(default_factory=Counter)
    shed: Counter[tuple[str, str]] = field(default_factory=Counter)
    duplicates: Counter[str] = field(default_factory=Counter)
    dropped: Counter[tuple[str, str]] = field(default_factory=Counter)


@dataclass(frozen=True, slots=True)
class _Pending:
    raw: Any
    metrics: tuple[str, ...] | None
    queued_at_s: float


class Submitter:
    """A buffer and a background publisher for one application process. Thread-safe."""

    _buffer: deque[_Pending]
    _thread: threading.Thread | None
    _runtime: ProducerRuntime | None

    def __init__(
        self, settings: Settings | None = None, *, metrics: Sequence[str] | None = None,
        sampling_config: Path | None = None, buffer_size: int | None = None,
        max_wait_s: float | None = None,
        runtime_factory: Callable[[], ProducerRuntime] | None = None,
    ) -> None:
        """Prepare a submitter; nothing connects until the first sample.

        Args:
            settings: The settings; None reads them from the environment (in the
                background thread, so a bad environment is logged, not raised).
            metrics: Default metrics of ``submit``; None uses the sampling config's.
            sampling_config: Sampling config file; None uses the settings'.
            buffer_size: Samples buffered at most (default ``EVALFLEET_SDK_BUFFER_SIZE``).
            max_wait_s: How long a sample may wait for the broker (default
                ``EVALFLEET_SDK_MAX_WAIT_S``).
            runtime_factory: Builds the producer runtime (tests and embedding).
        """
        self._settings = settings
        self._metrics = tuple(metrics) if metrics is not None else None
        self._sampling_config = sampling_config
        self._buffer_size = buffer_size or (settings.limits.sdk_buffer_size if settings else 10_000)
        self._max_wait_s = max_wait_s or (settings.limits.sdk_max_wait_s if settings else 60.0)
        self._runtime_factory = runtime_factory
        self._lock = threading.Condition()
        self._reset()
        atexit.register(self._at_exit)

    def submit(self, sample: Mapping[str, Any] | Sample, *,
               metrics: Sequence[str] | None = None) -> SubmitOutcome:
        """Hand a sample over for evaluation. Never raises, never blocks.

        Args:
            sample: A sample dict (the JSONL format) or a :class:`~evalfleet.core.sample.Sample`.
            metrics: Metrics to judge it on; None uses the submitter's default.

        Returns:
            ``queued`` (buffered; see :meth:`stats` for its fate), ``dropped`` (buffer
            full or submitter closed) or ``rejected`` (not a mapping or Sample).
        """
        try:
            return self._submit(sample, metrics)
        except Exception:  # the application must never see our failures
            logger.exception("evalfleet submit failed; the sample is dropped")
            self._drop((ANY_METRIC,), "internal_error")
            return "dropped"

    def stats(self) -> SubmitStats:
        """A snapshot of the counts."""
        with self._lock:
            counts = self._counts
            return SubmitStats(
                submitted=counts.submitted, accepted=counts.accepted,
                sampled_out=counts.sampled_out, rejected=counts.rejected,
                enqueued=dict(counts.enqueued), shed=dict(counts.shed),
                duplicates=dict(counts.duplicates), dropped=dict(counts.dropped),
                buffered=len(self._buffer),
            )

    def flush(self, timeout_s: float = 5.0) -> bool:
        """Wait until everything submitted so far was published, dropped or counted.

        Returns:
            True when the buffer drained within ``timeout_s``.
        """
        deadline = time.monotonic() + timeout_s
        with self._lock:
            while self._buffer or self._in_flight:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._lock.wait(min(left, 0.05))
        return True

    def close(self, timeout_s: float = 5.0) -> None:
        """Flush for up to ``timeout_s``, stop the thread, count what is left as dropped."""
        self.flush(timeout_s)
        with self._lock:
            self._closed = True
            self._stopping.set()
            self._lock.notify_all()
            thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=max(1.0, timeout_s))
        with self._lock:
            left = list(self._buffer)
            self._buffer.clear()
            self._lock.notify_all()
        for pending in left:
            self._drop(pending.metrics or (ANY_METRIC,), "shutdown")

    def _reset(self) -> None:
        self._pid = os.getpid()
        self._buffer = deque()
        self._in_flight = 0
        self._counts = _Counts()
        self._closed = False
        self._stopping = threading.Event()
        self._thread = None
        self._runtime = None
        self._config_error_logged = False

    def _submit(self, sample: Any, metrics: Sequence[str] | None) -> SubmitOutcome:
        if os.getpid() != self._pid:
            # A forked child: the parent's thread and buffer are not ours.
            with self._lock:
                self._reset()
        names = tuple(metrics) if metrics is not None else self._metrics
        with self._lock:
            self._counts.submitted += 1
            if not isinstance(sample, Mapping | Sample):
                self._counts.rejected += 1
                telemetry.RECORDS.labels("sdk", "rejected").inc()
                return "rejected"
            if self._closed or len(self._buffer) >= self._buffer_size:
                reason = "shutdown" if self._closed else "buffer_full"
            else:
                self._buffer.append(_Pending(sample, names, time.monotonic()))
                self._ensure_thread()
                self._lock.notify()
                return "queued"
        self._drop(names or (ANY_METRIC,), reason)
        return "dropped"

    def _ensure_thread(self) -> None:
        if self._thread is None or not self._thread.is_alive():
            self._thread = threading.Thread(target=self._run, name="evalfleet-submit",
                                            daemon=True)
            self._thread.start()

    def _run(self) -> None:
        try:
            self._loop()
        finally:
            # The thread owns the runtime: a batch still in flight at close() ends here.
            if self._runtime is not None:
                self._runtime.close()
                self._runtime = None

    def _loop(self) -> None:
        while True:
            batch = self._take()
            if batch is None:
                return
            try:
                self._handle(batch)
            except Exception:
                logger.exception("evalfleet submitter: %d samples dropped", len(batch))
                for pending in batch:
                    self._drop(pending.metrics or (ANY_METRIC,), "internal_error")
            finally:
                with self._lock:
                    self._in_flight = 0
                    self._lock.notify_all()

    def _take(self) -> list[_Pending] | None:
        with self._lock:
            while not self._buffer:
                if self._closed:
                    return None
                self._lock.wait(0.5)
            size = self._runtime.settings.limits.producer_batch_size if self._runtime else 500
            if len(self._buffer) < size and not self._closed:
                self._lock.wait(LINGER_S)  # let a burst fill the batch
            batch = [self._buffer.popleft() for _ in range(min(size, len(self._buffer)))]
            self._in_flight = len(batch)
            return batch

    def _handle(self, batch: list[_Pending]) -> None:
        runtime = self._get_runtime()
        if runtime is None:
            for pending in batch:
                self._drop(pending.metrics or (ANY_METRIC,), "internal_error")
            return
        # The producers' own pipeline, one batch per set of metrics asked for.
        pipeline = runtime.pipeline(metrics=None, rate=None, source="sdk")
        by_metrics: dict[tuple[str, ...], list[_Pending]] = {}
        for pending in batch:
            names = pending.metrics or tuple(pipeline.metrics())
            by_metrics.setdefault(names, []).append(pending)
        for names, group in by_metrics.items():
            unknown = [name for name in names if name not in runtime.screen.metric_names]
            if unknown or not names:
                problem = (f"unknown metrics {unknown}" if unknown
                           else "no metrics given and none in the sampling config")
                logger.warning("evalfleet submit: %d samples dropped: %s", len(group), problem)
                self._count_rejected(len(group))
                continue
            screened = pipeline.screen([("submit()", pending.raw) for pending in group],
                                       metrics=names)
            self._settle(pipeline, screened)
            self._publish(pipeline, screened, queued_at_s=[p.queued_at_s for p in group])

    def _settle(self, pipeline: Pipeline, screened: Screened) -> None:
        """Count the records screening settled (rejected, sampled out) now: they are
        final whether or not the broker takes the others."""
        for result in screened.settled:
            for error in result.errors:
                logger.warning("evalfleet submit: sample rejected: %s", error)
        for _, item in screened.admitted:
            for error in item.errors:
                logger.warning("evalfleet submit: %s", error)
        pipeline.count(screened.settled)
        with self._lock:
            for result in screened.settled:
                self._counts.rejected += result.status == "rejected"
                self._counts.sampled_out += result.status == "sampled_out"

    def _publish(self, pipeline: Pipeline, screened: Screened, *,
                 queued_at_s: list[float]) -> None:
        waiting = replace(screened, settled=[])
        attempt = 0
        while waiting.admitted:
            try:
                results = pipeline.publish(waiting)
            except BrokerUnavailable as exc:
                if attempt == 0:
                    logger.warning("evalfleet submit: %s; buffering for up to %gs", exc,
                                   self._max_wait_s)
                waiting = self._expire(waiting, queued_at_s)
                delay_s = RETRY_DELAYS_S[min(attempt, len(RETRY_DELAYS_S) - 1)]
                attempt += 1
                if self._stopping.wait(delay_s):
                    break
                continue
            self._count_results(results)
            return
        for _, item in waiting.admitted:
            for pick in item.picks:
                self._drop((pick.metric,), "shutdown")

    def _expire(self, waiting: Screened, queued_at_s: list[float]) -> Screened:
        oldest_kept_s = time.monotonic() - self._max_wait_s
        kept = []
        for index, item in waiting.admitted:
            if queued_at_s[index] >= oldest_kept_s:
                kept.append((index, item))
                continue
            for pick in item.picks:
                self._drop((pick.metric,), "broker_unavailable")
        return replace(waiting, admitted=kept)

    def _count_results(self, results: list[RecordResult]) -> None:
        with self._lock:
            counts = self._counts
            for result in results:
                counts.accepted += result.status == "accepted"
                for fate in result.jobs:
                    if fate.status == "enqueued":
                        counts.enqueued[fate.metric] += 1
                    elif fate.status == "shed":
                        segment = telemetry.short_label(result.segment or "")
                        counts.shed[(fate.metric, segment)] += 1
                    else:
                        counts.duplicates[fate.metric] += 1

    def _count_rejected(self, samples: int) -> None:
        with self._lock:
            self._counts.rejected += samples
        telemetry.RECORDS.labels("sdk", "rejected").inc(samples)

    def _drop(self, metrics: Sequence[str], reason: str) -> None:
        with self._lock:
            for metric in metrics:
                self._counts.dropped[(metric, reason)] += 1
        for metric in metrics:
            telemetry.DROPPED.labels(metric, reason).inc()
        telemetry.RECORDS.labels("sdk", "dropped").inc()

    def _get_runtime(self) -> ProducerRuntime | None:
        if self._runtime is not None:
            return self._runtime
        try:
            self._runtime = self._build_runtime()
        except Exception as exc:
            if not self._config_error_logged:
                self._config_error_logged = True
                logger.error("evalfleet submit: cannot start the producer, samples are "
                             "dropped until this is fixed: %s", exc)
            return None
        return self._runtime

    def _build_runtime(self) -> ProducerRuntime:
        if self._runtime_factory is not None:
            return self._runtime_factory()
        from evalfleet.core.settings import Settings
        from producers.runtime import ProducerRuntime

        settings = self._settings or Settings()
        return ProducerRuntime(settings, sampling_config=self._sampling_config)

    def _at_exit(self) -> None:
        if os.getpid() == self._pid and (self._buffer or self._in_flight):
            self.close(EXIT_FLUSH_S)


_default: Submitter | None = None
_default_lock = threading.Lock()


def configure(settings: Settings | None = None, *, metrics: Sequence[str] | None = None,
              sampling_config: Path | None = None) -> Submitter:
    """Set up the process-wide submitter that :func:`submit` uses (closing any previous).

    Args:
        settings: The settings; None reads the environment.
        metrics: Default metrics; None uses those of the sampling config.
        sampling_config: Sampling config file; None uses the settings'.

    Returns:
        The submitter.
    """
    global _default
    submitter = Submitter(settings, metrics=metrics, sampling_config=sampling_config)
    with _default_lock:
        previous, _default = _default, submitter
    if previous is not None:
        previous.close(timeout_s=1.0)
    return submitter


def submit(sample: Mapping[str, Any] | Sample, *,
           metrics: Sequence[str] | None = None) -> SubmitOutcome:
    """Hand a sample over for evaluation. Never raises, never blocks.

    Args:
        sample: A sample dict (the JSONL format) or a Sample.
        metrics: Metrics to judge it on; None uses the configured default.

    Returns:
        ``queued``, ``dropped`` or ``rejected`` (see :meth:`Submitter.submit`).
    """
    try:
        return _get_default().submit(sample, metrics=metrics)
    except Exception:
        logger.exception("evalfleet submit failed; the sample is dropped")
        return "dropped"


def stats() -> SubmitStats:
    """Counts of the process-wide submitter."""
    return _get_default().stats()


def flush(timeout_s: float = 5.0) -> bool:
    """Wait for the process-wide submitter's buffer to drain; True when it did."""
    return _get_default().flush(timeout_s)


def shutdown(timeout_s: float = 5.0) -> None:
    """Flush and stop the process-wide submitter."""
    global _default
    with _default_lock:
        submitter, _default = _default, None
    if submitter is not None:
        submitter.close(timeout_s)


def _get_default() -> Submitter:
    global _default
    with _default_lock:
        if _default is None:
            _default = Submitter()
        return _default
