"""The log-probabilities of a judge's reply, as servers return them. Pure.

OpenAI-compatible servers (OpenAI, vLLM, llama.cpp's server, llama-cpp-python) answer a
chat completion asked with ``logprobs: true, top_logprobs: n`` with
``choices[0].logprobs.content``: one entry per token, ``{"token", "logprob", "bytes",
"top_logprobs": [{"token", "logprob", "bytes"}, ...]}``. :func:`read_logprobs` reads
that list into plain values, or None when it is absent or malformed in any way (the
judge's reply is hostile input: a NaN, a positive log-probability, a boolean as a
number, a list past the caps). What a confidence is made of them is
:mod:`workers.verdicts.confidence`'s.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

#: Most token positions read from a reply's log-probabilities (a reply is size-capped
#: before it is read; this bounds the work on a hostile list all the same).
MAX_TOKENS = 65_536

#: Most alternatives read at one position (OpenAI returns at most 20).
MAX_ALTERNATIVES = 20

#: Largest log-probability taken as 0 (servers round): a bigger one is not a probability.
_LOGPROB_SLACK = 1e-6


@dataclass(frozen=True, slots=True)
class TokenLogprob:
    """One position of a completion: the token written and the alternatives listed."""

    token: str
    """The token's text."""
    logprob: float
    """Its natural log-probability (<= 0, ``-inf`` allowed)."""
    alternatives: tuple[tuple[str, float], ...] = ()
    """``top_logprobs`` at this position: token text and log-probability."""


def read_logprobs(logprobs: Any) -> tuple[TokenLogprob, ...] | None:
    """The token positions of a chat completion choice's ``logprobs`` object.

    Args:
        logprobs: ``choices[0].logprobs`` as decoded JSON (``{"content": [...]}``).

    Returns:
        One entry per token, or None when there are none or any entry is malformed
        (missing fields, NaN, a positive log-probability, a boolean as a number, more
        than :data:`MAX_TOKENS` positions).
    """
    content = logprobs.get("content") if isinstance(logprobs, Mapping) else None
    if not isinstance(content, list) or not content or len(content) > MAX_TOKENS:
        return None
    tokens: list[TokenLogprob] = []
    for entry in content:
        position = _position(entry)
        if position is None:
            return None
        tokens.append(position)
    return tuple(tokens)


def _position(entry: Any) -> TokenLogprob | None:
    if not isinstance(entry, Mapping):
        return None
    token, logprob = entry.get("token"), _logprob(entry.get("logprob"))
    if not isinstance(token, str) or logprob is None:
        return None
    top = entry.get("top_logprobs") or []
    if not isinstance(top, list):
        return None
    alternatives: list[tuple[str, float]] = []
    for item in top[:MAX_ALTERNATIVES]:
        alt = _logprob(item.get("logprob")) if isinstance(item, Mapping) else None
        if alt is None or not isinstance(item.get("token"), str):
            return None
        alternatives.append((item["token"], alt))
    return TokenLogprob(token, logprob, tuple(alternatives))


def _logprob(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    if math.isnan(value) or value > _LOGPROB_SLACK:
        return None
    return min(float(value), 0.0)
