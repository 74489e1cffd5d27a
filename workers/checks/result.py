"""What a check comes to: a score with its reason, or a named failure. Pure."""

from __future__ import annotations

from dataclasses import dataclass

#: Error class of a check whose value (or reference) the sample lacks.
MISSING_INPUT = "missing_input"

#: Error class of a schema check that recursed past Python's limit (a ``$ref`` cycle
#: that never moves into the document, or a document nested that deep).
SCHEMA_RECURSION = "schema_recursion"

#: Error class of a schema check whose ``$ref`` does not resolve within the schema.
SCHEMA_REF = "schema_ref"

#: Error class of a value too large for the check to read (a schema check).
TOO_LARGE = "too_large"

#: Error class of a trajectory check of a sample that carries no trajectory.
NO_TRAJECTORY = "no_trajectory"

#: Error class of a ``tool_arguments`` check whose offered tool has a schema a worker
#: must not use (nested too deep, a remote ``$ref``, not a JSON Schema).
BAD_TOOL_SCHEMA = "bad_tool_schema"

#: Error class of a team check that raised; the error names the exception class.
CHECK_RAISED = "check_raised"

#: Error class of a team check that ran past its time limit (its process was killed).
CHECK_TIMEOUT = "check_timeout"

#: Error class of a team check whose answer is not a score on its scale with a reason.
CHECK_OFF_SCALE = "check_off_scale"

#: Error class of a team check the worker cannot find (not installed, no such function).
CHECK_NOT_FOUND = "check_not_found"

#: Error class of a team check whose process died (exit, signal) while it ran.
CHECK_CRASHED = "check_crashed"

#: Longest reason kept, in characters (a validator's message may quote a huge value).
MAX_REASON_CHARS = 500


@dataclass(frozen=True, slots=True)
class CheckResult:
    """One check of one sample. Build with :meth:`scored` or :meth:`failure`."""

    score: bool | float | None
    """The raw score (a pass is ``True``); None for a failure."""
    reason: str
    """Why: what passed or failed, or what went wrong."""
    error_class: str | None = None
    """Set when the check could not give a score: its verdict is ``failed``."""

    @classmethod
    def scored(cls, score: bool | float, reason: str) -> CheckResult:
        """The check ran and gave ``score``."""
        return cls(score, _short(reason))

    @classmethod
    def failure(cls, error_class: str, error: str) -> CheckResult:
        """The check could not give a score."""
        return cls(None, _short(error), error_class)


def _short(text: str) -> str:
    if len(text) <= MAX_REASON_CHARS:
        return text
    return text[:MAX_REASON_CHARS - 1] + "…"
