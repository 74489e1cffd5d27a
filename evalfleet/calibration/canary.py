"""Drift canaries: a rotating slice of each metric's gold set, fed to its queue on a schedule.

Every ``canary_interval_s`` ``evalfleet beat`` sends each metric that has a gold set
``canary_samples`` of its gold samples, the next ones in the set each time, as
``canary`` jobs carrying their labels. The worker stores each canary verdict's
agreement and bias with its labels as score series of their own
(``core.canary.canary_series``), which ``judge_drift`` alert rules test against the last
calibration. A canary's id and time come from its slot (the interval it belongs
to), ``canary:<slot>:<gold id>``: a slot fed twice (two beats, a retried tick) is
judged once, since a verdict is stored once per key.

The cost is a fixed number of judge calls, whatever the production traffic:
``canary_samples * 3600 / canary_interval_s`` an hour per metric (48 with the
defaults).
"""

from __future__ import annotations

import hashlib
import logging
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from evalfleet.core.gold import GoldItem, bundled_gold, load_gold
from evalfleet.core.message import Job, new_job
from evalfleet.core.metric import Metric, load_registry
from evalfleet.core.sample import MAX_ID_LENGTH
from evalfleet.core.settings import Settings

logger = logging.getLogger(__name__)

#: Prefix of every canary sample id.
CANARY_ID_PREFIX = "canary:"


def canary_slot(at: datetime, *, interval_s: float) -> int:
    """The number of the canary interval ``at`` falls in (counted from the epoch)."""
    return math.floor(at.timestamp() / interval_s)


def canary_slice(items: Sequence[GoldItem], *, slot: int, size: int) -> list[GoldItem]:
    """The gold items of one slot: ``size`` of them, each slot taking the next ones.

    Args:
        items: The gold set, in file order.
        slot: The slot number.
        size: Items per slot (at most the whole set, each once).

    Returns:
        The slot's items; empty for an empty gold set.
    """
    if not items:
        return []
    start = slot * size % len(items)
    return [items[(start + i) % len(items)] for i in range(min(size, len(items)))]


def canary_jobs(metric: str, items: Sequence[GoldItem], *, slot: int,
                interval_s: float) -> list[Job]:
    """Canary jobs of one slot, with deterministic ids and sample times.

    Args:
        metric: The metric.
        items: The slot's gold items (:func:`canary_slice`).
        slot: The slot number.
        interval_s: The canary interval, which places the slot in time.

    Returns:
        One ``canary`` job per item, id ``canary:<slot>:<gold id>``, timestamped at the
        slot's start, carrying the item's labels.
    """
    at = datetime.fromtimestamp(slot * interval_s, tz=UTC)
    return [
        new_job(metric, item.sample.model_copy(update={
            "id": canary_id(slot, item.sample.id), "timestamp": at}),
            purpose="canary", labels=dict(item.labels))
        for item in items
    ]


def canary_id(slot: int, gold_id: str) -> str:
    """``canary:<slot>:<gold id>``; a gold id too long to fit is replaced by its digest."""
    sample_id = f"{CANARY_ID_PREFIX}{slot}:{gold_id}"
    if len(sample_id) <= MAX_ID_LENGTH:
        return sample_id
    return f"{CANARY_ID_PREFIX}{slot}:sha256-{hashlib.sha256(gold_id.encode()).hexdigest()}"


@dataclass(frozen=True)
class CanaryReport:
    """What one feed sent."""

    slot: int
    sent: dict[str, int]
    """Jobs per metric."""
    skipped: dict[str, str]
    """Metrics without canaries, and why (no gold set, no usable record)."""


class CanaryFeeder:
    """Feeds each metric's canaries for a slot (``evalfleet beat`` calls it each interval).

    Args:
        settings: The settings (metrics, gold directory, canary interval and size).
        send: Publishes jobs (``Enqueuer.send_many``).
    """

    def __init__(self, settings: Settings, *, send: Callable[[list[Job]], None]) -> None:
        self._settings = settings
        self._send = send
        self._gold = _load_gold_sets(settings)

    def feed(self, at: datetime) -> CanaryReport:
        """Send the canaries of the slot ``at`` falls in.

        Raises:
            BrokerUnavailable: When the broker cannot be reached (the next tick feeds the
                next slot; this one is skipped).
        """
        interval_s = self._settings.alerts.canary_interval_s
        slot = canary_slot(at, interval_s=interval_s)
        sent: dict[str, int] = {}
        skipped: dict[str, str] = {}
        jobs: list[Job] = []
        for name, gold in self._gold.items():
            if isinstance(gold, str):
                skipped[name] = gold
                continue
            picked = canary_slice(gold, slot=slot, size=self._settings.alerts.canary_samples)
            jobs += canary_jobs(name, picked, slot=slot, interval_s=interval_s)
            sent[name] = len(picked)
        if jobs:
            self._send(jobs)
        return CanaryReport(slot=slot, sent=sent, skipped=skipped)


def _load_gold_sets(settings: Settings) -> dict[str, list[GoldItem] | str]:
    """Each metric's gold items, or why it has none. Bad records are logged and left out."""
    sets: dict[str, list[GoldItem] | str] = {}
    registry = load_registry(settings.judge.metrics_dir)
    for name in registry.names():
        path = _gold_path(settings.alerts.canary_gold_dir, name)
        if path is None:
            sets[name] = "no gold set"
            continue
        sets[name] = _read(path, metric=registry.get(name))
    return sets


def _read(path: Path, *, metric: Metric) -> list[GoldItem] | str:
    try:
        items, errors = load_gold(path, metric=metric)
    except OSError as exc:
        return f"cannot read {path}: {exc.strerror}"
    for error in errors:
        logger.warning("canary gold set %s: %s", path, error)
    return items or f"no usable record in {path}"


def _gold_path(directory: Path | None, metric: str) -> Path | None:
    if directory is not None:
        path = directory / f"{metric}.jsonl"
        return path if path.is_file() else None
    try:
        return bundled_gold(metric)
    except FileNotFoundError:
        return None
