"""Where a provider's Batch API differs from OpenAI's: the dialect a provider declares.

Providers that follow OpenAI's Batch API shape (``/files`` + ``/batches``) differ in a few
places, each a field of :class:`BatchDialect`; docs/batch.md names them per provider.
Azure OpenAI's endpoint is ``/chat/completions`` (in the batch and in each line), its
requests carry an ``api-version`` query and the key in an ``api-key`` header; Together's
input files have the purpose ``batch-api``, and its batch objects may come wrapped in
``job`` with their status in capitals (read as OpenAI's by
:func:`workers.batchjudge.api.batch_object`); Groq's is OpenAI's. Which name selects
which dialect is :data:`workers.judge.registry.BATCH_DIALECTS`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

#: The one endpoint batches are created for (OpenAI's name for it).
CHAT_ENDPOINT = "/v1/chat/completions"


@dataclass(frozen=True)
class BatchDialect:
    """Where one provider's Batch API differs from OpenAI's."""

    endpoint: str = CHAT_ENDPOINT
    """The batch's ``endpoint`` and each line's ``url``."""
    file_purpose: str = "batch"
    """The ``purpose`` of an uploaded input file."""
    query: dict[str, str] = field(default_factory=dict)
    """Query parameters of every request (Azure's ``api-version``)."""
    key_header: str | None = None
    """The header carrying the raw key; None: ``Authorization: Bearer``."""


#: OpenAI's own (and Groq's).
OPENAI = BatchDialect()

#: Together's: another file purpose.
TOGETHER = BatchDialect(file_purpose="batch-api")


def azure(api_version: str) -> BatchDialect:
    """Azure OpenAI's, for one ``api-version``."""
    return BatchDialect(
        endpoint="/chat/completions", query={"api-version": api_version}, key_header="api-key"
    )
