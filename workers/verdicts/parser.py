"""Turn a judge's reply into a verdict or a failure. Pure, and never raises.

The judge's text is data: nothing in it can change the metric's format, and a
reply that cannot be read safely is a :class:`ParseFailure`, never a guessed
or default score. The policy (truncation, reasoning blocks, repair, ambiguity)
is described in the design document under "Judge output policy".
"""

from __future__ import annotations

from evalfleet.core.metric import Metric
from evalfleet.core.sample import Sample
from workers.judge.reply import TOO_LARGE as REPLY_TOO_LARGE
from workers.verdicts.json_verdict import parse_json_verdict
from workers.verdicts.result import ParseFailure, Verdict
from workers.verdicts.score_tag import parse_score_tag


def parse_verdict(
    text: str | None, *, metric: Metric, sample: Sample, finish_reason: str | None = None,
) -> Verdict | ParseFailure:
    """Read the verdict in a judge's reply.

    Args:
        text: The reply's content (None when the judge sent no content).
        metric: The metric the judge was asked to apply.
        sample: The judged sample (its id and reference take part in validation).
        finish_reason: The completion's finish reason; ``"length"`` means the reply
            was cut at the token limit and is truncated whatever it holds.

    Returns:
        The verdict, or a :class:`ParseFailure` with its error class:
        ``empty``, ``truncated``, ``no_verdict``, ``schema`` or ``ambiguous``.
    """
    try:
        return _parse(text, metric=metric, sample=sample, finish_reason=finish_reason)
    except Exception as exc:
        # A bug here must cost one verdict, recorded as failed, not a worker crash
        # or a redelivery loop. The message names no judge text.
        return ParseFailure("no_verdict", f"the reply could not be read ({type(exc).__name__})")


def _parse(
    text: str | None, *, metric: Metric, sample: Sample, finish_reason: str | None,
) -> Verdict | ParseFailure:
    if finish_reason == "length":
        return ParseFailure(
            "truncated", "the reply was cut off at the token limit (finish_reason 'length')",
        )
    if finish_reason == REPLY_TOO_LARGE:
        return ParseFailure(
            "truncated", "the reply was over the size cap and not read "
                         "(EVALFLEET_JUDGE_MAX_REPLY_BYTES)",
        )
    if text is None:
        return ParseFailure("empty", "the reply has no content")
    # Each format decides what is empty: a JSON scan reads "<think>" inside a JSON
    # string as text, a plain strip would not.
    if metric.spec.output.format == "score_tag":
        return parse_score_tag(text, metric=metric, sample=sample)
    return parse_json_verdict(text, metric=metric, sample=sample)
