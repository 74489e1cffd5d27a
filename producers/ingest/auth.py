"""Bearer-token authentication of the ingest service. Pure.

No ``Authorization`` header, or one that is not ``Bearer <token>``: 401 (the client
did not authenticate). A well-formed token that is not configured: 403.
"""

from __future__ import annotations

import hmac
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from evalfleet.core.errors import InvalidInput
from evalfleet.core.settings import Settings


@dataclass(frozen=True, slots=True)
class AuthResult:
    """The verdict on one request's credentials."""

    status: Literal[200, 401, 403]
    """200 allowed, 401 not authenticated, 403 not allowed."""
    detail: str = ""
    """Why not, for the response body."""


def check_bearer(header: str | None, *, tokens: Sequence[str]) -> AuthResult:
    """Check an ``Authorization`` header against the configured tokens.

    Args:
        header: The header's value, or None when absent.
        tokens: The accepted tokens (non-empty).

    Returns:
        The result.
    """
    if header is None or not header.strip():
        return AuthResult(401, "missing bearer token: send 'Authorization: Bearer <token>'")
    scheme, _, token = header.strip().partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token or " " in token:
        return AuthResult(401, "malformed Authorization header: expected 'Bearer <token>'")
    # Compare against every token, so timing tells nothing about which one is close.
    matched = False
    for known in tokens:
        matched |= hmac.compare_digest(token.encode(), known.encode())
    return AuthResult(200) if matched else AuthResult(403, "token not accepted")


def load_tokens(settings: Settings) -> list[str]:
    """The tokens configured in ``EVALFLEET_INGEST_TOKENS`` and ``EVALFLEET_INGEST_TOKENS_FILE``.

    Raises:
        InvalidInput: When the tokens file cannot be read.
    """
    tokens: list[str] = []
    if settings.ingest.ingest_tokens is not None:
        tokens.extend(settings.ingest.ingest_tokens.get_secret_value().split(","))
    if settings.ingest.ingest_tokens_file is not None:
        tokens.extend(_read_tokens_file(settings.ingest.ingest_tokens_file))
    return [token.strip() for token in tokens if token.strip()]


def _read_tokens_file(path: Path) -> list[str]:
    try:
        lines = path.read_text().splitlines()
    except OSError as exc:
        raise InvalidInput(f"{path}: cannot read the ingest tokens file: {exc.strerror}") \
            from None
    return [line for line in lines if line.strip() and not line.lstrip().startswith("#")]
