"""The save message: judged verdicts the database could not take, kept on the broker.

A judge call is what a fleet pays for. When the database goes away after a batch
was judged, sending the jobs back to the queue would judge them all again once it
returns (a 30 s outage re-billed 256 of 600 calls). Instead the batch's rows go to
the jobs' own queue as one ``evalfleet.save`` message, and the jobs are acknowledged
only once the broker holds it (Redis: the push returned; RabbitMQ: the publisher
confirm). Whichever worker of that queue takes the message writes the rows when the
database answers again, and sends it round (pausing the queue) while it does not.

Writing is idempotent: a verdict key that has its verdict already is skipped, a
dead letter is kept once per key, and the claims the judging delivery took are
dropped under its owner. Each verdict travels with the job it judged, so rows that
the database refuses for good become dead letters that can be replayed.

Encoding is two pure functions with their own error (:class:`InvalidMessage`).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from evalfleet.core.errors import InvalidMessage
from evalfleet.core.message import Job, decode_job, encode_job
from evalfleet.store import DeadLetter, VerdictKey, VerdictRecord

#: The Celery task that writes a save message.
SAVE_TASK = "evalfleet.save"

#: Version of the save message's layout.
SAVE_VERSION = 1

_RECORD_TIMES = ("sample_ts", "created_at")
_LETTER_TIMES = ("created_at",)


@dataclass(frozen=True)
class UnsavedBatch:
    """What one judged batch leaves to write: the rows of a ``store.save`` call."""

    owner: str
    """The delivery that judged them (holds their claims)."""
    verdicts: tuple[VerdictRecord, ...] = ()
    jobs: tuple[Job, ...] = ()
    """The job each verdict judged, in the same order."""
    dead_letters: tuple[DeadLetter, ...] = ()
    release: tuple[VerdictKey, ...] = ()
    """Claims to drop besides the verdicts' own."""

    @property
    def metric(self) -> str:
        """The metric of the batch (a batch holds one), naming its queue."""
        for job in self.jobs:
            return job.metric
        for letter in self.dead_letters:
            if letter.metric:
                return letter.metric
        return self.release[0].metric if self.release else ""


def encode_save(batch: UnsavedBatch) -> dict[str, Any]:
    """The JSON body of a save message."""
    return {
        "v": SAVE_VERSION, "owner": batch.owner,
        "verdicts": [{"record": _encode_fields(record, times=_RECORD_TIMES),
                      "job": encode_job(job)}
                     for record, job in zip(batch.verdicts, batch.jobs, strict=True)],
        "dead_letters": [_encode_fields(letter, times=_LETTER_TIMES)
                         for letter in batch.dead_letters],
        "release": [dataclasses.asdict(key) for key in batch.release],
    }


def decode_save(data: Any) -> UnsavedBatch:
    """A save message's body as an :class:`UnsavedBatch`.

    Raises:
        InvalidMessage: When ``data`` is not a save message this version can read.
    """
    if not isinstance(data, dict) or data.get("v") != SAVE_VERSION:
        raise InvalidMessage("not a save message of version 1", data=data)
    try:
        verdicts = [(_decode_record(item["record"]), decode_job(item["job"]))
                    for item in data["verdicts"]]
        return UnsavedBatch(
            owner=str(data["owner"]),
            verdicts=tuple(record for record, _ in verdicts),
            jobs=tuple(job for _, job in verdicts),
            dead_letters=tuple(_decode_fields(DeadLetter, item, times=_LETTER_TIMES)
                               for item in data["dead_letters"]),
            release=tuple(VerdictKey(**key) for key in data["release"]),
        )
    except InvalidMessage:
        raise
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise InvalidMessage(f"unreadable save message: {type(exc).__name__}: {exc}",
                             data=data) from exc


def _encode_fields(row: Any, *, times: tuple[str, ...]) -> dict[str, Any]:
    encoded = {}
    for field in dataclasses.fields(row):
        value = getattr(row, field.name)
        if field.name in times:
            value = value.isoformat()
        elif isinstance(value, VerdictKey):
            value = dataclasses.asdict(value)
        encoded[field.name] = value
    return encoded


def _decode_record(data: dict[str, Any]) -> VerdictRecord:
    record: VerdictRecord = _decode_fields(VerdictRecord, data, times=_RECORD_TIMES)
    return record


def _decode_fields(cls: Any, data: dict[str, Any], *, times: tuple[str, ...]) -> Any:
    # Only the fields this version knows: a newer writer's extra fields are dropped,
    # an older writer's missing optional ones take their defaults.
    known = {field.name for field in dataclasses.fields(cls)}
    values = {name: value for name, value in data.items() if name in known}
    for name in times:
        values[name] = datetime.fromisoformat(values[name])
    if "key" in values:
        values["key"] = VerdictKey(**values["key"])
    return cls(**values)
