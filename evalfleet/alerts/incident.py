"""Incidents: a rule's firing segments that share a cause, and the segment that explains
most of the drop. Pure.

A drop in one prompt version of one app fires that segment, its app and the whole
traffic: three alerts, one cause. The segments of a rule that fire (or breach) in a cycle
are grouped along the segment tree: each belongs to the incident of its highest ancestor
that fires too (the *head*). Each member's share of the head's drop is its lost score
mass, ``n (baseline mean - window mean)``, over the head's; the *cause* is the most
specific member that explains at least :data:`EXPLAINS` of it (a drop spread over every
prompt version of an app is the app's; one confined to a version is the version's).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from evalfleet.alerts.segment import Segment
from evalfleet.alerts.statistic import Summary

#: Share of the head's drop a segment must explain to be named as the cause.
EXPLAINS = 0.75


@dataclass(frozen=True)
class Incident:
    """Firing segments of one rule that share a cause."""

    head: Segment
    """The highest firing segment: the incident's name."""
    members: tuple[Segment, ...]
    """Every firing segment under it, the head included, most specific last."""
    cause: Segment
    """The most specific member explaining at least :data:`EXPLAINS` of the drop."""
    shares: tuple[tuple[Segment, float], ...]
    """Each member's share of the head's drop, largest first."""


def group(members: Mapping[Segment, tuple[Summary, Summary]]) -> list[Incident]:
    """Group firing segments into incidents.

    Args:
        members: Each firing segment's window and baseline summaries (on the rule's scale;
            a drop is the baseline's mean above the window's for a decrease rule, the
            caller orients them).

    Returns:
        One incident per head, in segment order.
    """
    heads: dict[Segment, list[Segment]] = {}
    for segment in sorted(members):
        heads.setdefault(_head(segment, members), []).append(segment)
    incidents = []
    for head, family in sorted(heads.items()):
        total = _lost(members[head])
        shares = sorted(((segment, _lost(members[segment]) / total if total > 0 else 0.0)
                         for segment in family), key=lambda item: (-item[1], -item[0].depth))
        explaining = [s for s, share in shares if share >= EXPLAINS] or [head]
        cause = max(explaining, key=lambda segment: (segment.depth, segment))
        incidents.append(Incident(head=head, members=tuple(sorted(family, key=_order)),
                                  cause=cause, shares=tuple(shares)))
    return incidents


def incident_details(incident: Incident) -> dict[str, Any]:
    """An incident as plain JSON data (stored with each member's state, notified)."""
    share = dict(incident.shares).get(incident.cause, 0.0)
    return {
        "head": str(incident.head), "segments": [str(s) for s in incident.members],
        "cause": str(incident.cause), "explains": round(share, 4),
        "shares": [[str(s), round(v, 4)] for s, v in incident.shares],
    }


def cause_line(details: Mapping[str, Any]) -> str:
    """One line for people: the cause, its share of the drop, and the segments."""
    segments = ", ".join(str(s) for s in details.get("segments", []))
    explains = details.get("explains")
    share = f"{float(explains):.0%}" if isinstance(explains, int | float) else "?"
    return (f"incident {details.get('head')}: {details.get('cause')} explains {share} of "
            f"the drop; firing: {segments}")


def _head(segment: Segment, members: Mapping[Segment, Any]) -> Segment:
    head = segment
    parent = segment.parent
    while parent is not None:
        if parent in members:
            head = parent
        parent = parent.parent
    return head


def _lost(summaries: tuple[Summary, Summary]) -> float:
    window, baseline = summaries
    if not window.n or not baseline.n:
        return 0.0
    return window.n * (baseline.mean - window.mean)


def _order(segment: Segment) -> tuple[int, Segment]:
    return (segment.depth, segment)
