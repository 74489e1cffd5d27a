"""Decoding JSON text from outside without letting its nesting reach the stack. Pure.

``json.loads`` recurses once per level of nesting: 5,000 opening brackets raise
``RecursionError``, which no caller expects from a parser. :func:`loads` first
measures the nesting with one linear pass over the text (a regular expression that
skips over strings whole, so brackets inside strings do not count) and refuses text
nested deeper than asked before ``json.loads`` sees it.

:func:`loads_strict` does the same with orjson, several times faster, where its
stricter reading is wanted or harmless: it refuses ``NaN`` and the infinities and lone
surrogate escapes, and reads integers wider than 64 bits as floats. orjson also has a
depth limit of its own (it raises ``JSONDecodeError``, never ``RecursionError``), but
at 1,024 levels; the pre-scan keeps this module's limit and its error naming the key.
"""

from __future__ import annotations

import json
import re
from typing import Any

import orjson

#: Deepest nesting any JSON text from outside may have, in levels; far enough below
#: Python's recursion limit (1,000 frames) for a call made from deep in a stack.
HARD_MAX_DEPTH = 256

# A string (to its closing quote, or to the end when unterminated, so the engine never
# retries inside it) or one bracket. Possessive quantifiers: no backtracking.
_TOKEN = re.compile(r'"(?:[^"\\]++|\\.)*+(?:"|\\?\Z)|[\[\]{}]', re.DOTALL)
_TOKEN_BYTES = re.compile(rb'"(?:[^"\\]++|\\.)*+(?:"|\\?\Z)|[\[\]{}]', re.DOTALL)

# The same with the separators, for splitting an array into its items.
_ITEM_TOKEN = re.compile(rb'"(?:[^"\\]++|\\.)*+(?:"|\\?\Z)|[\[\]{},:]', re.DOTALL)


class JsonTooDeep(ValueError):
    """JSON text nested deeper than allowed.

    Attributes:
        depth: The limit that was passed.
        offset: Where in the text the limit was passed.
        key: The last key of the outermost object read before that point (the field
            holding the deep value), when the text is an object.
    """

    def __init__(self, *, depth: int, offset: int, key: str | None = None) -> None:
        self.depth = depth
        self.offset = offset
        self.key = key
        super().__init__(f"nested deeper than {depth} levels (at offset {offset})")


def check_depth(text: str | bytes, *, max_depth: int = HARD_MAX_DEPTH) -> None:
    """Raise when ``text`` opens more than ``max_depth`` brackets at once. Linear time.

    Args:
        text: JSON text (need not be valid JSON).
        max_depth: Most levels of ``[``/``{`` open at one time.

    Raises:
        JsonTooDeep: At the first bracket past the limit.
    """
    opening = (b"[", b"{") if isinstance(text, bytes) else ("[", "{")
    if text.count(opening[0]) + text.count(opening[1]) <= max_depth:  # type: ignore[arg-type]
        return  # too few brackets to nest that deep: no need to scan
    pattern = _TOKEN_BYTES if isinstance(text, bytes) else _TOKEN
    opens: Any = b"[{" if isinstance(text, bytes) else "[{"
    closes: Any = b"]}" if isinstance(text, bytes) else "]}"
    depth = 0
    key: str | bytes | None = None
    for match in pattern.finditer(text):  # type: ignore[arg-type]
        token = match.group(0)
        if len(token) != 1:
            if depth == 1:
                key = token
            continue
        if token in opens:
            depth += 1
            if depth > max_depth:
                raise JsonTooDeep(depth=max_depth, offset=match.start(), key=_key_name(key))
        elif token in closes and depth:
            depth -= 1


def _key_name(token: str | bytes | None) -> str | None:
    if token is None:
        return None
    if isinstance(token, bytes):
        token = token.decode("utf-8", "replace")
    try:
        name = json.loads(token[:258])
    except ValueError:
        return None
    return name if isinstance(name, str) and name.isidentifier() else None


def loads(text: str | bytes, *, max_depth: int = HARD_MAX_DEPTH, **kwargs: Any) -> Any:
    """``json.loads`` that refuses text nested deeper than ``max_depth``.

    Args:
        text: JSON text.
        max_depth: Most levels of nesting (capped at :data:`HARD_MAX_DEPTH`).
        **kwargs: Passed to ``json.loads`` (``parse_constant``, ``object_pairs_hook``).

    Returns:
        The decoded value.

    Raises:
        JsonTooDeep: For text nested too deep (a ``ValueError``).
        ValueError: For text that is not JSON (``json.JSONDecodeError``,
            ``UnicodeDecodeError``).
    """
    check_depth(text, max_depth=min(max_depth, HARD_MAX_DEPTH))
    return json.loads(text, **kwargs)


def loads_strict(text: str | bytes, *, max_depth: int = HARD_MAX_DEPTH) -> Any:
    """:func:`loads` by orjson, for strict JSON (see the module docstring for how it
    differs); the arguments, result and errors are those of :func:`loads`, a
    ``json.JSONDecodeError`` being orjson's."""
    check_depth(text, max_depth=min(max_depth, HARD_MAX_DEPTH))
    return orjson.loads(text)


def split_items(text: bytes, *, key: bytes | None = None) -> list[bytes] | None:
    """The raw text of each item of a JSON array, without decoding them. Linear time.

    Lets a caller decode items one by one, so one item nested too deep is refused on
    its own and the others go on.

    Args:
        text: JSON text: an array, or (with ``key``) an object ``{key: [...]}``.
        key: The one key of the wrapping object, e.g. ``b"samples"``.

    Returns:
        The items' raw text, or None when ``text`` is not of that shape.
    """
    body = text.strip()
    if key is not None:
        head = re.match(rb'\{\s*"' + re.escape(key) + rb'"\s*:\s*', body)
        if head is None or not body.endswith(b"}"):
            return None
        body = body[head.end():-1].rstrip()
    if not (body.startswith(b"[") and body.endswith(b"]")):
        return None
    items: list[bytes] = []
    depth, start = 0, 1
    for match in _ITEM_TOKEN.finditer(body):
        token = match.group(0)
        if token in (b"[", b"{"):
            depth += 1
        elif token in (b"]", b"}"):
            depth -= 1
            if depth == 0 and match.end() != len(body):
                return None
        elif token == b"," and depth == 1:
            items.append(body[start:match.start()])
            start = match.end()
    if depth != 0:
        return None
    last = body[start:-1]
    if last.strip() or items:
        items.append(last)
    return items
