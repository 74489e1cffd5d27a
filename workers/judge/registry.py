"""Every judge provider the settings can name, and every Batch API dialect: one table each.

Adding a provider with its own API is its own module (a
:class:`~workers.judge.provider.JudgeProvider`, and its
:class:`~workers.judge.dialect.BatchDialect` when its Batch API differs from OpenAI's)
plus one line here; the settings (``EVALFLEET_JUDGE_CLIENT``,
``EVALFLEET_BATCH_FLAVOR``), the worker, ``evalfleet judge check``, the readiness probe
and the beat's Batch API all read these tables. A name the tables lack is refused when
the worker or the beat starts (:class:`UnknownProvider`), naming the known ones.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from evalfleet.core.errors import InvalidInput
from workers.judge.dialect import OPENAI, TOGETHER, BatchDialect, azure
from workers.judge.http_judge import AsyncHttpJudge
from workers.judge.openai_judge import OpenAIJudge
from workers.judge.provider import JudgeProvider


@dataclass(frozen=True)
class ProviderConfig:
    """What every provider is built from (one endpoint's URL and key, the fleet's limits)."""

    base_url: str | None
    """The endpoint's base URL; None: the provider's default."""
    api_key: str | None
    timeout_s: float
    """Per call."""
    max_connections: int
    max_reply_bytes: int


#: ``EVALFLEET_JUDGE_CLIENT`` -> how that provider is built.
JUDGE_CLIENTS: Mapping[str, Callable[[ProviderConfig], JudgeProvider]] = {
    "http": lambda config: AsyncHttpJudge(
        base_url=config.base_url,
        api_key=config.api_key,
        timeout_s=config.timeout_s,
        max_connections=config.max_connections,
        max_reply_bytes=config.max_reply_bytes,
    ),
    "openai": lambda config: OpenAIJudge(
        base_url=config.base_url,
        api_key=config.api_key,
        timeout_s=config.timeout_s,
        max_connections=config.max_connections,
        max_reply_bytes=config.max_reply_bytes,
    ),
}

#: ``EVALFLEET_BATCH_FLAVOR`` -> its Batch API dialect, given Azure's ``api-version``.
BATCH_DIALECTS: Mapping[str, Callable[[str], BatchDialect]] = {
    "openai": lambda api_version: OPENAI,
    "groq": lambda api_version: OPENAI,  # OpenAI's shape
    "azure": azure,
    "together": lambda api_version: TOGETHER,
}


class UnknownProvider(InvalidInput):
    """A judge client or batch flavor the registry does not know."""

    def __init__(self, what: str, name: str, *, known: list[str]) -> None:
        self.name = name
        super().__init__(f"unknown {what} {name!r} (known: {', '.join(sorted(known))})")


def judge_client(name: str) -> Callable[[ProviderConfig], JudgeProvider]:
    """How the provider ``EVALFLEET_JUDGE_CLIENT`` names is built.

    Raises:
        UnknownProvider: No provider has that name.
    """
    if name not in JUDGE_CLIENTS:
        raise UnknownProvider("EVALFLEET_JUDGE_CLIENT", name, known=list(JUDGE_CLIENTS))
    return JUDGE_CLIENTS[name]


def batch_dialect(flavor: str, *, api_version: str) -> BatchDialect:
    """The Batch API dialect ``EVALFLEET_BATCH_FLAVOR`` names.

    Raises:
        UnknownProvider: No dialect has that name.
    """
    if flavor not in BATCH_DIALECTS:
        raise UnknownProvider("EVALFLEET_BATCH_FLAVOR", flavor, known=list(BATCH_DIALECTS))
    return BATCH_DIALECTS[flavor](api_version)
