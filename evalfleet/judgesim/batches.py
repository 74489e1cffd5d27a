"""The simulator's Batch API: files and batches held in memory, moved on when looked at.

A batch follows the provider's life cycle on the simulator's clock: ``validating``
for the first tenth of ``batch_turnaround_s``, then ``in_progress`` (``request_counts``
growing with the time elapsed), then, at the first look after the turnaround, it
settles: its lines are judged (by the ``judge`` the server passes in, the same code
as a synchronous request), the output and error files are written in a shuffled
order, and the batch ends ``completed``, or ``expired`` with only
``batch_expire_done_share`` of its lines done. A cancelled batch is ``cancelling``
until the next look, then ``cancelled`` with the share its time in progress covered.
A batch that fails validation (a bad line, mixed models, the enqueued-token limit)
ends ``failed`` without running, with ``errors`` naming the line and the reason.

Nothing here does I/O or reads the clock: the caller passes ``now``.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from evalfleet.core.errors import InvalidInput
from evalfleet.judgesim.config import SimConfig

#: Every status a batch can have, in the provider's words.
BATCH_STATUSES = ("validating", "failed", "in_progress", "finalizing", "completed", "expired",
                  "cancelling", "cancelled")

#: Statuses of a batch that has not finished.
OPEN_STATUSES = frozenset({"validating", "in_progress", "finalizing", "cancelling"})

#: The one endpoint batches may target here (OpenAI's name for it).
CHAT_ENDPOINT = "/v1/chat/completions"


def chat_endpoint(config: SimConfig) -> str:
    """The chat endpoint's name in batches and their lines, as ``batch_flavor`` says."""
    return "/chat/completions" if config.batch_flavor == "azure" else CHAT_ENDPOINT


def file_purpose(config: SimConfig) -> str:
    """The purpose of a batch input file, as ``batch_flavor`` says."""
    return "batch-api" if config.batch_flavor == "together" else "batch"

#: Share of the turnaround a batch spends validating.
VALIDATION_SHARE = 0.1

#: Most errors reported for a batch that failed validation.
MAX_REPORTED_ERRORS = 10

#: One batch line's judging: the request body in, the HTTP status and response body out.
LineJudge = Callable[[Mapping[str, Any]], tuple[int, dict[str, Any]]]


class BatchRequestError(InvalidInput):
    """A files or batches request the provider would refuse (HTTP 400 or 404)."""

    def __init__(self, message: str, *, status: int = 400, param: str | None = None,
                 code: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.param = param
        self.code = code


@dataclass(slots=True)
class SimFile:
    """One stored file: an uploaded batch input or a batch's output or error file."""

    id: str
    purpose: str
    filename: str
    data: bytes
    created_at: int

    def as_json(self) -> dict[str, Any]:
        """The provider's file object."""
        return {"id": self.id, "object": "file", "bytes": len(self.data),
                "created_at": self.created_at, "filename": self.filename,
                "purpose": self.purpose, "status": "processed", "status_details": None}


@dataclass(frozen=True, slots=True)
class BatchLine:
    """One request of a batch's input file."""

    custom_id: str
    body: Mapping[str, Any]


@dataclass(slots=True)
class SimBatch:
    """One batch and where it stands."""

    id: str
    input_file_id: str
    endpoint: str
    completion_window: str
    metadata: dict[str, str] | None
    created_at: float
    turnaround_s: float
    done_share: float
    lines: list[BatchLine]
    model: str | None
    tokens: int
    errors: list[dict[str, Any]] = field(default_factory=list)
    status: str = "validating"
    stamps: dict[str, int] = field(default_factory=dict)
    cancel_requested_at: float | None = None
    output_file_id: str | None = None
    error_file_id: str | None = None
    completed: int = 0
    failed: int = 0

    @property
    def is_open(self) -> bool:
        """Whether the batch has not finished."""
        return self.status in OPEN_STATUSES

    def as_json(self, now: float) -> dict[str, Any]:
        """The provider's batch object as it stands at ``now``."""
        total = len(self.lines) if self.status != "failed" else 0
        completed = self.completed
        if self.status == "in_progress":
            completed = int(total * min(1.0, self._progress(now)))
        stamp_names = ("in_progress", "finalizing", "completed", "failed", "expired",
                       "cancelling", "cancelled")
        return {
            "id": self.id, "object": "batch", "endpoint": self.endpoint, "model": self.model,
            "errors": {"object": "list", "data": self.errors} if self.errors else None,
            "input_file_id": self.input_file_id, "completion_window": self.completion_window,
            "status": self.status, "output_file_id": self.output_file_id,
            "error_file_id": self.error_file_id, "created_at": int(self.created_at),
            "expires_at": int(self.created_at) + 86_400,
            **{f"{name}_at": self.stamps.get(name) for name in stamp_names},
            "request_counts": {"total": total, "completed": completed, "failed": self.failed},
            "metadata": self.metadata,
        }

    def _progress(self, now: float) -> float:
        """Share of the running time elapsed at ``now`` (0 while validating)."""
        start = self.created_at + self.turnaround_s * VALIDATION_SHARE
        span = self.turnaround_s - self.turnaround_s * VALIDATION_SHARE
        return 1.0 if span <= 0 else max(0.0, (now - start) / span)


@dataclass(slots=True)
class BatchStats:
    """What ``GET /_sim/stats`` reports of batches under ``batches``."""

    api_requests: int = 0
    files_uploaded: int = 0
    created: int = 0
    failed: int = 0
    lines_accepted: int = 0
    lines_judged: int = 0
    repeated_custom_ids: int = 0
    by_status: dict[str, int] = field(default_factory=dict)

    def as_json(self) -> dict[str, Any]:
        """The counters as JSON."""
        return {"api_requests": self.api_requests, "files_uploaded": self.files_uploaded,
                "created": self.created, "failed": self.failed,
                "lines_accepted": self.lines_accepted, "lines_judged": self.lines_judged,
                "repeated_custom_ids": self.repeated_custom_ids,
                "by_status": dict(self.by_status)}


class BatchBook:
    """Every file and batch of one simulator, and the batch counters."""

    def __init__(self) -> None:
        self.files: dict[str, SimFile] = {}
        self.batches: dict[str, SimBatch] = {}
        self.stats = BatchStats()
        self._custom_ids: set[str] = set()
        self._next_id = 1

    def _new_id(self, prefix: str) -> str:
        self._next_id += 1
        return f"{prefix}-sim{self._next_id:010d}"

    def add_file(self, data: bytes, *, purpose: str, filename: str, now: float,
                 config: SimConfig) -> SimFile:
        """Store an upload.

        Raises:
            BatchRequestError: An unknown purpose, or a file over ``batch_max_file_bytes``.
        """
        if purpose != file_purpose(config):
            raise BatchRequestError(f"purpose {purpose!r} is not supported by judge-sim "
                                    f"(only {file_purpose(config)!r})", param="purpose")
        if len(data) > config.batch_max_file_bytes:
            raise BatchRequestError(f"file of {len(data)} bytes is over the limit of "
                                    f"{config.batch_max_file_bytes}", param="file")
        self.stats.files_uploaded += 1
        return self._store(data, purpose=purpose, filename=filename, now=now)

    def _store(self, data: bytes, *, purpose: str, filename: str, now: float) -> SimFile:
        stored = SimFile(self._new_id("file"), purpose, filename, data, int(now))
        self.files[stored.id] = stored
        return stored

    def file(self, file_id: str) -> SimFile:
        """A stored file.

        Raises:
            BatchRequestError: 404 when there is none by that id.
        """
        found = self.files.get(file_id)
        if found is None:
            raise BatchRequestError(f"No such File object: {file_id}", status=404)
        return found

    def batch(self, batch_id: str) -> SimBatch:
        """A batch.

        Raises:
            BatchRequestError: 404 when there is none by that id.
        """
        found = self.batches.get(batch_id)
        if found is None:
            raise BatchRequestError(f"No batch found with id '{batch_id}'.", status=404)
        return found

    def create(self, request: Mapping[str, Any], *, now: float, config: SimConfig) -> SimBatch:
        """A new batch of an uploaded file, ``validating``; its validation outcome is
        decided now and shows when validation ends.

        Raises:
            BatchRequestError: A bad request field or an unknown or unsuitable file.
        """
        input_file_id = request.get("input_file_id")
        if not isinstance(input_file_id, str):
            raise BatchRequestError("'input_file_id' must be a string", param="input_file_id")
        source = self.file(input_file_id)
        if source.purpose != file_purpose(config):
            raise BatchRequestError(f"file {input_file_id} has purpose {source.purpose!r}, "
                                    f"not {file_purpose(config)!r}", param="input_file_id")
        endpoint = request.get("endpoint")
        if endpoint != chat_endpoint(config):
            raise BatchRequestError(f"endpoint must be {chat_endpoint(config)!r}",
                                    param="endpoint")
        window = request.get("completion_window")
        if window != "24h":
            raise BatchRequestError("completion_window must be '24h'",
                                    param="completion_window")
        metadata = _metadata(request.get("metadata"))
        lines, model, tokens, errors = _read_lines(source.data, config=config)
        if not errors and config.batch_enqueued_token_limit is not None:
            enqueued = sum(b.tokens for b in self.batches.values()
                           if b.model == model and b.is_open and not b.errors)
            if enqueued + tokens > config.batch_enqueued_token_limit:
                errors = [{"code": "token_limit_exceeded", "line": None, "param": None,
                           "message": f"Enqueued token limit reached for {model}: "
                                      f"{enqueued} enqueued and {tokens} in this batch, "
                                      f"limit {config.batch_enqueued_token_limit}."}]
        batch = SimBatch(
            self._new_id("batch"), input_file_id, endpoint, window, metadata, now,
            turnaround_s=config.batch_turnaround_s,
            done_share=(1.0 if config.batch_expire_done_share is None
                        else config.batch_expire_done_share),
            lines=lines, model=model, tokens=tokens, errors=errors)
        self.batches[batch.id] = batch
        self.stats.created += 1
        if errors:
            self.stats.failed += 1
        else:
            self.stats.lines_accepted += len(lines)
            for line in lines:
                if line.custom_id in self._custom_ids:
                    self.stats.repeated_custom_ids += 1
                self._custom_ids.add(line.custom_id)
        return batch

    def advance(self, batch: SimBatch, *, now: float, judge: LineJudge,
                rng: random.Random, config: SimConfig) -> SimBatch:
        """Move ``batch`` on to where it stands at ``now``; settle it when its time is up.

        Returns:
            The same batch, updated.
        """
        if not batch.is_open:
            return batch
        validated = now >= batch.created_at + batch.turnaround_s * VALIDATION_SHARE
        if batch.status == "validating" and validated:
            if batch.errors:
                return self._finish(batch, "failed", now)
            batch.status = "in_progress"
            batch.stamps["in_progress"] = int(now)
        if batch.status == "cancelling":
            share = min(1.0, batch._progress(batch.cancel_requested_at or now))
            return self._settle(batch, "cancelled", share, now=now, judge=judge, rng=rng,
                                config=config)
        if batch.status == "in_progress" and batch._progress(now) >= 1.0:
            final = "completed" if batch.done_share >= 1.0 else "expired"
            return self._settle(batch, final, batch.done_share, now=now, judge=judge, rng=rng,
                                config=config)
        return batch

    def cancel(self, batch: SimBatch, *, now: float) -> SimBatch:
        """Ask a batch to stop; an open batch turns ``cancelling`` (``cancelled`` at the
        next look), a finished one is left as it is.

        Returns:
            The same batch, updated.
        """
        if batch.status == "validating" and batch.errors:
            return self._finish(batch, "failed", now)
        if batch.status in ("validating", "in_progress"):
            batch.status = "cancelling"
            batch.cancel_requested_at = now
            batch.stamps["cancelling"] = int(now)
        return batch

    def listing(self, *, after: str | None, limit: int) -> list[SimBatch]:
        """Batches newest first, starting after the batch ``after`` when given."""
        ordered = list(reversed(self.batches.values()))
        if after is not None:
            ids = [b.id for b in ordered]
            ordered = ordered[ids.index(after) + 1:] if after in ids else []
        return ordered[:limit]

    def _finish(self, batch: SimBatch, status: str, now: float) -> SimBatch:
        batch.status = status
        batch.stamps[status] = int(now)
        self.stats.by_status[status] = self.stats.by_status.get(status, 0) + 1
        return batch

    def _settle(self, batch: SimBatch, status: str, share: float, *, now: float,
                judge: LineJudge, rng: random.Random, config: SimConfig) -> SimBatch:
        order = list(range(len(batch.lines)))
        rng.shuffle(order)
        done = round(len(order) * share)
        outputs: list[dict[str, Any]] = []
        errors: list[dict[str, Any]] = []
        undone_code = "batch_expired" if status == "expired" else "batch_cancelled"
        for position, index in enumerate(order):
            line = batch.lines[index]
            request_id = f"req_sim{batch.id[-6:]}{index:07d}"
            record: dict[str, Any] = {"id": f"batch_req_{batch.id[-10:]}_{index}",
                                      "custom_id": line.custom_id}
            if position >= done:
                errors.append({**record, "response": None, "error": {
                    "code": undone_code,
                    "message": "This request could not be executed before the batch "
                               + ("expired." if status == "expired" else "was cancelled.")}})
                continue
            if rng.random() < config.batch_line_error_rate:
                code, body = 500, {"error": {"message": "The server had an error processing "
                                             "this request.", "type": "server_error",
                                             "param": None, "code": None}}
            else:
                code, body = judge(line.body)
            self.stats.lines_judged += 1
            record.update(response={"status_code": code, "request_id": request_id,
                                    "body": body}, error=None)
            (outputs if code == 200 else errors).append(record)
        batch.completed = len(outputs)
        batch.failed = len(errors) - (len(order) - done)
        batch.stamps["finalizing"] = int(now)
        if outputs:
            batch.output_file_id = self._jsonl(outputs, batch, "output", now).id
        if errors:
            batch.error_file_id = self._jsonl(errors, batch, "error", now).id
        return self._finish(batch, status, now)

    def _jsonl(self, records: list[dict[str, Any]], batch: SimBatch, kind: str,
               now: float) -> SimFile:
        data = "".join(json.dumps(r, separators=(",", ":")) + "\n" for r in records).encode()
        return self._store(data, purpose="batch_output", filename=f"{batch.id}_{kind}.jsonl",
                           now=now)


def _metadata(value: Any) -> dict[str, str] | None:
    if value is None:
        return None
    if (not isinstance(value, dict) or len(value) > 16
            or not all(isinstance(k, str) and len(k) <= 64 and isinstance(v, str)
                       and len(v) <= 512 for k, v in value.items())):
        raise BatchRequestError("metadata must be an object of at most 16 string keys "
                                "(64 characters) to string values (512 characters)",
                                param="metadata")
    return dict(value)


def _read_lines(
    data: bytes, *, config: SimConfig,
) -> tuple[list[BatchLine], str | None, int, list[dict[str, Any]]]:
    """The input file's lines, its one model, its prompt tokens, and validation errors
    (each naming its 1-based line)."""
    lines: list[BatchLine] = []
    errors: list[dict[str, Any]] = []
    models: set[str] = set()
    seen: set[str] = set()
    tokens = 0

    def fail(number: int | None, code: str, message: str) -> None:
        if len(errors) < MAX_REPORTED_ERRORS:
            errors.append({"code": code, "line": number, "param": None, "message": message})

    raw_lines = [raw for raw in data.split(b"\n") if raw.strip()]
    if not raw_lines:
        fail(None, "empty_file", "The input file has no requests.")
    if len(raw_lines) > config.batch_max_requests:
        fail(None, "too_many_requests", f"The input file has {len(raw_lines)} requests, "
                                        f"more than {config.batch_max_requests}.")
    for number, raw in enumerate(raw_lines, start=1):
        try:
            record = json.loads(raw)
        except ValueError:
            fail(number, "invalid_json_line", f"Line {number} is not valid JSON.")
            continue
        if not isinstance(record, dict):
            fail(number, "invalid_request", f"Line {number} is not a JSON object.")
            continue
        custom_id, body = record.get("custom_id"), record.get("body")
        if not isinstance(custom_id, str) or not custom_id:
            fail(number, "missing_required_parameter", f"Line {number}: custom_id missing.")
            continue
        if custom_id in seen:
            fail(number, "duplicate_custom_id", f"Line {number}: custom_id {custom_id!r} is "
                                                "used by an earlier line.")
            continue
        if record.get("method") != "POST" or record.get("url") != chat_endpoint(config):
            fail(number, "mismatched_endpoint", f"Line {number}: method and url must be "
                                                f"POST {chat_endpoint(config)}.")
            continue
        if not isinstance(body, dict) or not isinstance(body.get("model"), str):
            fail(number, "invalid_request", f"Line {number}: body must be an object with "
                                            "a model.")
            continue
        seen.add(custom_id)
        models.add(body["model"])
        tokens += len(json.dumps(body.get("messages"))) // 4 + 1
        lines.append(BatchLine(custom_id, body))
    if len(models) > 1:
        fail(None, "mismatched_model", f"A batch takes one model; this file has "
                                       f"{len(models)}: {', '.join(sorted(models))}.")
    model = next(iter(models)) if len(models) == 1 else None
    return lines, model, tokens, errors
