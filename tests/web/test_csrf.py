"""Form tokens: signed, bound to a session, short-lived; anything else is refused."""

from __future__ import annotations

import pytest

from evalfleet.web.csrf import TOKEN_TTL_S, check_token, issue_token

SECRET = b"k" * 32
NOW = 1_800_000_000.0
GOOD = issue_token(secret=SECRET, binding="ann", now_s=NOW)


@pytest.mark.parametrize("token, secret, binding, now_s, accepted", [
    (GOOD, SECRET, "ann", NOW, True),
    (GOOD, SECRET, "ann", NOW + TOKEN_TTL_S, True),
    (GOOD, SECRET, "ann", NOW + TOKEN_TTL_S + 1, False),
    (GOOD, SECRET, "ann", NOW - 10, False),
    (GOOD, SECRET, "bob", NOW, False),
    (GOOD, b"other", "ann", NOW, False),
    (GOOD[:-1] + ("0" if GOOD[-1] != "0" else "1"), SECRET, "ann", NOW, False),
    (f"{int(NOW) + 1}.{GOOD.split('.')[1]}", SECRET, "ann", NOW + 5, False),
    (None, SECRET, "ann", NOW, False),
    ("", SECRET, "ann", NOW, False),
    ("abc", SECRET, "ann", NOW, False),
    ("1.2.3", SECRET, "ann", NOW, False),
    ("x.y", SECRET, "ann", NOW, False),
    ("9" * 40 + ".ab", SECRET, "ann", NOW, False),
    (f"{int(NOW)}.é", SECRET, "ann", NOW, False),
])
def test_check_token(token: str | None, secret: bytes, binding: str, now_s: float,
                     accepted: bool) -> None:
    assert check_token(token, secret=secret, binding=binding, now_s=now_s) is accepted
