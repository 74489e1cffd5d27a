"""Bearer tokens: 401 without or malformed, 403 wrong, tokens from settings and a file."""

from __future__ import annotations

from pathlib import Path

import pytest

from evalfleet.core.errors import InvalidInput
from evalfleet.core.settings import Settings
from producers.ingest.auth import check_bearer, load_tokens

TOKENS = ["tok-one", "tok-two"]


@pytest.mark.parametrize(("header", "status"), [
    (None, 401), ("", 401), ("Bearer", 401), ("Bearer ", 401), ("Basic dXNlcjpwdw==", 401),
    ("Bearer a b", 401), ("tok-one", 401),
    ("Bearer nope", 403), ("Bearer tok-on", 403),
    ("Bearer tok-one", 200), ("bearer tok-two", 200), ("  Bearer   tok-two ", 200),
])
def test_check_bearer(header: str | None, status: int) -> None:
    result = check_bearer(header, tokens=TOKENS)
    assert result.status == status
    assert bool(result.detail) == (status != 200)


def test_tokens_from_settings_and_file(tmp_path: Path) -> None:
    tokens_file = tmp_path / "tokens"
    tokens_file.write_text("# ingest tokens\nfile-token\n\n  other-token  \n")
    settings = Settings(ingest_tokens=" a, b ,", ingest_tokens_file=tokens_file)
    assert load_tokens(settings) == ["a", "b", "file-token", "other-token"]
    assert load_tokens(Settings()) == []
    with pytest.raises(InvalidInput, match="cannot read the ingest tokens file"):
        load_tokens(Settings(ingest_tokens_file=tmp_path / "missing"))


def test_tokens_are_secrets() -> None:
    settings = Settings(ingest_tokens="tok-one,tok-two")
    assert "tok-one" not in repr(settings)
    assert {"tok-one", "tok-two"} <= set(settings.secret_values())
