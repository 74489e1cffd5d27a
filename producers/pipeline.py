"""From raw lines to jobs: validate, check each metric's inputs, sample, enqueue."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from evalfleet.errors import InvalidSample
from evalfleet.message import Job, new_job
from evalfleet.metric import Metric
from evalfleet.sample import parse_sample_line
from producers.sampler import is_sampled


@dataclass
class ProduceStats:
    """Counts of one produce run."""

    lines: int = 0
    """Non-blank lines read."""
    accepted: int = 0
    """Valid records (whether sampled in or out)."""
    rejected: int = 0
    """Lines with at least one error."""
    sampled_out: int = 0
    """Valid records left out by the sampling rate."""
    enqueued: dict[str, int] = field(default_factory=dict)
    """Jobs published, per metric."""

    @property
    def jobs(self) -> int:
        """Jobs published in all."""
        return sum(self.enqueued.values())


def produce(
    lines: Iterable[tuple[int, bytes]], *, metrics: list[Metric], rate: float,
    send: Callable[[Job], None], on_error: Callable[[InvalidSample], None],
    on_progress: Callable[[ProduceStats], None] | None = None,
) -> ProduceStats:
    """Turn JSONL lines into jobs, one per kept sample and metric.

    A bad line is reported through ``on_error`` (naming the line, id and field)
    and the rest go on. A record missing an input that one metric requires is
    rejected for that metric only.

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
    stats = ProduceStats()
    for number, line in lines:
        if not line.strip():
            continue
        stats.lines += 1
        record = f"line {number}"
        try:
            sample = parse_sample_line(line, record=record)
        except InvalidSample as exc:
            stats.rejected += 1
            on_error(exc)
            continue
        stats.accepted += 1
        if not is_sampled(sample.id, rate):
            stats.sampled_out += 1
            continue
        line_failed = False
        for metric in metrics:
            try:
                metric.resolve_variables(sample)
            except InvalidSample as exc:
                line_failed = True
                on_error(InvalidSample(
                    f"{exc.reason} ({metric.name})", record=record, sample_id=sample.id,
                    field=exc.field,
                ))
                continue
            send(new_job(metric.name, sample))
            stats.enqueued[metric.name] = stats.enqueued.get(metric.name, 0) + 1
        stats.rejected += line_failed
        if on_progress is not None:
            on_progress(stats)
    return stats
