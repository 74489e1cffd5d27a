"""The provider's Batch API over HTTP: files and batches, OpenAI's shapes.

Every call is one request; errors come back as the project's judge errors, classified
once (:func:`workers.judge.status.classify_status`), so a batch step fails the way a
judge call does. It never retries on its own.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import httpx

from evalfleet.core.errors import JudgeError, JudgeUnavailable
from workers.judge.status import classify_status

#: The one endpoint batches are created for.
CHAT_ENDPOINT = "/v1/chat/completions"

#: Batches listed per page when one is looked for by its metadata.
LIST_PAGE = 100

#: Statuses of a batch still at work.
OPEN_STATUSES = frozenset({"validating", "in_progress", "finalizing", "cancelling"})


class BatchApi:
    """A blocking client of one provider's Batch API.

    Args:
        base_url: The OpenAI base URL, ending in ``/v1``.
        api_key: Sent as a bearer token (None: none sent).
        timeout_s: Per request.
    """

    def __init__(self, base_url: str, *, api_key: str | None = None,
                 timeout_s: float = 60.0) -> None:
        headers = {"authorization": f"Bearer {api_key}"} if api_key else {}
        self.base_url = base_url.rstrip("/")
        self._http = httpx.Client(base_url=self.base_url, headers=headers, timeout=timeout_s,
                                  trust_env=False)

    def upload(self, data: bytes, *, filename: str) -> str:
        """Upload a batch input file (``purpose=batch``).

        Returns:
            The file's id.

        Raises:
            JudgeError: Classified from the provider's answer or the transport failure.
        """
        answer = self._call("POST", "/files", files={"file": (filename, data)},
                            data={"purpose": "batch"})
        return str(answer["id"])

    def create(self, input_file_id: str, *, metadata: Mapping[str, str]) -> dict[str, Any]:
        """Create a batch of an uploaded file.

        Raises:
            JudgeError: As :meth:`upload`.
        """
        return self._call("POST", "/batches", json={
            "input_file_id": input_file_id, "endpoint": CHAT_ENDPOINT,
            "completion_window": "24h", "metadata": dict(metadata)})

    def retrieve(self, batch_id: str) -> dict[str, Any]:
        """A batch as it stands.

        Raises:
            JudgeError: As :meth:`upload`.
        """
        return self._call("GET", f"/batches/{batch_id}")

    def cancel(self, batch_id: str) -> dict[str, Any]:
        """Ask the provider to stop a batch.

        Raises:
            JudgeError: As :meth:`upload`.
        """
        return self._call("POST", f"/batches/{batch_id}/cancel")

    def find(self, key: str, value: str, *, pages: int = 10) -> dict[str, Any] | None:
        """The newest batch whose metadata has ``key`` = ``value``, among the newest
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
            for batch in page.get("data") or []:
                if isinstance(batch, dict) and (batch.get("metadata") or {}).get(key) == value:
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
        try:
            response = self._http.request(method, path, **options)
        except httpx.HTTPError as exc:
            raise JudgeUnavailable(f"{method} {path}: {type(exc).__name__}: {exc}") from None
        if response.status_code >= 300:
            raise _error(response, f"{method} {path}")
        return response


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
