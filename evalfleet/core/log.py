"""Logging set-up with secret scrubbing.

Every handler gets a filter that replaces configured secrets (API key,
passwords in URLs) with ``***`` in the final message, whatever logged it. The
password of any URL in a message is masked too, configured or not (a URL a
library quotes in its error, a URL typed on the command line).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable

#: What a secret is replaced with.
MASK = "***"

# The password of a URL: "scheme://user:PASSWORD@". Starts at "://" and every part is
# bounded, so a long line costs linear time.
_URL_PASSWORD = re.compile(r"(://[^\s/:@]{0,256}:)[^\s/@]{1,512}@")


class SecretFilter(logging.Filter):
    """Replaces secret strings in log records with ``***``."""

    def __init__(self, secrets: Iterable[str]) -> None:
        super().__init__()
        # Longest first, so a secret containing another is masked whole.
        self._secrets = sorted({s for s in secrets if s}, key=len, reverse=True)

    def filter(self, record: logging.LogRecord) -> bool:
        """Mask secrets in the record's message (always keeps the record)."""
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
    """``text`` with every secret and every URL's password replaced by ``***``."""
    for secret in secrets:
        if secret:
            text = text.replace(secret, MASK)
    return scrub_urls(text)


def scrub_urls(text: str) -> str:
    """``text`` with the password of every ``scheme://user:password@`` replaced by ``***``."""
    if "://" not in text:
        return text
    return _URL_PASSWORD.sub(lambda found: f"{found.group(1)}{MASK}@", text)


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
