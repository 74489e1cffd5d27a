"""Reading span attribute values, shared by the sample mapping and the trajectory. Pure."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from evalfleet.core import jsontext

# ``prefix.N.rest``: the shortest prefix followed by an index (so
# ``llm.output_messages.0.message.tool_calls.1.tool_call.id`` is message 0's).
_INDEXED = re.compile(r"([a-z_.]+?)\.(\d{1,6})\.(.+)")


def indexed(attributes: Mapping[str, Any],
            prefixes: Sequence[str]) -> dict[str, list[dict[str, Any]]]:
    """``prefix.N.rest`` attributes as one list of ``{rest: value}`` per prefix, by N."""
    wanted = set(prefixes)
    grouped: dict[str, dict[int, dict[str, Any]]] = {}
    for key, value in attributes.items():
        match = _INDEXED.fullmatch(key)
        if match is not None and match.group(1) in wanted:
            prefix, index, rest = match.groups()
            grouped.setdefault(prefix, {}).setdefault(int(index), {})[rest] = value
    return {prefix: [items[n] for n in sorted(items)] for prefix, items in
            ((p, grouped.get(p, {})) for p in prefixes)}


def json_value(raw: Any) -> Any:
    """A JSON string decoded (nesting bounded); structured values as they are; text
    that is not JSON as it is, or None when it looks like broken JSON."""
    if not isinstance(raw, str):
        return raw
    try:
        return jsontext.loads_strict(raw)
    except ValueError:
        return raw if not raw.lstrip().startswith(("[", "{")) else None


def as_list(value: Any) -> list[Any]:
    """``value`` when it is a list, else an empty one."""
    return value if isinstance(value, list) else []


def text(value: Any) -> str | None:
    """``value`` when it is a string that is not blank, else None."""
    return value if isinstance(value, str) and value.strip() else None
