"""Regular expressions from configuration, compiled for linear time. Pure.

Patterns an operator writes (redaction kinds, ``where`` conditions of the sampling
config, the pattern checks of a metric file) run over production text. Python's ``re``
backtracks, so a pattern such as ``(\\w+\\s?)+$`` takes exponential time on the wrong
input. These are compiled with RE2 (``google-re2``), whose matching time is linear in
the text whatever the pattern; the price is that RE2 has no lookaround and no
backreferences, and a pattern using them is refused at load, with a message saying so.
"""

from __future__ import annotations

from typing import Any, Protocol

import re2  # type: ignore[import-untyped]


class LinearPattern(Protocol):
    """The part of a compiled pattern evalfleet uses (``re`` and RE2 both have it)."""

    def sub(self, repl: Any, string: str) -> str:
        """Replace every match."""

    def search(self, string: str) -> Any:
        """The first match, or None."""

    def fullmatch(self, string: str) -> Any:
        """A match of the whole string, or None."""

    def finditer(self, string: str) -> Any:
        """Every match, in order."""


def compile_linear(source: str) -> LinearPattern:
    """Compile ``source`` with RE2.

    Args:
        source: A regular expression (RE2 syntax: Python's without lookaround and
            backreferences).

    Returns:
        The compiled pattern.

    Raises:
        ValueError: When RE2 cannot compile it, with RE2's reason.
    """
    options = re2.Options()
    options.log_errors = False
    try:
        return re2.compile(source, options)
    except re2.error as exc:
        reason = exc.args[0].decode() if exc.args and isinstance(exc.args[0], bytes) else exc
        raise ValueError(f"{reason} (patterns run in linear time with RE2, which has no "
                         "lookaround and no backreferences)") from None
