"""``produce --follow``: tail a log, publish its lines, remember how far it got.

The position is saved only after the lines before it were published, so a crash
or restart repeats at most the batch in flight (and the deduplication window
drops that repeat), and never skips a line. While the broker is down, the same
batch is retried with growing pauses; the file is not read further.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from evalfleet.core.errors import InvalidSample, RetryLater
from producers.offsets import OffsetStore
from producers.pipeline import Pipeline, ProduceStats
from producers.screen import OversizedLine
from producers.tail import Tail, TailLine

logger = logging.getLogger(__name__)

#: Seconds between two looks for new lines when the file has none.
POLL_INTERVAL_S = 0.2

#: Pauses between attempts to publish a batch while the broker is down, in seconds.
RETRY_DELAYS_S = (0.5, 1.0, 2.0, 5.0)


def follow(
    tail: Tail, *, pipeline: Pipeline, offsets: OffsetStore, batch_size: int,
    stop: threading.Event, on_error: Callable[[InvalidSample], None],
    on_progress: Callable[[ProduceStats], None] | None = None,
    poll_interval_s: float = POLL_INTERVAL_S,
) -> ProduceStats:
    """Publish the lines of ``tail`` until ``stop`` is set.

    Args:
        tail: The followed file, positioned where the last run stopped.
        pipeline: Screens and publishes each batch.
        offsets: Where the position is saved after each published batch.
        batch_size: Most lines per batch.
        stop: Set to end the loop (after the batch in flight is saved).
        on_error: Receives each bad record's error.
        on_progress: Called after each batch with the running counts.
        poll_interval_s: Pause when no new line is there.

    Returns:
        The counts of this run.
    """
    stats = ProduceStats()
    while not stop.is_set():
        lines = tail.poll(max_lines=batch_size)
        if not lines:
            stop.wait(poll_interval_s)
            continue
        if not _publish(lines, pipeline=pipeline, stats=stats, stop=stop, on_error=on_error):
            break  # stopped while the broker was down: this batch is read again next run
        offsets.save(lines[-1].position)
        if on_progress is not None:
            on_progress(stats)
    return stats


def _publish(lines: list[TailLine], *, pipeline: Pipeline, stats: ProduceStats,
             stop: threading.Event, on_error: Callable[[InvalidSample], None]) -> bool:
    records = [(_label(line), line.data) for line in lines
               if isinstance(line.data, OversizedLine) or line.data.strip()]
    attempt = 0
    while True:
        try:
            results = pipeline.process(records)
        except RetryLater as exc:
            delay_s = RETRY_DELAYS_S[min(attempt, len(RETRY_DELAYS_S) - 1)]
            if attempt == 0:
                logger.warning("%s; retrying every few seconds, the file waits", exc)
            attempt += 1
            if stop.wait(delay_s):
                return False
            continue
        if attempt:
            logger.warning("broker reachable again after %d attempts", attempt + 1)
        stats.add(results)
        for result in results:
            for error in result.errors:
                on_error(error)
        return True


def _label(line: TailLine) -> str:
    return f"{line.source} line {line.number}"
