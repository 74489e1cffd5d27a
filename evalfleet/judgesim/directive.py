"""Verdict overrides written into a prompt, so tests and load tests can script drops::

    [[judge-sim faithfulness=0.2 answer_relevance=0.9]]

A directive may appear anywhere in the prompt. Values are read as JSON scalars
(``0.2``, ``true``, ``null``, ``"two words"``); anything else is taken as a
bare string.
"""

from __future__ import annotations

import json
import re
from typing import Any

_DIRECTIVE = re.compile(r"\[\[judge-sim\b(.*?)\]\]", re.S)
_ASSIGNMENT = re.compile(r'([A-Za-z_][\w.-]*)=("(?:[^"\\]|\\.)*"|[^\s"]+)')


def parse_directives(text: str) -> dict[str, Any]:
    """The verdict overrides written as ``[[judge-sim key=value ...]]`` in ``text``.

    Args:
        text: The prompt text.

    Returns:
        Verdict keys and their values; a later directive wins over an earlier one.
    """
    overrides: dict[str, Any] = {}
    if "[[judge-sim" not in text:
        return overrides
    for directive in _DIRECTIVE.finditer(text):
        for key, raw in _ASSIGNMENT.findall(directive.group(1)):
            overrides[key] = _scalar(raw)
    return overrides


def _scalar(raw: str) -> Any:
    try:
        value = json.loads(raw)
    except ValueError:
        return raw
    return value if not isinstance(value, dict | list) else raw
