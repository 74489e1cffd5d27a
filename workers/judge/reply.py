"""Reading a judge's answer body into a :class:`JudgeReply`, within a size cap. Pure.

Both clients read the body in chunks and stop past the cap
(``EVALFLEET_JUDGE_MAX_REPLY_BYTES``): a judge that answers with megabytes never
makes a worker hold or parse them. Such a reply comes back with the finish reason
:data:`TOO_LARGE`, which the parser records as a truncated verdict, like a reply
cut at the token limit.
"""

from __future__ import annotations

from evalfleet.core import jsontext
from evalfleet.core.errors import JudgeUnavailable
from workers.judge.base import JudgeReply, reported
from workers.judge.logprobs import read_logprobs

#: Largest answer body read from the judge, in bytes, unless configured.
DEFAULT_MAX_REPLY_BYTES = 1_048_576

#: The finish reason of a reply whose body was over the cap (its content is not read).
TOO_LARGE = "reply_too_large"


def too_large_reply(*, latency_ms: int) -> JudgeReply:
    """The reply standing for a body over the cap."""
    return JudgeReply(text=None, finish_reason=TOO_LARGE, prompt_tokens=None,
                      completion_tokens=None, latency_ms=latency_ms)


def reply_from_body(raw: bytes, *, latency_ms: int) -> JudgeReply:
    """The reply in a chat completion body.

    Raises:
        JudgeUnavailable: For a body that is not a chat completion (nested past
            :data:`evalfleet.core.jsontext.HARD_MAX_DEPTH` included).
    """
    try:
        data = jsontext.loads(raw)
        choice = data["choices"][0]
        content = choice["message"].get("content")
        usage = data.get("usage") or {}
        return JudgeReply(
            text=content if isinstance(content, str) else None,
            finish_reason=choice.get("finish_reason"),
            prompt_tokens=_count(usage.get("prompt_tokens")),
            completion_tokens=_count(usage.get("completion_tokens")), latency_ms=latency_ms,
            model=reported(data.get("model")),
            system_fingerprint=reported(data.get("system_fingerprint")),
            cached_tokens=_cached(usage.get("prompt_tokens_details")),
            logprobs=read_logprobs(choice.get("logprobs")),
        )
    except (ValueError, KeyError, IndexError, TypeError, AttributeError) as exc:
        raise JudgeUnavailable(f"unreadable judge reply ({type(exc).__name__})") from None


def _cached(details: object) -> int | None:
    # Absent, or not an object (a hostile reply), is unknown: the verdict is still read.
    return _count(details.get("cached_tokens")) if isinstance(details, dict) else None


def _count(value: object) -> int | None:
    # A token count that is not a plain non-negative integer is unknown, not stored.
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 2**31:
        return None
    return value
