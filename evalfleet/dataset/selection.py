"""What a dataset is made from, as people give it: filters, lists of ids, an alert.

Hostile input is normal input here: every bad value is refused with the field (and for
a file, the line) named, in linear time.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from evalfleet.alerts.evidence import window_evidence
from evalfleet.alerts.ledger import load_state
from evalfleet.alerts.rule import Rule
from evalfleet.alerts.segment import Segment
from evalfleet.core.errors import InvalidDataset
from evalfleet.core.sample import MAX_ID_LENGTH
from evalfleet.store.sql import SqlStore, to_utc

#: Most samples of an alert's window saved at once.
MAX_ALERT_SAMPLES = 1000

#: Control characters a sample id or a segment label never holds.
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


@dataclass(frozen=True)
class AlertSamples:
    """An alert's worst samples: the verdicts to copy and a note saying where from."""

    found: list[tuple[int, str]]
    """``(row id, sample id)`` of each verdict, worst first."""
    note: str


def read_sample_ids(lines: Iterable[bytes], *, source: str) -> list[str]:
    """Sample ids, one a line (blank lines skipped, duplicates kept once).

    Raises:
        InvalidDataset: Naming the file, the line and the field ``sample_id``.
    """
    ids: dict[str, None] = {}
    for number, raw in enumerate(lines, 1):
        try:
            text = raw.decode("utf-8").strip()
        except UnicodeDecodeError:
            raise InvalidDataset(f"{source}: line {number}: not UTF-8",
                                 field="sample_id") from None
        if text:
            ids[check_sample_id(text, where=f"{source}: line {number}: ")] = None
    return list(ids)


def check_sample_id(text: str, *, where: str = "") -> str:
    """``text`` when it can be a sample id.

    Raises:
        InvalidDataset: Naming the field ``sample_id``.
    """
    if not text or len(text) > MAX_ID_LENGTH or _CONTROL.search(text):
        raise InvalidDataset(f"{where}1 to {MAX_ID_LENGTH} characters, no control "
                             "characters", field="sample_id")
    return text


def parse_labels(pairs: Sequence[str]) -> dict[str, str]:
    """``KEY=VALUE`` texts as a segment's labels.

    Raises:
        InvalidDataset: Naming the field ``segment``.
    """
    labels: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        key, value = key.strip(), value.strip()
        if not sep or not key or len(key) > 128 or len(value) > 1024 or \
                _CONTROL.search(key) or _CONTROL.search(value):
            raise InvalidDataset(f"{pair[:80]!r}: expected KEY=VALUE", field="segment")
        labels[key] = value
    return labels


def rule_segment(text: str, rule: Rule) -> Segment:
    """A segment as printed (``app=support-bot,prompt_version=v12``; empty or ``(all)``:
    the whole rule), its labels in the rule's order.

    Raises:
        InvalidDataset: Naming the field ``segment``: not ``key=value`` pairs, or not a
            level of the rule (a prefix of its ``segment_by`` keys).
    """
    if text.strip() in ("", "(all)", "all"):
        return Segment()
    labels = parse_labels(text.split(","))
    keys = rule.spec.segment_keys[: len(labels)]
    if sorted(labels) != sorted(keys):
        levels = ", ".join(",".join(rule.spec.segment_keys[:depth])
                           for depth in range(1, len(rule.spec.segment_keys) + 1))
        raise InvalidDataset(f"{text[:80]!r} is not a level of rule {rule.name} (levels: "
                             f"{levels or 'only (all)'})", field="segment")
    return Segment(tuple((key, labels[key]) for key in keys))


def alert_samples(store: SqlStore, rule: Rule, segment: Segment, *,
                  worst: int) -> AlertSamples:
    """The worst samples of ``segment``'s window as the alert page shows them: the window
    that ends at the segment's last evaluation (now when never evaluated).

    Raises:
        InvalidDataset: ``worst`` out of range.
    """
    if not 1 <= worst <= MAX_ALERT_SAMPLES:
        raise InvalidDataset(f"must be 1 to {MAX_ALERT_SAMPLES}", field="worst")
    with store.connect() as conn:
        stored = load_state(conn, rule.name, segment)
        at = stored.evaluated_at if stored else datetime.now(UTC)
        evidence = window_evidence(conn, rule, segment, at=at, limit=worst)
    start = to_utc(at - rule.spec.window)
    span = f"{start:%Y-%m-%dT%H:%MZ}..{to_utc(at):%Y-%m-%dT%H:%MZ}"
    return AlertSamples([(item.verdict_id, item.sample_id) for item in evidence],
                        f"alert {rule.name} {segment} worst {worst} of {span}")
