"""Logging set-up with secret scrubbing.

Every handler gets a filter that replaces configured secrets (API key,
passwords in URLs) with ``***`` in the final message, whatever logged it.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

#: What a secret is replaced with.
MASK = "***"


class SecretFilter(logging.Filter):
    """Replaces secret strings in log records with ``***``."""

    def __init__(self, secrets: Iterable[str]) -> None:
        super().__init__()
        # Longest first, so a secret containing another is masked whole.
        self._secrets = sorted({s for s in secrets if s}, key=len, reverse=True)

    def filter(self, record: logging.LogRecord) -> bool:
        """Mask secrets in the record's message (always keeps the record)."""
        if not self._secrets:
            return True
        message = record.getMessage()
        masked = scrub(message, self._secrets)
        if masked != message:
            record.msg, record.args = masked, ()
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = scrub(record.exc_text, self._secrets)
        return True


def scrub(text: str, secrets: Iterable[str]) -> str:
    """``text`` with every secret replaced by ``***``."""
    for secret in secrets:
        if secret:
            text = text.replace(secret, MASK)
    return text


def install_secret_filter(secrets: Iterable[str], *, logger: logging.Logger | None = None) -> None:
    """Add a :class:`SecretFilter` to every handler of ``logger`` (default: root)."""
    target = logger or logging.getLogger()
    secret_filter = SecretFilter(secrets)
    for handler in target.handlers:
        handler.addFilter(secret_filter)


def configure_logging(*, level: str, secrets: Iterable[str]) -> None:
    """Log to stderr at ``level`` with secrets scrubbed (for commands other than the worker)."""
    logging.basicConfig(
        level=level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    install_secret_filter(secrets)
