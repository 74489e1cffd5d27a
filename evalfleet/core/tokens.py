"""The project's own token estimate: no tokenizer, so nothing to download at run time. Pure.

Tokenizer packages fetch their encodings on first use, which an offline fleet cannot
do, and each model counts differently anyway. Four characters a token is what the rate
limiter reserves with and what the judge simulator bills; length checks use it too.
"""

from __future__ import annotations

#: Characters counted as one token.
CHARS_PER_TOKEN = 4


def estimate_tokens(text: str) -> int:
    """Tokens in ``text``: its characters divided by :data:`CHARS_PER_TOKEN`, rounded up."""
    return -(-len(text) // CHARS_PER_TOKEN)
