"""Judge replies in, verdicts out: the parser and what the judge is asked for.

Pure code, no I/O. :func:`parse_verdict` reads a reply under a metric's output
spec and returns a :class:`Verdict` or a :class:`ParseFailure` (never raises);
:func:`response_format_for` builds the constrained-output request;
:func:`reask_prompt` the follow-up message after a failure.
"""

from workers.verdicts.parser import parse_verdict
from workers.verdicts.reask import reask_prompt
from workers.verdicts.result import ParseErrorClass, ParseFailure, ParseResult, RawValue, Verdict
from workers.verdicts.schema import response_format_for, verdict_schema

__all__ = [
    "ParseErrorClass",
    "ParseFailure",
    "ParseResult",
    "RawValue",
    "Verdict",
    "parse_verdict",
    "reask_prompt",
    "response_format_for",
    "verdict_schema",
]
