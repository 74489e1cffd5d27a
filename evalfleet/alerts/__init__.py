"""The alert engine: statistically sound alerts on score drops, per segment, delivered once.

Rules (``rule``) name a metric's score; each cycle (``engine``) summarises its
window and baseline per segment from Postgres (``window``), tests each segment
with the test its score kind calls for (``statistic``, ``detector``), adjusts the
p-values of the whole cycle together, advances a state machine per segment
(``state``, stored by ``ledger``) and queues one notification per transition
(``outbox``), delivered with retries (``delivery``, ``notifier``).
"""

from __future__ import annotations

from evalfleet.alerts.engine import AlertEngine, CycleReport, ReportRow
from evalfleet.alerts.factory import load_rule_set, open_alert_engine
from evalfleet.alerts.rule import AlertRule, ReceiverSpec, Rule, RuleSet, load_rules
from evalfleet.alerts.segment import Segment
from evalfleet.alerts.telemetry import AlertTelemetry, default_alert_telemetry

__all__ = [
    "AlertEngine",
    "AlertRule",
    "AlertTelemetry",
    "CycleReport",
    "ReceiverSpec",
    "ReportRow",
    "Rule",
    "RuleSet",
    "Segment",
    "default_alert_telemetry",
    "load_rule_set",
    "load_rules",
    "open_alert_engine",
]
