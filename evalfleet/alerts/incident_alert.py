"""One notification per incident for receivers that do no grouping of their own. Pure.

Alertmanager groups a sequential rule's per-segment alerts by their ``incident`` label
itself. A Slack channel or a plain webhook does not: sent every segment's firing, it
would page once per segment of one cause. Those receivers get the incident instead:
one ``firing`` when its first segment fires (naming its segments, the attribute value
that explains the drop and the head segment's detector evidence), a ``renotify`` when a
member is due to notify again, and one ``resolved`` when its last segment resolves.

An incident is open while a firing segment carries its key (``incident``): the keys
carried before a cycle and after it say which opened and which closed.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from evalfleet.alerts.alert import (
    alert_page_url,
    format_time,
    sequential_annotations,
    sequential_line,
)
from evalfleet.alerts.incident import cause_line
from evalfleet.alerts.rule import Rule
from evalfleet.alerts.segment import Segment
from evalfleet.alerts.state import Event

#: Receiver types notified per incident rather than per segment.
INCIDENT_RECEIVERS = frozenset({"slack", "webhook"})



@dataclass(frozen=True)
class IncidentChange:
    """An incident opened, due again or closed in one cycle."""

    key: str
    """The incident's name (``incident`` label)."""
    event: Event
    """``firing``, ``renotify`` or ``resolved``."""
    incident: dict[str, Any]
    """Its details (``incident.incident_details``): after the cycle, or the last ones
    for a closed incident."""


def incident_changes(*, before: Mapping[str, dict[str, Any]],
                     after: Mapping[str, dict[str, Any]],
                     renotified: set[str]) -> list[IncidentChange]:
    """What to notify about incidents after one cycle.

    Args:
        before: The incidents firing segments carried before the cycle, by key.
        after: Those they carry after it, by key.
        renotified: Keys of which a member notified again this cycle.

    Returns:
        ``firing`` for each key new in ``after``, ``renotify`` for each kept key in
        ``renotified``, ``resolved`` for each key gone, in key order.
    """
    changes = [IncidentChange(key, "firing", after[key]) for key in after if key not in before]
    changes += [IncidentChange(key, "renotify", after[key])
                for key in after if key in before and key in renotified]
    changes += [IncidentChange(key, "resolved", before[key]) for key in before
                if key not in after]
    return sorted(changes, key=lambda change: change.key)


def outbox_key(key: str) -> str:
    """An incident's ``segment_key`` in the outbox (a digest, as a segment's is): its
    notifications go out in order, apart from any segment's."""
    return hashlib.sha256(f"incident\x1f{key}".encode()).hexdigest()


def build_incident_alert(*, rule: Rule, change: IncidentChange, head: Segment,
                         sequential: Mapping[str, Any] | None, started: datetime,
                         at: datetime, external_url: str) -> dict[str, Any]:
    """The alert of one incident's notification, in Alertmanager's v2 shape.

    Args:
        rule: The rule.
        change: What is notified.
        head: The incident's highest segment (the page the alert links to).
        sequential: The head segment's detector evidence this cycle
            (``details["sequential"]``); None when it is not at hand.
        started: When the incident's first segment fired.
        at: The evaluation time.
        external_url: Where people look at alerts.

    Returns:
        ``{"status", "labels", "annotations", "startsAt", "endsAt", "generatorURL"}``;
        the labels are the rule's and ``incident``, the same at firing and resolving.
    """
    spec = rule.spec
    incident = change.incident
    segments = [str(s) for s in incident.get("segments") or []]
    labels = {"alertname": spec.name, "metric": spec.metric, "score": spec.score,
              "severity": spec.severity, **spec.labels, "incident": change.key}
    line = cause_line(incident)
    annotations = {
        "summary": f"{spec.name}: {incident.get('cause')} dropped "
                   f"({len(segments)} segment{'s' if len(segments) != 1 else ''})",
        "description": line, "incident_cause": str(incident.get("cause")),
        "incident_detail": line, "incident_segments": ", ".join(segments),
        "segment": str(head), "test": "sequential",
        # A webhook's body says firing or resolved only: a reminder says so here.
        "incident_event": change.event,
    }
    if sequential:
        annotations.update(sequential_annotations(sequential))
        evidence = [sequential_line(name, sequential[name]) for name in ("baseline", "threshold")
                    if isinstance(sequential.get(name), dict)]
        annotations["description"] = "; ".join([line, *evidence])
    if spec.annotations.runbook:
        annotations["runbook_url"] = spec.annotations.runbook
    resolved = change.event == "resolved"
    ends = at if resolved else at + spec.renotify + 2 * spec.interval
    return {
        "status": "resolved" if resolved else "firing", "labels": labels,
        "annotations": annotations, "startsAt": format_time(min(started, at)),
        "endsAt": format_time(max(ends, started)),
        "generatorURL": alert_page_url(external_url, rule=spec.name, segment=head),
    }

