"""Find candidate JSON verdicts in a judge's reply. Pure.

A judge's reply is prose, code fences, reasoning blocks and, somewhere, a JSON
object. The scan walks the text once and returns every top-level ``{...}`` or
``[...]`` region, matching brackets the way a JSON reader would: braces inside
strings do not count, including strings with unescaped inner quotes, single
quotes or smart quotes, which judges write often. A region that never closes is
reported, because a reply cut inside its verdict must never be completed.

Reasoning blocks (``<think>...</think>``) are skipped: drafts in them are not
verdicts. Tags inside a JSON string are text, so a judge's comment that mentions
``<think>`` does not hide the verdict around it.

The scan also reads each object's keys and raw value texts, to catch a key
given twice with different values (which a JSON reader would silently resolve
by keeping the last one) and to let the caller check numbers a repair library
produced against what the judge actually wrote.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from typing import Any

from json_repair import repair_json

_THINK_TAG = re.compile(r"<\s*(/?)\s*think\s*>", re.IGNORECASE)
_THINK_OPEN = re.compile(r"<\s*think\s*>", re.IGNORECASE)
_THINK_CLOSE = re.compile(r"<\s*/\s*think\s*>", re.IGNORECASE)
_DEPTH0 = re.compile(r"[{\[]|<\s*think\s*>|<\s*/\s*think\s*>", re.IGNORECASE)
_COMMENT = re.compile(r"//[^\n]*|/\*.*?(?:\*/|$)", re.DOTALL)

#: Closing quote characters for each opening one. Smart quotes close each other
#: because judges (and keyboards) mix them up.
_CLOSERS = {'"': '"', "'": "'", "\u201c": "\u201d\u201c", "\u201d": "\u201d\u201c"}

#: Characters after which a single quote opens a string; elsewhere it is an apostrophe.
_VALUE_START = "{[,:"

#: Nesting down to which object members are recorded (keys, values as written,
#: duplicates); deeper ones are still matched, not recorded.
_MAX_PAIR_DEPTH = 32


@dataclass(frozen=True)
class DuplicateKey:
    """A key given twice in one object with different values."""

    key: str
    """The repeated key."""

    first: str
    """The first value, as written."""

    second: str
    """The differing later value, as written."""


@dataclass(frozen=True)
class Region:
    """One balanced top-level ``{...}`` or ``[...]`` in the reply."""

    start: int
    """Offset of the opening bracket."""

    end: int
    """Offset just past the closing bracket."""

    text: str
    """The region's text, brackets included."""

    pairs: dict[str, str] = field(default_factory=dict)
    """For an object: each top-level key and its value as written (the last one if repeated)."""

    duplicate: DuplicateKey | None = None
    """The first key, at any depth, repeated with a different value."""

    depth: int = 1
    """How deeply brackets nest in it (``{}`` is 1, ``{"a": []}`` is 2)."""


@dataclass(frozen=True)
class JsonScan:
    """What a scan of a reply found."""

    regions: tuple[Region, ...]
    """Closed candidate regions, in order."""

    truncated: bool
    """The reply ends inside an object that never closes."""

    visible: bool
    """Some non-whitespace text lies outside reasoning blocks."""


def strip_think(text: str) -> str:
    """The reply without reasoning blocks.

    ``<think>...</think>`` blocks (tags case-insensitive) are removed; an unclosed
    ``<think>`` removes the rest of the text. A closing tag with no opening tag
    means the reasoning began before the reply (chat templates that open it in the
    prompt), so everything before it is removed too.

    Args:
        text: The judge's reply.

    Returns:
        The text outside reasoning blocks.
    """
    kept: list[str] = []
    pos = 0
    inside = False
    for tag in _THINK_TAG.finditer(text):
        closing = bool(tag.group(1))
        if inside and closing:
            inside, pos = False, tag.end()
        elif not inside and closing:
            kept, pos = [], tag.end()
        elif not inside:
            kept.append(text[pos:tag.start()])
            inside = True
    if not inside:
        kept.append(text[pos:])
    return "".join(kept)


def scan_json(text: str) -> JsonScan:
    """Find the candidate JSON regions of a reply.

    Args:
        text: The judge's reply.

    Returns:
        The closed regions outside reasoning blocks, whether the reply ends inside
        an unclosed object, and whether anything is visible at all.
    """
    regions: list[Region] = []
    visible = False
    pos = 0
    while True:
        match = _DEPTH0.search(text, pos)
        stop = match.start() if match else len(text)
        visible = visible or bool(text[pos:stop].strip())
        if match is None:
            return JsonScan(tuple(regions), truncated=False, visible=visible)
        token = match.group()
        if token in "{[":
            outcome = _read_region(text, match.start())
            if isinstance(outcome, Region):
                regions.append(outcome)
                visible = True
                pos = outcome.end
                continue
            if isinstance(outcome, _ReasoningEnd):
                regions, visible, pos = [], False, outcome.end
                continue
            # Unclosed. An array of plain words ("[A") that never closes cannot hold a
            # verdict, and nothing after it can either unless an object opens there.
            truncated = "{" in text[match.start():]
            return JsonScan(tuple(regions), truncated=truncated, visible=True)
        if _THINK_OPEN.fullmatch(token):
            closing = _THINK_CLOSE.search(text, match.end())
            if closing is None:
                return JsonScan(tuple(regions), truncated=False, visible=visible)
            pos = closing.end()
        else:
            regions, visible, pos = [], False, match.end()


def scan_strict_object(text: str) -> JsonScan | None:
    """The scan of a reply that is one strict JSON object, read at the JSON decoder's speed.

    Most replies are exactly that (a judge asked for a JSON response format), and for
    them :func:`scan_json` finds the same single region: strict JSON has no comments,
    no bare quotes and no unescaped quote inside a string, and reasoning tags inside
    its strings are text. The region carries no ``pairs``: those serve only text a
    repair library reads, and strict JSON is decoded without one.

    Args:
        text: The judge's reply.

    Returns:
        The scan, or None when the reply is anything else (then use :func:`scan_json`).
    """
    body = text.strip()
    if not body.startswith("{"):
        return None
    try:
        value = json.loads(body)
    except (ValueError, RecursionError):
        return None
    start = len(text) - len(text.lstrip())
    region = Region(start=start, end=start + len(body), text=body, depth=_nesting(value))
    return JsonScan((region,), truncated=False, visible=True)


def _nesting(value: Any) -> int:
    """How deeply containers nest in a decoded value, as :attr:`Region.depth` counts."""
    depth, level = 0, [value]
    while level:
        depth += 1
        level = [inner for item in level
                 for inner in (item.values() if isinstance(item, dict) else item)
                 if isinstance(inner, dict | list)]
    return depth


def object_pairs(text: str) -> dict[str, str]:
    """The top-level keys and raw values of the first object region in ``text``.

    Args:
        text: Text holding a JSON-like object (a region, a nested value...).

    Returns:
        Key to value as written; empty when there is no closed object.
    """
    start = text.find("{")
    if start < 0:
        return {}
    outcome = _read_region(text, start)
    return outcome.pairs if isinstance(outcome, Region) else {}


def same_value(first: Any, second: Any) -> bool:
    """Whether two decoded JSON values are the same value.

    Numbers compare by value (``1`` and ``1.0`` are the same), but a boolean is
    never the same as a number, and NaN is the same as nothing.

    Args:
        first: A decoded value.
        second: Another decoded value.

    Returns:
        True when they are equal in the JSON sense.
    """
    if isinstance(first, bool) or isinstance(second, bool):
        return type(first) is type(second) and first == second
    if isinstance(first, int | float) and isinstance(second, int | float):
        return not (math.isnan(first) or math.isnan(second)) and first == second
    if isinstance(first, dict) and isinstance(second, dict):
        return first.keys() == second.keys() and all(
            same_value(first[key], second[key]) for key in first
        )
    if isinstance(first, list) and isinstance(second, list):
        return len(first) == len(second) and all(map(same_value, first, second))
    return type(first) is type(second) and first == second


def raw_value(text: str) -> Any:
    """Decode one value as written in a region (``0.8``, ``'x'``, ``True``...).

    Args:
        text: The value's text, without the key.

    Returns:
        The decoded value, or the bare text (comments removed) when it is no JSON value.
    """
    bare = _COMMENT.sub("", text).strip()
    try:
        return json.loads(bare)
    except (ValueError, RecursionError):
        pass
    literals = {"True": True, "False": False, "None": None}
    if bare in literals:
        return literals[bare]
    if len(bare) >= 2 and bare[0] in _CLOSERS and bare[-1] in _CLOSERS[bare[0]]:
        return bare[1:-1]
    if bare[:1] in ("{", "["):
        try:
            return repair_json(bare, return_objects=True)
        except Exception:  # the library's failure modes are not a documented set
            return bare
    return bare


@dataclass
class _Frame:
    opener: str
    pairs: list[tuple[str, str]] = field(default_factory=list)
    key_start: int | None = None
    key: str | None = None
    value_start: int | None = None


@dataclass(frozen=True)
class _ReasoningEnd:
    end: int


def _read_region(text: str, start: int) -> Region | _ReasoningEnd | None:
    """Match the bracket at ``start``; None when it never closes. Linear time."""
    frames = [_new_frame(text[start], start)]
    # Open frames per bracket type: a closer with no opener of its type is ignored in
    # O(1), where a search of the stack made "[" * n + "}" * n quadratic.
    open_count = {"{": 0, "[": 0}
    open_count[text[start]] += 1
    depth = 1
    duplicate: DuplicateKey | None = None
    quote: str | None = None
    last = text[start]
    i = start + 1
    while i < len(text):
        char = text[i]
        if quote is not None:
            if char == "\\":
                i += 2
                continue
            if char in quote and _closes_string(text, i + 1):
                quote, last = None, '"'
            i += 1
            continue
        if char.isspace():
            i += 1
            continue
        if char == "\\":  # an escaped quote in a double-encoded reply is not a string
            i, last = i + 2, char
            continue
        if char == "/" and text.startswith(("//", "/*"), i):
            comment = _COMMENT.match(text, i)
            i = comment.end() if comment else i + 2
            continue
        if char == "<" and (closing := _THINK_CLOSE.match(text, i)):
            return _ReasoningEnd(closing.end())
        if char in _CLOSERS and (char != "'" or last in _VALUE_START):
            top = frames[-1]
            if top.opener == "{" and top.value_start is not None and last not in _VALUE_START:
                # A string right after a finished value: a member whose comma is missing.
                _object_punctuation(top, ",", text, i - 1, keep=len(frames) <= _MAX_PAIR_DEPTH)
            quote, last = _CLOSERS[char], char
            i += 1
            continue
        if char in "{[":
            frames.append(_new_frame(char, i))
            open_count[char] += 1
            depth = max(depth, len(frames))
        elif char in "}]":
            closed = _close_frames(frames, "{" if char == "}" else "[", text, i,
                                   open_count=open_count)
            for frame in closed:
                # Only the first duplicate is reported; checking deeper frames once one
                # is found would only cost time.
                if duplicate is None and len(frames) < _MAX_PAIR_DEPTH:
                    duplicate = _duplicate_in(frame)
            if not frames:
                return Region(
                    start=start, end=i + 1, text=text[start:i + 1],
                    pairs=dict(closed[-1].pairs) if closed[-1].opener == "{" else {},
                    duplicate=duplicate, depth=depth,
                )
        elif frames[-1].opener == "{":
            _object_punctuation(frames[-1], char, text, i,
                                keep=len(frames) <= _MAX_PAIR_DEPTH)
        last = char
        i += 1
    return None


def _new_frame(opener: str, at: int) -> _Frame:
    return _Frame(opener=opener, key_start=at + 1 if opener == "{" else None)


def _close_frames(frames: list[_Frame], opener: str, text: str, at: int, *,
                  open_count: dict[str, int]) -> list[_Frame]:
    """Pop the frames a closing bracket ends, innermost first.

    A closer whose opener is deeper in the stack also closes the frames above it
    (``{"a": [1, 2}``); a closer with no opener at all is ignored.
    """
    if not open_count[opener]:
        return []
    closed = []
    while True:
        frame = frames.pop()
        open_count[frame.opener] -= 1
        _end_value(frame, text, at, keep=len(frames) < _MAX_PAIR_DEPTH)
        closed.append(frame)
        if frame.opener == opener:
            return closed


def _object_punctuation(frame: _Frame, char: str, text: str, at: int, *,
                        keep: bool = True) -> None:
    if char == ",":
        _end_value(frame, text, at, keep=keep)
        frame.key_start = at + 1
    elif char == ":" and frame.key is None and frame.key_start is not None:
        frame.key = _clean_key(text[frame.key_start:at]) if keep else ""
        frame.value_start = at + 1


def _end_value(frame: _Frame, text: str, at: int, *, keep: bool) -> None:
    # Deep frames keep no values: each would copy the text of every frame inside it,
    # quadratic in the nesting. Verdicts nest a few levels; their pairs are all kept.
    if keep and frame.key is not None and frame.value_start is not None:
        frame.pairs.append((frame.key, text[frame.value_start:at].strip()))
    frame.key = frame.value_start = frame.key_start = None


def _clean_key(text: str) -> str:
    return _COMMENT.sub("", text).strip().replace("\\", "").strip("\"'\u201c\u201d").strip()


def _duplicate_in(frame: _Frame) -> DuplicateKey | None:
    seen: dict[str, str] = {}
    for key, value in frame.pairs:
        if key in seen and seen[key] != value and not same_value(
            raw_value(seen[key]), raw_value(value),
        ):
            return DuplicateKey(key=key, first=seen[key], second=value)
        seen.setdefault(key, value)
    return None


def _closes_string(text: str, after: int) -> bool:
    """Whether a quote character just before ``after`` ends the string.

    Judges leave quotes unescaped inside strings (``"he said "no" twice"``). A
    quote closes a string only where JSON could go on: before ``,`` ``:`` ``}``
    ``]``, a comment, the end of the text, or a new line that starts another
    string (a missing comma between two members).
    """
    i = after
    newline = False
    while i < len(text) and text[i].isspace():
        newline = newline or text[i] == "\n"
        i += 1
    if i == len(text) or text[i] in ",:}]" or text.startswith(("//", "/*"), i):
        return True
    return newline and text[i] in _CLOSERS
