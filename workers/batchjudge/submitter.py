"""Sending spooled jobs to the provider as batches, so that nothing is sent twice.

One round: first every ``preparing`` batch (a submitter stopped mid-way) is finished:
found at the provider by its metadata if its creation went through, else created from
its uploaded file, else uploaded and created. Then, per judge model, a job whose line
alone is over the bytes per file is dead-lettered (no batch can carry it), and the
oldest due jobs are bound to a new batch in the store (:meth:`BatchSpool.gather`)
before anything is sent, uploaded as one file, and the batch created with the local
id in its metadata.

One submitter at a time per fleet (``evalfleet beat`` holds a lock around the round):
two at once could both finish the same ``preparing`` batch.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from evalfleet.core.errors import InvalidMessage
from evalfleet.core.message import decode_job
from evalfleet.store import DeadLetter
from evalfleet.store.queries.batchspool import BatchRow, BatchSpool, Estimate, batch_line
from workers.batchjudge.api import BatchApi

logger = logging.getLogger(__name__)

#: The metadata key carrying a batch's local id: how a batch in doubt is found again.
METADATA_KEY = "evalfleet_batch"

#: The dead-letter class of a job whose request alone is over a batch file's bytes.
TOO_LARGE = "batch_request_too_large"

#: The steps after which :class:`Submitter`'s ``step`` hook is called, in order.
STEPS = ("bound", "uploaded", "created", "recorded")


@dataclass(frozen=True)
class BatchLimits:
    """How a batch is bounded."""

    max_requests: int
    max_bytes: int
    max_wait_s: float


class Submitter:
    """Turns spooled jobs into provider batches.

    Args:
        spool: The spool and batch record.
        api: The provider's Batch API.
        limits: Lines, bytes and wait per batch.
        clock: The time.
        estimate: A batch's estimated cost per metric from its lines (None: none).
        spend: Told each new batch's estimated cost per metric once it is created, so
            daily budgets count it at submission.
        step: Called with each name of :data:`STEPS` as that step is done (tests stop a
            submitter there).
    """

    def __init__(self, spool: BatchSpool, api: BatchApi, limits: BatchLimits, *,
                 clock: Callable[[], datetime],
                 estimate: Estimate | None = None,
                 spend: Callable[[dict[str, float]], None] | None = None,
                 step: Callable[[str], None] | None = None) -> None:
        self.spool = spool
        self.api = api
        self.limits = limits
        self._clock = clock
        self._estimate = estimate
        self._spend = spend
        self._step = step or (lambda name: None)

    def run(self) -> int:
        """One round: finish batches in doubt, then send what is due.

        Returns:
            Lines sent in new batches this round (recovered ones not counted).

        Raises:
            JudgeError: The provider failed; what was done so far stays recorded.
            StoreUnavailable: The database is away.
        """
        for row in self.spool.batches("preparing"):
            self._recover(row)
        sent = 0
        for model in self.spool.waiting_models(now=self._clock()):
            self._refuse_oversize(model)
            while True:
                batch_id = f"eb-{uuid.uuid4().hex}"
                gathered = self.spool.gather(
                    batch_id, judge_model=model, max_requests=self.limits.max_requests,
                    max_bytes=self.limits.max_bytes, max_wait_s=self.limits.max_wait_s,
                    now=self._clock(), estimate=self._estimate)
                if not gathered.lines:
                    break
                self._step("bound")
                self._send(batch_id, gathered.lines, file_id=None)
                if self._spend is not None and gathered.costs:
                    self._spend(gathered.costs)
                sent += len(gathered.lines)
                logger.info("batch %s: %d %s request(s) sent", batch_id, len(gathered.lines),
                            model)
        return sent

    def _refuse_oversize(self, model: str) -> None:
        limit = self.limits.max_bytes
        letters = [oversize_letter(key, job, size=size, max_bytes=limit, at=self._clock())
                   for key, job, size in self.spool.oversize(judge_model=model,
                                                             max_bytes=limit)]
        self.spool.dead_letter(letters)
        for letter in letters:
            logger.error("dead letter: %s", letter.error)

    def _recover(self, row: BatchRow) -> None:
        found = self.api.find(METADATA_KEY, row.id, input_file_id=row.input_file_id)
        if found is not None:
            logger.info("batch %s found at the provider as %s", row.id, found.get("id"))
            self.spool.record_created(row.id, found)
            return
        logger.info("batch %s was not created: creating it now", row.id)
        self._send(row.id, self.spool.lines(row.id), file_id=row.input_file_id)

    def _send(self, batch_id: str, lines: Sequence[tuple[str, dict[str, Any]]], *,
              file_id: str | None) -> None:
        if file_id is None:
            data = b"".join(batch_line(custom_id, body, url=self.api.dialect.endpoint)
                            for custom_id, body in lines)
            file_id = self.api.upload(data, filename=f"{batch_id}.jsonl")
            self.spool.record_file(batch_id, file_id)
        self._step("uploaded")
        created = self.api.create(file_id, metadata={METADATA_KEY: batch_id})
        self._step("created")
        self.spool.record_created(batch_id, created)
        self._step("recorded")


def oversize_letter(key: str, job: dict[str, Any], *, size: int, max_bytes: int,
                    at: datetime) -> DeadLetter:
    """The dead letter of a spooled job whose batch line alone is over ``max_bytes``,
    naming the job and the limit (its payload kept for a replay once the limit or the
    sample allows)."""
    sample = (job.get("sample") or {}).get("id") if isinstance(job.get("sample"), dict) else None
    error = (f"the batch request of sample {sample!r} ({job.get('metric')}, verdict key "
             f"{key}) is {size} bytes, over the {max_bytes} bytes a batch file may hold "
             f"(batch_max_file_bytes): no batch can carry it")
    try:
        letter = DeadLetter.of_job(decode_job(job), error_class=TOO_LARGE, error=error, at=at)
    except InvalidMessage:
        letter = DeadLetter(sample_id=None, metric=None, error_class=TOO_LARGE, error=error,
                            attempts=0, payload=job, created_at=at)
    return replace(letter, verdict_key=key)
