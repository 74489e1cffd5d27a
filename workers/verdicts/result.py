"""What parsing a judge reply yields: a verdict, or a failure as a value."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

#: Why a reply could not be used. ``empty``: nothing but whitespace or reasoning;
#: ``truncated``: cut off (``finish_reason == "length"`` or it ends inside the
#: verdict); ``no_verdict``: no candidate verdict in the text; ``schema``: every
#: candidate broke the metric's schema (missing key, wrong type, out of range,
#: non-finite, boolean as number, duplicate key, id mismatch...); ``ambiguous``:
#: two different valid verdicts.
ParseErrorClass = Literal["empty", "truncated", "no_verdict", "schema", "ambiguous"]

RawValue = float | int | bool | str | None


@dataclass(frozen=True)
class Verdict:
    """A verdict that passed the metric's schema."""

    fields: dict[str, RawValue]
    """Every verdict field, coerced to its declared type."""

    scores: dict[str, float | None]
    """Stored scores by name, normalised to 0..1 (None where the schema allows null)."""

    raw_scores: dict[str, RawValue]
    """The same scores on the judge's own scale (``reasoning_score: 4``, ``is_correct: true``)."""

    reason: str | None
    """The judge's explanation, if it gave one."""

    judge_failure: bool = False
    """The judge declared it could not evaluate (seed 004 ``evaluation_status: failed``)."""

    notes: tuple[str, ...] = ()
    """Annotations that were missing or off-spec (``field 'error_type': "typo" is not one
    of ...``): kept as written, never a reason to reject the verdict."""


@dataclass(frozen=True)
class ParseFailure:
    """A reply that yields no usable verdict. Never replaced by a default score."""

    error_class: ParseErrorClass
    """The kind of failure, counted per class."""

    message: str
    """What is wrong, precise enough to quote back to the judge in a re-ask."""

    details: list[str] = field(default_factory=list)
    """One line per rejected candidate, for the stored error."""


ParseResult = Verdict | ParseFailure

