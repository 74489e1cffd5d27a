"""Judges of different quality: how often a model is wrong, and how sure it says it is. Pure.

A model with a :class:`JudgeProfile` draws, per prompt (a hash of the model name and
the prompt, salted for this purpose), how much it knows: ``knows`` uniform on
``[1 - 2 * error_rate, 1]``, so it is right with probability ``knows`` and wrong on
``error_rate`` of prompts on average. Right, it answers the verdict the simulator gives
by default, which plays the people's answer; wrong, every score moves away from it (a
yes/no inverted, a 1-5 score by two steps, a 0..1 score by 0.5), far enough that no
tolerance calls it agreement.

Asked for log-probabilities, it reports ``knows`` as the probability of each score's
first token (``honest``: calibrated, right as often as it says), or 0.95 to 1 whatever it
knows (``overconfident``: a judge that is confidently wrong). Every other token is
certain. Tokens are digits one by one, runs of letters, runs of spaces and single signs,
so the tokens spell the reply exactly.
"""

from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

#: The purpose the quality hash is salted with.
QUALITY_SALT = b"judge-quality"

#: Most alternatives listed per token (OpenAI's limit).
MAX_TOP_LOGPROBS = 20

_TOKEN = re.compile(r"\d|[^\W\d]+|\s+|.", re.DOTALL)
_OTHER_WORD = {"true": "false", "false": "true", "null": "0"}


class JudgeProfile(BaseModel):
    """How good one simulated judge model is."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    error_rate: float = Field(default=0.0, ge=0, le=0.5)
    """Share of prompts it gets wrong, on average."""

    logprobs: Literal["honest", "overconfident"] = "honest"
    """What its log-probabilities say: ``honest`` (the chance it is right) or
    ``overconfident`` (0.95 to 1, right or wrong)."""


@dataclass(frozen=True, slots=True)
class Draw:
    """What a judge knows about one prompt."""

    knows: float
    """The chance it is right, 0..1."""
    right: bool
    """Whether it is right this time."""
    shown: float
    """The probability its log-probabilities report for each score token."""


def draw(profile: JudgeProfile, *, model: str, digest: bytes) -> Draw:
    """The judge's knowledge of one prompt, the same on every call.

    Args:
        profile: The model's profile.
        model: The model name (two models judge the same prompt independently).
        digest: The prompt's sha256.

    Returns:
        The draw.
    """
    units = hashlib.sha256(QUALITY_SALT + model.encode("utf-8", "surrogatepass") + digest).digest()
    first, second, third = (int.from_bytes(units[i:i + 4], "big") / 2**32 for i in (0, 4, 8))
    knows = 1.0 - 2.0 * profile.error_rate * first
    shown = knows if profile.logprobs == "honest" else 0.95 + 0.05 * third
    return Draw(knows=knows, right=second < knows, shown=shown)


def wrong_value(value: Any) -> Any:
    """A score value far from ``value``: a boolean inverted, a 1-5 integer moved by two,
    a 0..1 number moved by 0.5; anything else (null, text) unchanged."""
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return value + 2 if value <= 3 else value - 2
    if isinstance(value, float):
        return round(value + 0.5 if value < 0.5 else value - 0.5, 2)
    return value


def token_logprobs(content: str, *, score_starts: Iterable[int], shown: float,
                   top_logprobs: int) -> dict[str, Any]:
    """The ``logprobs`` object of a choice whose content is ``content``.

    Args:
        content: The reply's text.
        score_starts: Offsets where a score's value begins: the token there reports
            ``shown``, the rest of its mass on one alternative.
        shown: The probability reported for score tokens.
        top_logprobs: Alternatives listed per token (0: none).

    Returns:
        ``{"content": [{"token", "logprob", "bytes", "top_logprobs"}, ...], "refusal": None}``.
    """
    uncertain = set(score_starts)
    listed = max(0, min(top_logprobs, MAX_TOP_LOGPROBS))
    entries = []
    for match in _TOKEN.finditer(content):
        token = match.group()
        chosen = _logprob(shown) if match.start() in uncertain else 0.0
        top = [(token, chosen)]
        if chosen < 0.0:
            top.append((_alternative(token), _logprob(1.0 - shown)))
        entries.append({
            "token": token, "logprob": chosen, "bytes": list(token.encode("utf-8", "replace")),
            "top_logprobs": [{"token": alt, "logprob": lp,
                              "bytes": list(alt.encode("utf-8", "replace"))}
                             for alt, lp in top[:listed]],
        })
    return {"content": entries, "refusal": None}


def _logprob(probability: float) -> float:
    return math.log(probability) if probability > 0.0 else -9999.0


def _alternative(token: str) -> str:
    if token.isdigit():
        return str((int(token) + 1) % 10)
    return _OTHER_WORD.get(token, "~")


def score_value_starts(content: str, *, keys: Iterable[str], tag: bool) -> list[int]:
    """Where each score's value begins in a rendered reply (its last place).

    Args:
        content: The reply's text.
        keys: The verdict's score keys (JSON replies).
        tag: The reply ends with a score tag instead (``<score>N</score>``).

    Returns:
        One offset per score found.
    """
    if tag:
        found = list(re.finditer(r"<score>(\d+)</score>", content))
        return [found[-1].start(1)] if found else []
    starts = []
    for key in keys:
        found = list(re.finditer(rf'"{re.escape(key)}"\s*:\s*(\S)', content))
        if found:
            starts.append(found[-1].start(1))
    return starts
