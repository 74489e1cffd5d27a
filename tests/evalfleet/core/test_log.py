"""Secrets never reach a log line, whoever logs them."""

from __future__ import annotations

import io
import logging

from evalfleet.core.log import install_secret_filter


def test_secrets_are_scrubbed_from_messages_and_tracebacks() -> None:
    stream = io.StringIO()
    logger = logging.getLogger("evalfleet.test.scrub")
    logger.propagate = False
    logger.addHandler(logging.StreamHandler(stream))
    install_secret_filter(["sk-secret", "db-pass"], logger=logger)
    try:
        raise RuntimeError("connect postgresql://u:db-pass@h/d failed")
    except RuntimeError:
        logger.exception("judge key %s rejected", "sk-secret")
    written = stream.getvalue()
    assert "sk-secret" not in written and "db-pass" not in written
    assert "judge key *** rejected" in written
    assert "postgresql://u:***@h/d" in written
