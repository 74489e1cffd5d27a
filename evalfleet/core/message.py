"""The job messages producers enqueue and workers consume, and their queue naming.

A job asks for one sample to be judged on one metric. The prompt version and
judge model are not in the message: the worker that runs the job decides them
from its own metric files and settings, and they key the verdict.

A broker message carries one job, or a batch of jobs for the same metric: one
broker round trip and one task per batch instead of per job, which is where a
worker's CPU went when jobs were small.

A job is ``production`` traffic unless it says otherwise: ``calibration`` (a gold
sample whose verdict is compared with people's labels), ``canary`` (a gold sample
fed on a schedule to watch the judge drift) or ``shadow`` (a second opinion from
another judge). Those verdicts are kept out of alerts, dashboards and exports. Such
a job may name its judge model, which then keys its verdict. A canary or calibration
job carries its gold labels, so its verdict can be compared with them as it is saved.

A job that failed before carries its history: one :class:`AttemptFailure` per
failed delivery, so a dead letter can show every attempt and a replayed job keeps
them. Messages without it (older producers) decode with an empty history.

Encoding is pure, with its own error, :class:`InvalidMessage`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any, Literal, get_args

from evalfleet.core.errors import InvalidMessage, InvalidSample
from evalfleet.core.sample import Sample, parse_sample

#: Version of the message layout; bumped on incompatible changes.
MESSAGE_VERSION = 1

#: Name of the Celery task that evaluates one job.
EVALUATE_TASK = "evalfleet.evaluate"

#: Prefix of every metric queue: metric ``rag_qa`` is served from ``eval.rag_qa``.
QUEUE_PREFIX = "eval."

#: What a job is for; only ``production`` verdicts feed alerts, dashboards and exports.
Purpose = Literal["production", "calibration", "canary", "shadow"]

#: Every purpose, production first.
PURPOSES: tuple[Purpose, ...] = get_args(Purpose)

#: Longest error text kept per history entry, in characters (the message stays small).
MAX_HISTORY_ERROR_CHARS = 500


def queue_for(metric: str) -> str:
    """The broker queue that carries jobs for ``metric``."""
    return f"{QUEUE_PREFIX}{metric}"


@dataclass(frozen=True, slots=True)
class AttemptFailure:
    """One failed delivery of a job, as kept in its history."""

    at: datetime
    """When the failure was seen (UTC)."""

    attempt: int
    """The job's attempt number at that delivery."""

    error_class: str
    """What kind of failure (``judge_unavailable``, ``judge_rejected``...)."""

    error: str
    """What happened, cut to :data:`MAX_HISTORY_ERROR_CHARS`."""

    @classmethod
    def of(cls, job: Job, *, at: datetime, error_class: str, error: str) -> AttemptFailure:
        """The failure of ``job``'s current attempt, its error text cut to size."""
        return cls(at=at, attempt=job.attempt, error_class=error_class,
                   error=error[:MAX_HISTORY_ERROR_CHARS])


@dataclass(frozen=True, slots=True)
class Job:
    """One sample to judge on one metric."""

    metric: str
    """Metric name, e.g. ``rag_qa``."""

    sample: Sample
    """The sample, already validated and redacted by the producer."""

    enqueued_at: datetime
    """When the producer accepted it (UTC)."""

    attempt: int = 1
    """Judge attempt this delivery makes; raised on each retry after a transient failure."""

    history: tuple[AttemptFailure, ...] = ()
    """Earlier failed deliveries, oldest first (empty for a fresh job)."""

    purpose: Purpose = "production"
    """What the verdict is for (see the module docstring)."""

    judge_model: str | None = None
    """The judge model to ask, overriding the worker's choice (calibration, shadows)."""

    labels: dict[str, float] | None = None
    """Gold labels by score name, on the judge's scale (canary and calibration jobs)."""

    finalise_only: bool = False
    """A final session version whose judging was shed (backpressure, a daily budget):
    it only marks the idle version's verdict final, never calls a judge, so it goes in
    whatever the queue's depth (``producers.dispatcher``)."""


def next_attempt(job: Job, *, failure: AttemptFailure) -> Job:
    """The job to run after ``failure``: the next attempt, with the failure in its history."""
    return replace(job, attempt=job.attempt + 1, history=(*job.history, failure))


def encode_history(history: Sequence[AttemptFailure]) -> list[dict[str, Any]]:
    """Attempt failures as JSON-safe dicts (as in messages and dead letters)."""
    return [
        {"at": entry.at.isoformat(), "attempt": entry.attempt,
         "error_class": entry.error_class, "error": entry.error}
        for entry in history
    ]


def decode_history(data: Any) -> tuple[AttemptFailure, ...]:
    """Attempt failures back from :func:`encode_history`'s dicts.

    Raises:
        InvalidMessage: When ``data`` is not such a list.
    """
    if not isinstance(data, list):
        raise InvalidMessage("job message has a bad history: not a list", data=data)
    try:
        return tuple(
            AttemptFailure(at=datetime.fromisoformat(entry["at"]), attempt=int(entry["attempt"]),
                           error_class=str(entry["error_class"]), error=str(entry["error"]))
            for entry in data
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise InvalidMessage(f"job message has a bad history: {exc!r}", data=data) from exc


def _job_fields(job: Job) -> dict[str, Any]:
    """What each job of a message carries; the history only when there is one."""
    fields: dict[str, Any] = {"sample": job.sample.to_json(),
                              "enqueued_at": job.enqueued_at.isoformat(),
                              "attempt": job.attempt}
    if job.history:
        fields["history"] = encode_history(job.history)
    if job.purpose != "production":
        fields["purpose"] = job.purpose
    if job.judge_model is not None:
        fields["judge_model"] = job.judge_model
    if job.labels is not None:
        fields["labels"] = job.labels
    if job.finalise_only:
        fields["finalise_only"] = True
    return fields


def encode_job(job: Job) -> dict[str, Any]:
    """Turn a job into the JSON-safe dict sent as the task's only argument."""
    return {"v": MESSAGE_VERSION, "metric": job.metric, **_job_fields(job)}


def encode_batch(jobs: Sequence[Job]) -> dict[str, Any]:
    """Turn jobs for one metric into one message (the task's only argument).

    Raises:
        ValueError: When ``jobs`` is empty or mixes metrics.
    """
    metrics = {job.metric for job in jobs}
    if len(metrics) != 1:
        raise ValueError(f"a batch needs jobs of exactly one metric, got {sorted(metrics)}")
    return {
        "v": MESSAGE_VERSION,
        "metric": jobs[0].metric,
        "jobs": [_job_fields(job) for job in jobs],
    }


def decode_batch(data: Any) -> list[Job]:
    """The jobs in a message: a batch from :func:`encode_batch` or one from :func:`encode_job`.

    Raises:
        InvalidMessage: When the message, or any job in it, cannot be read.
    """
    if not isinstance(data, dict) or "jobs" not in data:
        return [decode_job(data)]
    entries = data["jobs"]
    if not isinstance(entries, list) or not entries:
        raise InvalidMessage("batch message has no jobs", data=data)
    common = {key: data.get(key) for key in ("v", "metric")}
    return [decode_job({**common, **entry}) if isinstance(entry, dict)
            else decode_job(entry) for entry in entries]


def decode_job(data: Any) -> Job:
    """Turn a task argument back into a job.

    Args:
        data: The dict produced by :func:`encode_job`, after a JSON round trip.

    Returns:
        The job.

    Raises:
        InvalidMessage: When the data is not a job this version understands.
    """
    if not isinstance(data, dict):
        raise InvalidMessage("job message is not an object", data=data)
    if data.get("v") != MESSAGE_VERSION:
        raise InvalidMessage(f"unsupported job message version {data.get('v')!r}", data=data)
    metric, attempt = data.get("metric"), data.get("attempt", 1)
    if not isinstance(metric, str) or not metric:
        raise InvalidMessage("job message has no metric", data=data)
    if not isinstance(attempt, int) or attempt < 1:
        raise InvalidMessage(f"job message has a bad attempt {attempt!r}", data=data)
    try:
        sample = parse_sample(data.get("sample"), record="job message")
        enqueued_at = datetime.fromisoformat(data["enqueued_at"])
    except (InvalidSample, KeyError, TypeError, ValueError) as exc:
        raise InvalidMessage(f"job message has a bad sample: {exc}", data=data) from exc
    try:
        history = decode_history(data.get("history", []))
    except InvalidMessage as exc:
        raise InvalidMessage(str(exc), data=data) from exc
    purpose, judge_model = data.get("purpose", "production"), data.get("judge_model")
    if purpose not in PURPOSES:
        raise InvalidMessage(f"job message has an unknown purpose {purpose!r}", data=data)
    if judge_model is not None and (not isinstance(judge_model, str) or not judge_model):
        raise InvalidMessage(f"job message has a bad judge model {judge_model!r}", data=data)
    finalise_only = data.get("finalise_only", False)
    if not isinstance(finalise_only, bool):
        raise InvalidMessage(f"job message has a bad finalise_only {finalise_only!r}",
                             data=data)
    return Job(metric=metric, sample=sample, enqueued_at=enqueued_at, attempt=attempt,
               history=history, purpose=purpose, judge_model=judge_model,
               labels=_decode_labels(data.get("labels"), data=data),
               finalise_only=finalise_only)


def _decode_labels(labels: Any, *, data: Any) -> dict[str, float] | None:
    if labels is None:
        return None
    if not isinstance(labels, dict) or not all(
            isinstance(name, str) and isinstance(value, int | float)
            and not isinstance(value, bool) and math.isfinite(value)
            for name, value in labels.items()):
        raise InvalidMessage("job message has bad labels: expected names and finite numbers",
                             data=data)
    return {name: float(value) for name, value in labels.items()}


def new_job(metric: str, sample: Sample, *, purpose: Purpose = "production",
            judge_model: str | None = None, labels: dict[str, float] | None = None,
            finalise_only: bool = False) -> Job:
    """A first-attempt job stamped with the current time."""
    return Job(metric=metric, sample=sample, enqueued_at=datetime.now(UTC), purpose=purpose,
               judge_model=judge_model, labels=labels, finalise_only=finalise_only)
