"""Read a score-tag verdict (``Score- <score>4</score>``) from a judge's reply. Pure.

The judge explains, then ends with the score in a tag. Its reply also tends to
repeat the prompt: the rubric lines (``<score>4</score> - The summary contains
only one...``), the format example (``e.g Score- <score>5</score>``), tags in
backticks or quotes. Those are not scores and are skipped. Tags introduced by
the metric's label (``Score-``) win over bare ones; two different labelled
scores are ambiguous, never averaged or picked from.

A reply with no tag at all whose last line is the label and a number
(``Score- 4``) is read as that score: the judge gave it plainly, and re-asking
would cost a second call for the same answer. Only then: where any tag appears,
the tags decide.
"""

from __future__ import annotations

import re
from bisect import bisect_left, bisect_right
from dataclasses import dataclass

from evalfleet.core.metric import Metric
from evalfleet.core.sample import Sample
from workers.verdicts.coerce import coerce_verdict, fold_digits
from workers.verdicts.result import ParseFailure, Verdict
from workers.verdicts.scan import strip_think

_CODE = re.compile(r"```.*?```|`[^`\n]*`", re.DOTALL)
#: Words that introduce an example score rather than give one, as the prompt does
#: ("e.g Score- <score>5</score>", "following the format: Score- <score>5</score>").
_EXAMPLE_CUE = re.compile(
    r"(?:\be\.?\s?g\b\.?|\bfor (?:example|instance)|\bsuch as|\bformat\s*:)\s*[,:]?\s*$",
    re.IGNORECASE,
)
_RUBRIC_PREFIX = re.compile(r"[\s>]*")
_RUBRIC_SUFFIX = re.compile(r"[ \t]*[-\u2013\u2014][ \t]+\S")
_DIGIT = re.compile(r"[0-9]")
_LAYOUT_CHAR = re.compile('[\n"\u201c\u201d]')

#: Characters of a tag's line read on either side of it.
_WINDOW = 200

#: Longest last line read as a plain ``Score- N`` line, in characters.
_MAX_SCORE_LINE = 80
_OPEN_QUOTES = "\"'\u201c\u2018\u00ab"
_CLOSE_QUOTES = "\"'\u201d\u2019\u00bb"


@dataclass(frozen=True)
class _Tag:
    start: int
    """Where the tag, or the label in front of it, begins."""

    end: int
    value: str
    labelled: bool


def parse_score_tag(text: str, *, metric: Metric, sample: Sample) -> Verdict | ParseFailure:
    """Find the one score tag that is the judge's verdict.

    Args:
        text: The judge's reply (finish reason already checked).
        metric: A metric with a ``score_tag`` output.
        sample: The judged sample.

    Returns:
        The verdict (reason: the text before the final tag), or the failure:
        ``empty``, ``truncated``, ``no_verdict``, ``schema`` or ``ambiguous``.
    """
    output = metric.spec.output
    visible = strip_think(text)
    if not visible.strip():
        return ParseFailure("empty", "the reply is empty apart from reasoning")
    label = _label_pattern(output.label)
    if _ends_inside_tag(visible, tag=output.tag, label=label):
        return ParseFailure("truncated", f"the reply ends inside a <{output.tag}> tag")
    found = _find_tags(visible, tag=output.tag, label=label)
    if not found and label is not None and not _mentions_tag(visible, tag=output.tag):
        plain = _plain_score_line(visible, label=output.label or "")
        if plain is not None:
            return _verdict(plain, reason=visible[:plain.start], metric=metric, sample=sample)
    layout = _Layout.of(visible) if found else None
    tags = [tag for tag in found if layout is not None and _counts(tag, visible, layout)]
    counted = [tag for tag in tags if tag.labelled] or tags
    if not counted:
        where = " outside text quoted from the prompt" if found else ""
        return ParseFailure(
            "no_verdict", f"the reply has no <{output.tag}>N</{output.tag}> score{where}",
        )
    values = {_comparable(tag.value) for tag in counted}
    if len(values) > 1:
        shown = " and ".join(sorted(tag.value.strip() for tag in _first_of_each(counted)))
        return ParseFailure("ambiguous", f"the reply gives different scores: {shown}")
    final = counted[-1]
    return _verdict(final, reason=visible[:final.start], metric=metric, sample=sample)


def _verdict(final: _Tag, *, reason: str, metric: Metric, sample: Sample) -> Verdict | ParseFailure:
    """The verdict a chosen score makes; the text before it is the reason."""
    (field,) = metric.spec.output.fields
    outcome = coerce_verdict({field: _tag_value(final.value)}, metric=metric, sample=sample)
    if not isinstance(outcome, Verdict):
        return ParseFailure("schema", "; ".join(outcome))
    return Verdict(
        fields=outcome.fields, scores=outcome.scores, raw_scores=outcome.raw_scores,
        reason=reason.strip() or None, judge_failure=False,
    )


def _mentions_tag(text: str, *, tag: str) -> bool:
    """Whether any opening or closing tag appears, placeholders and quotes included."""
    return re.search(rf"<\s*/?\s*{re.escape(tag)}\s*>", text, re.IGNORECASE) is not None


def _plain_score_line(text: str, *, label: str) -> _Tag | None:
    """The last line when it reads ``Score- 4`` (label, then one number), else None."""
    body = text.rstrip()
    start = body.rfind("\n") + 1
    line = body[start:]
    if len(line) > _MAX_SCORE_LINE:
        return None
    word = re.escape(label.strip().rstrip("-:\u2013 ").strip())
    match = re.fullmatch(
        rf"[\s>#*_]*{word}\s*[-:\u2013]\s*[*_]{{0,2}}\s*([+-]?[\d\uff10-\uff19]+(?:\.\d+)?)"
        rf"\s*[*_]{{0,2}}\s*\.?\s*", line, re.IGNORECASE)
    if match is None:
        return None
    return _Tag(start + match.start(), start + match.end(), match.group(1), labelled=True)


def _label_pattern(label: str | None) -> re.Pattern[str] | None:
    """``Score-`` also matches ``Score:``, ``Score -``, ``**Score:**``, any case."""
    if not label:
        return None
    word = re.escape(label.strip().rstrip("-:\u2013 ").strip())
    # Possessive: "Score-" and a long run of spaces must not backtrack over the run.
    return re.compile(
        rf"(?:[*_]{{1,2}})?\b{word}\s*+[-:\u2013]\s*+(?:[*_]{{1,2}})?\s*+$", re.IGNORECASE,
    )


def _find_tags(text: str, *, tag: str, label: re.Pattern[str] | None) -> list[_Tag]:
    name = re.escape(tag)
    pattern = re.compile(rf"<\s*{name}\s*>([^<>]*)<\s*/\s*{name}\s*>", re.IGNORECASE)
    found = []
    for match in pattern.finditer(text):
        # A placeholder (<score></score>, <score>N</score>) holds no digit: not a score.
        if not _DIGIT.search(_normalise_digits(match.group(1))):
            continue
        before = text[max(0, match.start() - 40):match.start()]
        labelled = label.search(before) if label else None
        start = match.start() - (len(before) - labelled.start()) if labelled else match.start()
        found.append(_Tag(start, match.end(), match.group(1), labelled is not None))
    return found


@dataclass(frozen=True)
class _Layout:
    """Where the newlines, quotes and code spans of a reply are, to answer questions
    about each tag's line in logarithmic time: one pass over the text however many
    tags it holds (slicing each tag's line made a long line of tags quadratic)."""

    newlines: list[int]
    quotes: dict[str, list[int]]
    code_starts: list[int]
    code_ends: list[int]

    @classmethod
    def of(cls, text: str) -> _Layout:
        positions: dict[str, list[int]] = {char: [] for char in '\n"\u201c\u201d'}
        for found in _LAYOUT_CHAR.finditer(text):
            positions[found.group()].append(found.start())
        code = [(span.start(), span.end()) for span in _CODE.finditer(text)]
        return cls(newlines=positions.pop("\n"), quotes=positions,
                   code_starts=[start for start, _ in code], code_ends=[end for _, end in code])

    def line_of(self, start: int, end: int, *, length: int) -> tuple[int, int]:
        """The line around ``start``..``end``: where it begins and ends."""
        before = bisect_left(self.newlines, start)
        after = bisect_left(self.newlines, end)
        return (self.newlines[before - 1] + 1 if before else 0,
                self.newlines[after] if after < len(self.newlines) else length)

    def count(self, char: str, start: int, end: int) -> int:
        """How many ``char`` (a quote) lie in ``start``..``end``."""
        where = self.quotes[char]
        return bisect_left(where, end) - bisect_left(where, start)

    def in_code(self, start: int, end: int) -> bool:
        """Whether ``start``..``end`` lies inside one code span."""
        index = bisect_right(self.code_starts, start) - 1
        return index >= 0 and end <= self.code_ends[index]


def _counts(tag: _Tag, text: str, layout: _Layout) -> bool:
    """False for tags quoted from the prompt: rubric lines, examples, code, quotes."""
    line_start, line_end = layout.line_of(tag.start, tag.end, length=len(text))
    # Only a window of the line either side is read: every test looks near the tag,
    # except the quote counts, which come from the layout.
    prefix = text[max(line_start, tag.start - _WINDOW):tag.start]
    suffix = text[tag.end:min(line_end, tag.end + _WINDOW)]
    # A rubric line opens with a bare tag: "<score>4</score> - The summary ...".
    if (not tag.labelled and tag.start - line_start <= _WINDOW
            and _RUBRIC_PREFIX.fullmatch(prefix) and _RUBRIC_SUFFIX.match(suffix)):
        return False
    if _EXAMPLE_CUE.search(prefix[-40:]):
        return False
    if layout.in_code(tag.start, tag.end):
        return False
    return not _quoted(tag, prefix, suffix, layout=layout, line=(line_start, line_end))


def _quoted(tag: _Tag, prefix: str, suffix: str, *, layout: _Layout,
            line: tuple[int, int]) -> bool:
    before, after = prefix.rstrip(), suffix.lstrip()
    if before[-1:] and before[-1] in _OPEN_QUOTES and after[:1] and after[0] in _CLOSE_QUOTES:
        return True
    line_start, line_end = line
    # Inside a quotation that opened earlier on the line: "... <score>5</score> ..."
    if (layout.count('"', line_start, tag.start) % 2 == 1
            and layout.count('"', tag.end, line_end)):
        return True
    return (layout.count("\u201c", line_start, tag.start)
            > layout.count("\u201d", line_start, tag.start)
            and layout.count("\u201d", tag.end, line_end) > 0)


def _ends_inside_tag(text: str, *, tag: str, label: re.Pattern[str] | None) -> bool:
    name = re.escape(tag)
    tail = text.rstrip()
    # An opening tag with no closing tag after it on its line: "Score- <score>4</sc".
    if re.search(rf"<\s*+{name}\s*+>[^<>\n]*+(?:<\s*+/?\s*+\w*+\s*+)?$", tail, re.IGNORECASE):
        return True
    partial = "".join(f"(?:{re.escape(char)}" for char in tag) + ")?" * len(tag)
    cut = re.search(rf"<\s*{partial}$", tail, re.IGNORECASE)
    return bool(cut and label and label.search(tail[:cut.start()]))


def _normalise_digits(value: str) -> str:
    # Full-width digits (U+FF14 for 4) become ASCII ones; superscripts and circled
    # digits stay what they are, not numbers.
    return fold_digits(value)


def _tag_value(value: str) -> int | float | str:
    """The tag's content as a JSON value would be: 4 -> 4, 4.0 -> 4.0, else the text."""
    bare = _normalise_digits(value)
    if re.fullmatch(r"[+-]?[0-9]+", bare):
        return int(bare)
    if re.fullmatch(r"[+-]?(?:[0-9]+\.[0-9]*|\.[0-9]+)", bare):
        return float(bare)
    return bare


def _comparable(value: str) -> float | str:
    """One key per score, so that "4", "4.0" and a full-width 4 count as the same value."""
    bare = _normalise_digits(value)
    try:
        return float(bare)
    except ValueError:
        return bare


def _first_of_each(tags: list[_Tag]) -> list[_Tag]:
    seen: dict[float | str, _Tag] = {}
    for tag in tags:
        seen.setdefault(_comparable(tag.value), tag)
    return list(seen.values())
