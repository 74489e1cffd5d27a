"""The project's own token estimate: no tokenizer, so nothing to download at run time. Pure.

Tokenizer packages fetch their encodings on first use, which an offline fleet cannot
do, and each model counts differently anyway. Four characters a token is what the rate
limiter reserves with, what the batch budget prices a batch line's prompt at and what
the judge simulator bills; length checks use it too.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

#: Characters counted as one token.
CHARS_PER_TOKEN = 4


def estimate_tokens(text: str) -> int:
    """Tokens in ``text``: its characters divided by :data:`CHARS_PER_TOKEN`, rounded up."""
    return tokens_in_chars(len(text))


def tokens_in_chars(characters: int) -> int:
    """Tokens in ``characters`` characters, rounded up."""
    return -(-characters // CHARS_PER_TOKEN)


def prompt_tokens(messages: Iterable[Mapping[str, Any]]) -> int:
    """Tokens of a chat prompt: its messages' contents together, rounded up once.

    A content that is not text (as a hostile or foreign batch line may hold) counts by
    its printed length, and a missing one as nothing.
    """
    return tokens_in_chars(sum(_length(message.get("content")) for message in messages))


def _length(content: Any) -> int:
    if isinstance(content, str):
        return len(content)
    return 0 if content is None else len(str(content))
