"""The evidence an alert carries: its window's lowest-scoring samples, cut and cleaned.

Sample and judge text is hostile. What leaves here for a notification or a terminal
is plain text: no control characters or terminal escape sequences, no bidirectional
overrides, whitespace collapsed, cut to a bounded length, and the settings' secrets
masked. Each receiver escapes it again for its own format (Slack's mrkdwn, HTML).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from datetime import datetime
from typing import Any

from pydantic import TypeAdapter, ValidationError

from evalfleet.alerts.rule import Rule
from evalfleet.alerts.segment import Segment
from evalfleet.core.log import scrub
from evalfleet.core.trajectory import Step, ToolStep, step_summary
from evalfleet.store import StoreConnection
from evalfleet.store.queries.evidence import Evidence, lowest_scoring

#: Samples a firing notification carries.
EVIDENCE_SAMPLES = 3

#: Longest judge explanation in a notification, in characters.
REASON_CHARS = 240

#: Longest sample id in a notification, in characters.
ID_CHARS = 80

#: Context chunks shown with a worst sample (the page, alerts show), and the longest
#: each is shown, in characters: what a faithfulness alert is about, kept to a glance.
CONTEXT_CHUNKS = 5
CONTEXT_CHARS = 600

#: Longest description of the step the judge named as where an agent went wrong, in
#: characters (the page, alerts show; a notification carries the step's kind only).
STEP_CHARS = 300

#: ANSI/VT escape sequences (CSI, OSC, and two-character ESC sequences).
_ESCAPES = re.compile(r"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(?:\x07|\x1b\\)?|[@-Z\\-_])")

#: C0 and C1 controls, DEL, and the Unicode bidirectional overrides and isolates.
_CONTROLS = re.compile(r"[\x00-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")

_SPACES = re.compile(r"\s+")


def plain_text(text: str | None, *, limit: int) -> str:
    """``text`` safe to print anywhere as one line: escapes and controls removed,
    whitespace collapsed, cut to ``limit`` characters (with an ellipsis).

    Args:
        text: Hostile text (None gives an empty string).
        limit: Longest result, in characters.
    """
    if not text:
        return ""
    # Cut before the regexes so their cost is bounded by the limit, not the input.
    cleaned = _ESCAPES.sub("", text[: limit * 4])
    cleaned = _SPACES.sub(" ", _CONTROLS.sub(" ", cleaned)).strip()
    if len(cleaned) > limit or len(text) > limit * 4:
        return cleaned[: max(0, limit - 1)].rstrip() + "…"
    return cleaned


def context_excerpt(context: Any, *, chunks: int = CONTEXT_CHUNKS,
                    limit: int = CONTEXT_CHARS) -> tuple[list[str], int]:
    """A sample's retrieved context for a glance: its first ``chunks`` chunks as plain
    text (:func:`plain_text`, ``limit`` characters each), and how many more there are.

    Args:
        context: The sample's ``context`` as stored (a list of chunks; anything else is
            one chunk; None or empty: no context).
    """
    if context is None or context == "" or context == []:
        return [], 0
    items = context if isinstance(context, list) else [context]
    shown = [plain_text(item if isinstance(item, str) else str(item), limit=limit)
             for item in items[:chunks]]
    return shown, max(0, len(items) - chunks)


def failed_step_line(item: Evidence, *, limit: int = STEP_CHARS) -> str | None:
    """The step the judge named as where an agent went wrong, as plain text: ``step 3
    of 5: tool call weather {"city": "Olso"} -> ...``; ``step 3`` alone when the sample's
    trajectory was not kept or has no such step. None when the judge named no step."""
    if item.failed_step is None:
        return None
    step, total = _named_step(item)
    if step is None:
        return f"step {item.failed_step}"
    return plain_text(f"step {item.failed_step} of {total}: {step_summary(step)}", limit=limit)


def session_line(item: Evidence, *, limit: int = STEP_CHARS) -> str | None:
    """A conversation's evidence as plain text: ``conversation conv-42, 3 turns (closed by
    idle); last question: ...`` (the sample's own question and answer are its first
    question and its last answer). None for a sample without a session."""
    session = (item.sample or {}).get("session")
    if not isinstance(session, dict):
        return None
    turns = session.get("turns")
    turns = turns if isinstance(turns, list) else []
    last = turns[-1] if turns and isinstance(turns[-1], dict) else {}
    closed = f" (closed by {session['closed_by']})" if session.get("closed_by") else ""
    line = f"conversation {session.get('id')}, {len(turns)} turn(s){closed}"
    question = last.get("input")
    if len(turns) > 1 and isinstance(question, str) and question:
        line += f"; last question: {question}"
    return plain_text(line, limit=limit)


def _named_step(item: Evidence) -> tuple[Step | None, int]:
    """The step the judge named, read from the kept trajectory, and how many it has."""
    trajectory = (item.sample or {}).get("trajectory")
    steps = trajectory.get("steps") if isinstance(trajectory, dict) else None
    if item.failed_step is None or not isinstance(steps, list) or \
            not 1 <= item.failed_step <= len(steps):
        return None, 0
    try:
        return _STEP.validate_python(steps[item.failed_step - 1]), len(steps)
    except ValidationError:
        return None, 0


#: Reads one stored step.
_STEP: TypeAdapter[Step] = TypeAdapter(Step)


def window_evidence(conn: StoreConnection, rule: Rule, segment: Segment, *, at: datetime,
                    limit: int = EVIDENCE_SAMPLES) -> list[Evidence]:
    """The samples of ``segment``'s current window that score worst for ``rule``.

    Args:
        conn: A connection of the store.
        rule: The rule (its metric, score, filters and direction).
        segment: The segment.
        at: The evaluation time; the window ends here.
        limit: Most samples.

    Returns:
        Worst first (lowest for a ``decrease`` rule, highest for ``increase``).
    """
    spec = rule.spec
    return lowest_scoring(conn, metric=spec.metric, score=spec.series, start=at - spec.window,
                          end=at, labels=segment.as_dict(), filters=rule.spec.filter_values,
                          limit=limit, highest=spec.direction == "increase")


def evidence_details(evidence: Iterable[Evidence], *,
                     secrets: Iterable[str] = ()) -> list[dict[str, Any]]:
    """The evidence as bounded, cleaned JSON data (stored with the alert's numbers).

    Only the id, the score, the judge's explanation and, for an agent, the step the
    judge named (its number and kind: ``tool call weather``) go out, never the sample's
    text: a notification travels further than the store.
    """
    hidden = [secret for secret in secrets if secret]
    return [
        {"verdict_id": item.verdict_id,
         "sample_id": plain_text(scrub(item.sample_id, hidden), limit=ID_CHARS),
         "score": item.value,
         "explanation": plain_text(scrub(item.reason or "", hidden), limit=REASON_CHARS),
         **_step_detail(item, hidden)}
        for item in evidence
    ]


def _step_detail(item: Evidence, hidden: list[str]) -> dict[str, Any]:
    """``failed_step`` and ``step`` (its kind) for an agent's evidence; nothing else."""
    if item.failed_step is None:
        return {}
    step, _ = _named_step(item)
    kind = None if step is None else \
        f"tool call {step.name}" if isinstance(step, ToolStep) else f"{step.type} step"
    return {"failed_step": item.failed_step,
            "step": plain_text(scrub(kind, hidden), limit=ID_CHARS) if kind else None}
