"""The provider's Batch API over HTTP: files and batches, OpenAI's shapes.

Every call is one request; errors come back as the project's judge errors, classified
once (:func:`workers.judge.http_status.classify_status`), so a batch step fails the way a
judge call does. It never retries on its own. A circuit breaker counts its transport
failures (timeouts, refused connections, 5xx) as the judge fleet's does for calls: while
it is open, calls fail at once unsent, so a Batch API that is down is asked once per
probe, not by every step of every round.

Providers that follow OpenAI's shape differ in a few places, each a field of the
:class:`~workers.judge.dialect.BatchDialect` the provider declares (the registry,
:mod:`workers.judge.registry`, names them); this client speaks whichever it is given.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

import httpx

from evalfleet.core.errors import JudgeError, JudgeUnavailable
from workers.breaker import Admission, CircuitBreaker
from workers.judge.dialect import BatchDialect
from workers.judge.http_status import classify_status

#: Batches listed per page when one is looked for by its metadata.
LIST_PAGE = 100

#: Statuses of a batch still at work.
OPEN_STATUSES = frozenset({"validating", "in_progress", "finalizing", "cancelling"})


class BatchApi:
    """A blocking client of one provider's Batch API.

    Args:
        base_url: The base URL ``/files`` and ``/batches`` are under (OpenAI's ends in
            ``/v1``, Azure's in ``/openai``).
        api_key: Sent as the dialect says (None: none sent).
        timeout_s: Per request.
        dialect: Where the provider differs from OpenAI.
        breaker: Its circuit breaker (a fresh one by default).
        clock: Monotonic seconds, for the breaker.
    """

    def __init__(self, base_url: str, *, api_key: str | None = None,
                 timeout_s: float = 60.0, dialect: BatchDialect | None = None,
                 breaker: CircuitBreaker | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.dialect = dialect or BatchDialect()
        self.breaker = breaker or CircuitBreaker()
        self._clock = clock
        self._breaker_lock = threading.Lock()
        headers: dict[str, str] = {}
        if api_key:
            headers = ({self.dialect.key_header: api_key} if self.dialect.key_header
                       else {"authorization": f"Bearer {api_key}"})
        self.base_url = base_url.rstrip("/")
        self._http = httpx.Client(base_url=self.base_url, headers=headers, timeout=timeout_s,
                                  params=self.dialect.query, trust_env=False)

    def upload(self, data: bytes, *, filename: str) -> str:
        """Upload a batch input file (``purpose=batch``, or the dialect's).

        Returns:
            The file's id.

        Raises:
            JudgeError: Classified from the provider's answer or the transport failure.
        """
        answer = self._call("POST", "/files", files={"file": (filename, data)},
                            data={"purpose": self.dialect.file_purpose})
        return str(answer["id"])

    def create(self, input_file_id: str, *, metadata: Mapping[str, str]) -> dict[str, Any]:
        """Create a batch of an uploaded file.

        Raises:
            JudgeError: As :meth:`upload`.
        """
        return batch_object(self._call("POST", "/batches", json={
            "input_file_id": input_file_id, "endpoint": self.dialect.endpoint,
            "completion_window": "24h", "metadata": dict(metadata)}))

    def retrieve(self, batch_id: str) -> dict[str, Any]:
        """A batch as it stands.

        Raises:
            JudgeError: As :meth:`upload`.
        """
        return batch_object(self._call("GET", f"/batches/{batch_id}"))

    def cancel(self, batch_id: str) -> dict[str, Any]:
        """Ask the provider to stop a batch.

        Raises:
            JudgeError: As :meth:`upload`.
        """
        return batch_object(self._call("POST", f"/batches/{batch_id}/cancel"))

    def find(self, key: str, value: str, *, input_file_id: str | None = None,
             pages: int = 10) -> dict[str, Any] | None:
        """The newest batch whose metadata has ``key`` = ``value``, or (for a provider
        that keeps no metadata) whose input file is ``input_file_id``, among the newest
        ``pages`` pages of batches; None when there is none.

        Raises:
            JudgeError: As :meth:`upload`.
        """
        after: str | None = None
        for _ in range(pages):
            params: dict[str, Any] = {"limit": LIST_PAGE}
            if after is not None:
                params["after"] = after
            page = self._call("GET", "/batches", params=params)
            for raw in page.get("data") or []:
                batch = batch_object(raw) if isinstance(raw, dict) else {}
                if ((batch.get("metadata") or {}).get(key) == value
                        or (input_file_id and batch.get("input_file_id") == input_file_id)):
                    return batch
            if not page.get("has_more") or not page.get("last_id"):
                return None
            after = str(page["last_id"])
        return None

    def content(self, file_id: str) -> bytes:
        """A file's bytes (a batch's output or error file).

        Raises:
            JudgeError: As :meth:`upload`.
        """
        response = self._send("GET", f"/files/{file_id}/content")
        return response.content

    def close(self) -> None:
        """Release connections."""
        self._http.close()

    def _call(self, method: str, path: str, **options: Any) -> dict[str, Any]:
        response = self._send(method, path, **options)
        try:
            answer = response.json()
        except ValueError:
            raise JudgeUnavailable(f"{method} {path}: the answer is not JSON") from None
        if not isinstance(answer, dict):
            raise JudgeUnavailable(f"{method} {path}: the answer is not a JSON object")
        return answer

    def _send(self, method: str, path: str, **options: Any) -> httpx.Response:
        with self._breaker_lock:
            admission = self.breaker.admit(self._clock())
        if not admission.allowed:
            raise JudgeUnavailable(f"{method} {path}: the Batch API's circuit is open "
                                   f"(next probe in {admission.wait_s:.0f}s)")
        try:
            response = self._http.request(method, path, **options)
        except httpx.HTTPError as exc:
            self._count(admission, failed=True)
            raise JudgeUnavailable(f"{method} {path}: {type(exc).__name__}: {exc}") from None
        self._count(admission, failed=response.status_code >= 500)
        if response.status_code >= 300:
            raise _error(response, f"{method} {path}")
        return response

    def _count(self, admission: Admission, *, failed: bool) -> None:
        with self._breaker_lock:
            if failed:
                self.breaker.failed(self._clock())
            else:
                self.breaker.succeeded()
            self.breaker.release(admission)


def batch_object(answer: dict[str, Any]) -> dict[str, Any]:
    """A batch as OpenAI shapes it: unwrapped from Together's ``job``, status in lower
    case."""
    job = answer.get("job")
    batch = dict(job) if isinstance(job, dict) and "id" not in answer else dict(answer)
    if isinstance(batch.get("status"), str):
        batch["status"] = batch["status"].lower()
    return batch


def error_message(body: Any) -> str | None:
    """The ``error.message`` of a provider's error body, if it has one."""
    error = body.get("error") if isinstance(body, dict) else None
    message = error.get("message") if isinstance(error, dict) else None
    return message if isinstance(message, str) else None


def _error(response: httpx.Response, what: str) -> JudgeError:
    try:
        body = response.json()
    except ValueError:
        body = None
    message = error_message(body)
    return classify_status(response.status_code,
                           message=f"{what}: {response.status_code} {message or ''}".strip(),
                           body=body, retry_after_s=None)
