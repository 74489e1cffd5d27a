"""Form tokens against cross-site requests: signed, bound to who posts, short-lived. Pure.

A token is ``<issued at>.<HMAC-SHA256(secret, issued at | binding)>``: any replica that
shares the secret (``EVALFLEET_REVIEW_SECRET``) accepts it, none keeps a list. The
binding is a digest of the reviewer's session, so a token taken from one reviewer's
page is worth nothing in another's.
"""

from __future__ import annotations

import hashlib
import hmac

#: How long a form token is accepted, in seconds (a reviewer's longest pause).
TOKEN_TTL_S = 12 * 3600


def issue_token(*, secret: bytes, binding: str, now_s: float) -> str:
    """A form token for ``binding`` issued at ``now_s`` (Unix seconds)."""
    issued = str(int(now_s))
    return f"{issued}.{_sign(secret, issued, binding)}"


def check_token(token: str | None, *, secret: bytes, binding: str, now_s: float,
                ttl_s: float = TOKEN_TTL_S) -> bool:
    """True when ``token`` was issued for ``binding`` with ``secret`` less than ``ttl_s`` ago."""
    if not token or token.count(".") != 1:
        return False
    issued, signature = token.split(".")
    if not issued.isdigit() or len(issued) > 12:
        return False
    if not 0 <= now_s - int(issued) <= ttl_s:
        return False
    return hmac.compare_digest(signature.encode("ascii", "replace"),
                               _sign(secret, issued, binding).encode("ascii"))


def _sign(secret: bytes, issued: str, binding: str) -> str:
    message = f"{issued}|{binding}".encode()
    return hmac.new(secret, message, hashlib.sha256).hexdigest()
