"""Incidents: a rule's firing segments that share a cause, named by the attribute values
that explain the drop. Pure.

A drop in one prompt version of one app fires that segment, its app and the whole
traffic: three alerts, one cause. The segments of a rule that fire (or breach) in a cycle
are grouped along the segment tree: each belongs to the incident of its highest ancestor
that fires too (the *head*).

**Why it dropped.** The head's drop is its lost score mass, ``n (baseline mean - window
mean)``. Each attribute value below the head (``prompt_version=v12``) gets the share of
that mass lost by the finest segments under the head that carry it, fired or not; the
values are ranked, and the *cause* is the head with every value that explains at least
:data:`EXPLAINS` of the drop: a version of one app (both its app and its version explain
it), an app (its versions share it), a prompt version deployed to every app (one version
explains it across apps: a cause the segment tree itself has no node for), or the whole
traffic (nothing below it does).

**Causes outside the tree.** A judge model, or a prompt version or deploy that is not
a segment key, has no node in the tree. The rule's ``incident.explain_by`` attributes
are read for the incident's window split by segment and value (*units*,
``window.fetch_explained``); each unit's lost mass is measured against its segment's
baseline, so a judge model new since the baseline is measured too. Such a value is named
(one at most, with the tree's values) when it explains at least :data:`EXPLAINS` of the
drop and at least :data:`LIFT` more than its share of the window's samples: a value every
sample carries explains everything and says nothing. Once named it stays named while it
still explains :data:`EXPLAINS`, also when the window has come to hold only its samples.

**One incident over time.** An incident keeps the name (``key``) it opened with while any
of its segments fires: a member that carried a key last cycle hands it on, so the app
joining its version's incident, or the version resolving before its app, leaves one
incident, and Alertmanager, grouping by the key, one notification that resolves when the
last segment does.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from evalfleet.alerts.segment import Segment
from evalfleet.alerts.statistic import Summary

#: Share of the head's drop an attribute value must explain to be named in the cause.
EXPLAINS = 0.75

#: How much more of the drop than of the window's samples an ``explain_by`` value must
#: carry to be named.
LIFT = 0.2

#: Attribute values listed with an incident, most explaining first.
RANKED_SHOWN = 5

#: A segment's window and baseline summaries, oriented so that a drop is positive.
Pair = tuple[Summary, Summary]


@dataclass(frozen=True)
class Incident:
    """Firing segments of one rule that share a cause."""

    key: str
    """Its name while it lasts: the head it opened under."""
    head: Segment
    """The highest firing segment."""
    members: tuple[Segment, ...]
    """Every firing segment under it, the head included, most specific last."""
    cause: Segment
    """The head with the attribute values that explain at least :data:`EXPLAINS`."""
    explains: float
    """The cause's share of the head's drop."""
    ranked: tuple[tuple[str, str, float], ...]
    """``(attribute, value, share of the drop)`` below the head, largest first."""


def group(members: Mapping[Segment, Pair], *, population: Mapping[Segment, Pair] | None = None,
          previous: Mapping[Segment, Mapping[str, Any]] | None = None,
          explained: Mapping[Segment, Summary] | None = None) -> list[Incident]:
    """Group firing segments into incidents.

    Args:
        members: Each firing segment's window and baseline summaries (on the rule's scale;
            the caller orients them so that a drop is the baseline's mean above the
            window's).
        population: Every segment's summaries this cycle, members or not (the shares are
            computed over all of them); ``members`` when not given.
        previous: The incident each segment carried last cycle (:func:`incident_details`);
            its key is kept, and its cause while the head's window shows no drop (an
            alert waiting for its recovery count).
        explained: Window summaries (oriented as ``members``) of units: a segment with
            one ``explain_by`` label appended (``window.fetch_explained``).

    Returns:
        One incident per head, in segment order.
    """
    everyone = {**(population or {}), **members}
    heads: dict[Segment, list[Segment]] = {}
    for segment in sorted(members):
        heads.setdefault(_head(segment, members), []).append(segment)
    return [_incident(head, family, everyone, previous or {}, explained or {})
            for head, family in sorted(heads.items())]


def heads_of(members: Iterable[Segment]) -> set[Segment]:
    """The highest segments of ``members``: those no other member lies above."""
    found = set(members)
    return {_head(segment, found) for segment in found}


def incident_details(incident: Incident) -> dict[str, Any]:
    """An incident as plain JSON data (stored with each member's state, notified)."""
    return {
        "key": incident.key, "head": str(incident.head),
        "segments": [str(s) for s in incident.members],
        "cause": str(incident.cause), "cause_labels": [list(kv) for kv in incident.cause.labels],
        "explains": round(incident.explains, 4),
        "ranked": [[k, v, round(share, 4)] for k, v, share in incident.ranked[:RANKED_SHOWN]],
    }


def cause_line(details: Mapping[str, Any]) -> str:
    """One line for people: the cause, its share of the drop, the ranked attribute values
    and the segments."""
    segments = ", ".join(str(s) for s in details.get("segments", []))
    share = _percent(details.get("explains"))
    ranked = "; ".join(f"{k}={v} {_percent(s)}" for k, v, s in details.get("ranked") or [])
    line = (f"incident {details.get('key') or details.get('head')}: {details.get('cause')} "
            f"explains {share} of the drop")
    if ranked:
        line += f" (by attribute: {ranked})"
    return f"{line}; firing: {segments}"


def _incident(head: Segment, family: list[Segment], everyone: Mapping[Segment, Pair],
              previous: Mapping[Segment, Mapping[str, Any]],
              explained: Mapping[Segment, Summary]) -> Incident:
    key, carried = _carried(head, family, previous)
    members = tuple(sorted(family, key=_order))
    total = _lost(everyone[head])
    if total <= 0 and carried is not None:
        # The drop has left the window while the alert counts its recovery: the cause
        # seen while it was there still stands.
        return _kept(key, head, members, carried)
    finest = _finest(head, everyone)
    units = _units(head, explained, everyone)
    ranked = _ranked(head, finest, everyone, total=total)
    outside = _outside(units, total=total)
    chosen = {}
    for attribute, value, share in ranked:  # ranked: the first of each attribute is its best
        if share >= EXPLAINS and attribute not in chosen:
            chosen[attribute] = value
    order = [k for segment in finest for k, _ in segment.labels]
    within = Segment(head.labels + tuple(sorted(chosen.items(),
                                                key=lambda kv: order.index(kv[0]))))
    extra = _named_outside(outside, carried)
    if extra is None:
        explains = sum(_lost(everyone[s]) for s in finest if _within(s, within)) / total \
            if total > 0 else 0.0
        cause = within
    else:
        explains = sum(lost for unit, (lost, _) in units.items()
                       if unit.labels[-1] == extra and _within(unit, within)) / total
        cause = Segment((*within.labels, extra))
    everything = ranked + [(k, v, share) for (k, v), (share, _) in outside.items()]
    return Incident(key=key, head=head, members=members, cause=cause, explains=explains,
                    ranked=tuple(sorted(everything, key=_by_share)))


def _units(head: Segment, explained: Mapping[Segment, Summary],
           everyone: Mapping[Segment, Pair]) -> dict[Segment, tuple[float, int]]:
    """Each unit under ``head``: its lost mass against its segment's baseline (the
    nearest segment above it with one), and its window's samples."""
    units = {}
    for unit, window in explained.items():
        segment = unit.parent
        if segment is None or segment.labels[:head.depth] != head.labels or not window.n:
            continue
        while segment is not None and not (segment in everyone and everyone[segment][1].n):
            segment = segment.parent
        if segment is not None:
            units[unit] = (_lost((window, everyone[segment][1])), window.n)
    return units


def _outside(units: Mapping[Segment, tuple[float, int]], *,
             total: float) -> dict[tuple[str, str], tuple[float, float]]:
    """Each ``explain_by`` value's share of the drop and of its attribute's samples."""
    lost: dict[tuple[str, str], float] = {}
    counts: dict[tuple[str, str], int] = {}
    for unit, (mass, n) in units.items():
        label = unit.labels[-1]
        lost[label] = lost.get(label, 0.0) + mass
        counts[label] = counts.get(label, 0) + n
    samples: dict[str, int] = {}
    for (attribute, _), n in counts.items():
        samples[attribute] = samples.get(attribute, 0) + n
    return {label: (mass / total if total > 0 else 0.0, counts[label] / samples[label[0]])
            for label, mass in lost.items()}


def _named_outside(outside: Mapping[tuple[str, str], tuple[float, float]],
                   carried: Mapping[str, Any] | None) -> tuple[str, str] | None:
    """The ``explain_by`` value named in the cause: the one named before while it still
    explains enough, else the best one that explains enough beyond its traffic."""
    before = carried.get("cause_labels") if carried is not None else None
    named = {(str(kv[0]), str(kv[1])) for kv in before if isinstance(kv, list) and len(kv) == 2} \
        if isinstance(before, list) else set()
    kept = [label for label in sorted(named & set(outside)) if outside[label][0] >= EXPLAINS]
    if kept:
        return kept[0]
    fit = [(share, label) for label, (share, traffic) in outside.items()
           if share >= EXPLAINS and share - traffic >= LIFT]
    return max(fit, key=lambda item: (item[0], item[1]))[1] if fit else None


def _kept(key: str, head: Segment, members: tuple[Segment, ...],
          carried: Mapping[str, Any]) -> Incident:
    try:
        cause = Segment(tuple((str(k), str(v)) for k, v in carried["cause_labels"]))
        explains = float(carried["explains"])
        ranked = tuple((str(k), str(v), float(s)) for k, v, s in carried["ranked"])
    except (KeyError, TypeError, ValueError):  # stored by an older version: the head
        cause, explains, ranked = head, 0.0, ()
    return Incident(key=key, head=head, members=members, cause=cause, explains=explains,
                    ranked=ranked)


def _ranked(head: Segment, finest: list[Segment], everyone: Mapping[Segment, Pair], *,
            total: float) -> list[tuple[str, str, float]]:
    lost: dict[tuple[str, str], float] = {}
    for segment in finest:
        for label in segment.labels[head.depth:]:
            lost[label] = lost.get(label, 0.0) + _lost(everyone[segment])
    shares = [(k, v, mass / total if total > 0 else 0.0) for (k, v), mass in lost.items()]
    return sorted(shares, key=_by_share)


def _by_share(item: tuple[str, str, float]) -> tuple[float, str, str]:
    return (-item[2], item[0], item[1])


def _finest(head: Segment, everyone: Mapping[Segment, Pair]) -> list[Segment]:
    """The segments under ``head`` with none below them (itself when none is): each
    sample under the head counted once, also where ``max_segments`` left some out."""
    under = [s for s in everyone if s.labels[:head.depth] == head.labels]
    ancestors = {s.labels[:depth] for s in under for depth in range(s.depth)}
    return sorted(s for s in under if s.labels not in ancestors)


def _within(segment: Segment, cause: Segment) -> bool:
    return set(cause.labels) <= set(segment.labels)


def _carried(head: Segment, family: list[Segment],
             previous: Mapping[Segment, Mapping[str, Any]]) -> tuple[str, Mapping[str, Any] | None]:
    """The key (and the details) the incident carried last cycle: the head's, else the
    one most members carried (the smallest on a tie); else the head's name, a new one."""
    carried = {s: previous[s] for s in family if isinstance(previous.get(s, {}).get("key"), str)}
    if head in carried:
        return str(carried[head]["key"]), carried[head]
    if not carried:
        return str(head), None
    keys = [str(d["key"]) for d in carried.values()]
    key = min(set(keys), key=lambda k: (-keys.count(k), k))
    return key, next(d for d in carried.values() if d["key"] == key)


def _head(segment: Segment, members: Mapping[Segment, Any] | set[Segment]) -> Segment:
    head = segment
    parent = segment.parent
    while parent is not None:
        if parent in members:
            head = parent
        parent = parent.parent
    return head


def _lost(summaries: Pair) -> float:
    window, baseline = summaries
    if not window.n or not baseline.n:
        return 0.0
    return window.n * (baseline.mean - window.mean)


def _percent(value: Any) -> str:
    return f"{float(value):.0%}" if isinstance(value, int | float) else "?"


def _order(segment: Segment) -> tuple[int, Segment]:
    return (segment.depth, segment)
