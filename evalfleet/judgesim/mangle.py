"""The text of a simulated reply: a verdict bare or fenced, broken, and where to cut it.

Each renderer returns the content and the offset where a truncated reply is
cut: inside the verdict for JSON, just after ``Score- <score>`` for the score
tag, half-way for free text. A malformed kind (see :data:`MalformedKind`)
breaks the verdict's syntax while keeping its values.
"""

from __future__ import annotations

import json
from typing import Any

from evalfleet.judgesim.config import MalformedKind

_REC_EXTENT = {1: "barely", 2: "poorly", 3: "partly", 4: "mostly", 5: "fully"}
_TEXT_PREAMBLE = "Here is my evaluation of the answer."
_UNESCAPED = ' The answer says "yes".'
_PLACEHOLDER = "\x00unescaped\x00"


def render_json(
    verdict: dict[str, Any], *, bare: bool, malformed: MalformedKind | None,
) -> tuple[str, int]:
    """A JSON verdict: bare, or fenced after one sentence; broken when ``malformed``.

    Args:
        verdict: The verdict's keys and values.
        bare: True for the verdict alone (JSON mode), False for prose and a fenced block.
        malformed: How to break it, or None for valid JSON.

    Returns:
        The content, and where a truncated reply is cut (mid-way through the verdict).
    """
    if malformed is not None:
        content = _malformed_json(verdict, malformed, bare=bare)
    elif bare:
        content = json.dumps(verdict, ensure_ascii=False)
    else:
        content = _fence(json.dumps(verdict, ensure_ascii=False, indent=2))
    start = content.find("{")
    return content, start + max(1, (len(content) - start) // 2)


def render_score_tag(score: Any, malformed: MalformedKind | None) -> tuple[str, int]:
    """Three reasoning steps, then ``Score- <score>N</score>``; a malformed kind breaks the tag.

    Args:
        score: The score, 1..5 (anything else is written as it is).
        malformed: How to break the tag, or None for a valid one.

    Returns:
        The content, and where a truncated reply is cut (just after ``<score>``).
    """
    in_scale = isinstance(score, int) and not isinstance(score, bool) and 1 <= score <= 5
    found = "Some pieces" if not in_scale else "No piece" if score == 5 else f"{5 - score} piece(s)"
    extent = _REC_EXTENT[score] if in_scale else "to some extent"
    body = (
        "1. I check each claim of the recommendation explanation summary against the query, "
        "product title, prices and opinion summary.\n"
        f"2. {found} of information could not be verified from the input.\n"
        f"3. The summary follows the Faithfulness metric {extent}.\n"
    )
    if malformed in ("prose_around", "trailing_comma"):
        return f"{body}Score- {score} out of 5", len(body)
    if malformed in ("missing_brace", "unescaped_quote"):
        return f"{body}Score- <score>{score}", len(body)
    if malformed is not None:
        return f"{body}Score- <score>None</score>", len(body)
    return f"{body}Score- <score>{score}</score>", len(body) + len("Score- <score>")


def render_text(model: str, score: Any) -> tuple[str, int]:
    """One sentence for a prompt in no judge format; a malformed fault leaves it as it is.

    Args:
        model: The requested model, named in the sentence.
        score: The simulated score.

    Returns:
        The content, and where a truncated reply is cut (half-way).
    """
    text = f"judge-sim ({model}): no judge prompt recognised; simulated score {score}."
    return text, len(text) // 2


def _fence(verdict_json: str) -> str:
    return f"{_TEXT_PREAMBLE}\n\n```json\n{verdict_json}\n```"


def _malformed_json(verdict: dict[str, Any], kind: MalformedKind, *, bare: bool) -> str:
    if kind == "python_literals" and not _has_literal(verdict):
        kind = "trailing_comma"
    # The longest text is an explanation, not an id or an enum, so only the syntax breaks.
    texts = [(len(value), key) for key, value in verdict.items() if isinstance(value, str)]
    text_key = max(texts)[1] if texts else None
    if kind == "unescaped_quote" and text_key is None:
        kind = "trailing_comma"
    if kind == "prose_around":
        return f"Sure, here is my verdict: {json.dumps(verdict, ensure_ascii=False)} Hope it helps."
    if kind == "single_quotes":
        body = _dump(verdict, quote="'", indent=not bare)
    elif kind == "python_literals":
        body = _dump(verdict, python=True, indent=not bare)
    elif kind == "unescaped_quote":
        assert text_key is not None
        body = _dump({**verdict, text_key: _PLACEHOLDER}, indent=not bare)
        escaped = json.dumps(verdict[text_key], ensure_ascii=False)[:-1]
        body = body.replace(json.dumps(_PLACEHOLDER), f'{escaped}{_UNESCAPED}"')
    else:
        body = _dump(verdict, indent=not bare)
        closing = body.rindex("}")
        head = body[:closing].rstrip()
        body = head if kind == "missing_brace" else head + (",\n}" if not bare else ",}")
    return body if bare else _fence(body)


def _has_literal(value: Any) -> bool:
    if isinstance(value, dict):
        return any(_has_literal(item) for item in value.values())
    if isinstance(value, list):
        return any(_has_literal(item) for item in value)
    return value is None or isinstance(value, bool)


def _dump(value: Any, *, quote: str = '"', python: bool = False, indent: bool = False) -> str:
    """JSON-like text with a choice of string quote and of literal spelling."""
    if isinstance(value, dict):
        items = [f"{_quoted(str(key), quote)}: {_dump(item, quote=quote, python=python)}"
                 for key, item in value.items()]
        return "{\n  " + ",\n  ".join(items) + "\n}" if indent and items else (
            "{" + ", ".join(items) + "}")
    if isinstance(value, list):
        return "[" + ", ".join(_dump(item, quote=quote, python=python) for item in value) + "]"
    if isinstance(value, str):
        return _quoted(value, quote)
    if value is None:
        return "None" if python else "null"
    if isinstance(value, bool):
        return str(value) if python else str(value).lower()
    return json.dumps(value)


def _quoted(text: str, quote: str) -> str:
    if quote == '"':
        return json.dumps(text, ensure_ascii=False)
    escaped = text.replace("\\", "\\\\").replace("'", "\\'").replace("\n", "\\n")
    return f"'{escaped}'"
