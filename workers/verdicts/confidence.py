"""How sure a judge was of its verdict: a confidence in 0..1 per score. Pure, no numpy.

Two sources, one meaning ("how likely would this judge give the same score again"):

- **Log-probabilities of the score tokens**, where the server returns them (OpenAI,
  vLLM, llama.cpp and llama-cpp-python do, asked with ``logprobs: true, top_logprobs:
  n``). A score's confidence is the probability of the token the judge wrote at the
  score's position, as a share of the probability of all the alternatives listed there
  (the chosen one included): ``exp(chosen) / sum(exp(alternatives))``. With no
  alternatives listed it is ``exp(chosen)`` alone, which is never higher. Which
  characters are the score's, per reply format:

  - JSON verdicts (seeds 001, 002, 004): the value after the score field's key
    (``"reasoning_score": 4``, ``"is_correct": true``, ``"faithfulness": null``), at
    its last place in the reply outside ``<think>`` where it reads as the parsed value.
    A boolean, an integer or ``null`` is read whole; a 0..1 number up to its first
    decimal digit (``0.8`` of ``0.85``): its further digits are within any sensible
    tolerance and would only lower the figure.
  - The score tag (seed 003): the digits inside the last ``<score>N</score>`` holding
    the parsed value (or after the label, for a plain ``Score- N`` line).

  The value's tokens are multiplied (a value written in several tokens is as sure as
  all of them). A token written differently from an equivalent alternative (``0.85``
  against ``0.80``) counts as an alternative: the figure errs low, so the cascade
  escalates more, never accepts more.
- **Agreement among k samples** of the same judge (for a server that returns no
  log-probabilities): the share of the k verdicts that agree with the kept one on that
  score (a failed sample agrees with nothing). It costs k judge calls instead of one.

A verdict's confidence is the lowest of its scores' (a verdict is accepted only if every
score passes). Anything unreadable (no log-probabilities, NaN, a positive log-probability,
tokens that do not spell the reply, a value not found) is an unknown confidence, ``None``,
which a cascade treats as too low: it escalates, never guesses.
"""

from __future__ import annotations

import math
import re
from bisect import bisect_right
from collections.abc import Mapping, Sequence

from evalfleet.core.cascade import scores_agree
from evalfleet.core.metric import Metric
from evalfleet.core.scales import score_kinds
from workers.judge.logprobs import TokenLogprob
from workers.verdicts.result import ParseFailure, RawValue, Verdict

_THINK = re.compile(r"<think>.*?(?:</think>|\Z)", re.DOTALL)
_JSON_LITERAL = r'(-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?|true|false|null|"[^"\n]{0,32}")'


def token_share(position: TokenLogprob) -> float:
    """The chosen token's share of the probability listed at its position, 0..1.

    Args:
        position: One token position.

    Returns:
        ``exp(chosen) / sum(exp(alternatives))`` (the chosen token counted once), or
        ``exp(chosen)`` when no alternatives are listed.
    """
    chosen = math.exp(position.logprob)
    if not position.alternatives:
        return chosen
    others = {token: math.exp(lp) for token, lp in position.alternatives
              if token != position.token}
    total = chosen + sum(others.values())
    return chosen / total if total > 0 else 0.0


def logprob_confidences(
    text: str, tokens: Sequence[TokenLogprob] | None, *, metric: Metric, verdict: Verdict,
) -> dict[str, float | None]:
    """Each score's confidence read from the log-probabilities of its tokens.

    Args:
        text: The reply's content, as parsed.
        tokens: Its token positions (:func:`read_logprobs`); None when the server sent none.
        metric: The metric judged.
        verdict: The verdict parsed from ``text``.

    Returns:
        By score name: the confidence, or None where it cannot be read (no
        log-probabilities, tokens that do not spell ``text``, the value not found).
    """
    names = list(metric.spec.scores)
    starts = _token_starts(text, tokens)
    if starts is None or tokens is None:
        return dict.fromkeys(names)
    visible = _outside_think(text)
    confidences: dict[str, float | None] = {}
    for name, score in metric.spec.scores.items():
        span = _value_span(text, visible, metric=metric, field=score.source,
                           raw=verdict.fields.get(score.source))
        confidences[name] = None if span is None else _span_share(tokens, starts, span)
    return confidences


def _token_starts(text: str, tokens: Sequence[TokenLogprob] | None) -> list[int] | None:
    """Where each token starts in ``text``; None unless the tokens spell ``text`` exactly."""
    if not tokens:
        return None
    starts, offset = [], 0
    for position in tokens:
        starts.append(offset)
        offset += len(position.token)
    if offset != len(text) or "".join(position.token for position in tokens) != text:
        return None
    return starts


def _span_share(tokens: Sequence[TokenLogprob], starts: list[int],
                span: tuple[int, int]) -> float:
    first = bisect_right(starts, span[0]) - 1
    share, index = 1.0, max(first, 0)
    while index < len(tokens) and starts[index] < span[1]:
        share *= token_share(tokens[index])
        index += 1
    return share


def _outside_think(text: str) -> list[tuple[int, int]]:
    """The spans of ``text`` outside ``<think>`` blocks."""
    spans, last = [], 0
    for match in _THINK.finditer(text):
        spans.append((last, match.start()))
        last = match.end()
    spans.append((last, len(text)))
    return spans


def _visible(position: int, visible: list[tuple[int, int]]) -> bool:
    # The spans are sorted and disjoint: one bisection, so many <think> blocks stay linear.
    index = bisect_right(visible, (position, math.inf)) - 1
    return index >= 0 and visible[index][0] <= position < visible[index][1]


def _value_span(text: str, visible: list[tuple[int, int]], *, metric: Metric, field: str,
                raw: RawValue) -> tuple[int, int] | None:
    output = metric.spec.output
    if output.format == "score_tag":
        pattern = re.compile(rf"<{re.escape(output.tag or 'score')}>\s*(\d+)\s*</")
        found = _last_match(text, visible, pattern, raw)
        if found is None and output.label:
            label = re.compile(rf"{re.escape(output.label)}[ \t]*(\d+)")
            found = _last_match(text, visible, label, raw)
    else:
        pattern = re.compile(rf'"{re.escape(field)}"\s*:\s*{_JSON_LITERAL}')
        found = _last_match(text, visible, pattern, raw)
    if found is None:
        return None
    start, end = found
    return start, _deciding_end(text[start:end], start=start, continuous=(
        output.fields[field].type == "number"))


def _last_match(text: str, visible: list[tuple[int, int]], pattern: re.Pattern[str],
                raw: RawValue) -> tuple[int, int] | None:
    found = None
    for match in pattern.finditer(text):
        if _visible(match.start(1), visible) and _same_value(match.group(1), raw):
            found = match.span(1)
    return found


def _same_value(literal: str, raw: RawValue) -> bool:
    literal = literal.strip('"')
    if raw is None:
        return literal in ("null", "")
    if isinstance(raw, bool):
        return literal == ("true" if raw else "false")
    if isinstance(raw, int | float):
        try:
            return math.isclose(float(literal), float(raw), abs_tol=1e-9)
        except ValueError:
            return False
    return False


def _deciding_end(literal: str, *, start: int, continuous: bool) -> int:
    """Where the characters that decide a value end: a 0..1 number's first decimal digit."""
    quote = 1 if literal.startswith('"') else 0
    body = literal[quote:].rstrip('"')
    point = body.find(".")
    if continuous and point >= 0 and point + 1 < len(body):
        return start + quote + point + 2
    return start + quote + len(body)


def verdict_confidence(confidences: Mapping[str, float | None]) -> float | None:
    """A verdict's confidence: the lowest of its scores'.

    Args:
        confidences: By score name.

    Returns:
        The minimum, or None when there are no scores or any is unknown.
    """
    values = list(confidences.values())
    if not values or any(value is None for value in values):
        return None
    return min(value for value in values if value is not None)


def agreement_confidences(
    kept: Verdict, samples: Sequence[Verdict | ParseFailure], *, metric: Metric,
    tolerance: float,
) -> dict[str, float | None]:
    """Each score's confidence as agreement among k samples of the same judge.

    Args:
        kept: The verdict that will be stored (one of the k).
        samples: All k replies parsed, ``kept`` among them; a failure agrees with nothing.
        metric: The metric judged.
        tolerance: Continuous scores within this (0..1) agree.

    Returns:
        By score name: the share of the samples agreeing with ``kept``; None when no
        samples were given.
    """
    kinds = score_kinds(metric)
    if not samples:
        return dict.fromkeys(kinds)
    shares: dict[str, float | None] = {}
    for name, kind in kinds.items():
        agreeing = sum(
            1 for sample in samples
            if isinstance(sample, Verdict) and not sample.judge_failure and scores_agree(
                kept.scores.get(name), sample.scores.get(name), kind=kind, tolerance=tolerance))
        shares[name] = agreeing / len(samples)
    return shares
