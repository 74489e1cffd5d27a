"""Building the alert engine from the settings: rules, receivers, database, metrics."""

from __future__ import annotations

from evalfleet.alerts.delivery import DeliveryOptions, Dispatcher
from evalfleet.alerts.engine import AlertEngine
from evalfleet.alerts.judgecheck import JudgeCheckSource
from evalfleet.alerts.notifier import Notifier, build_notifiers
from evalfleet.alerts.review_agreement import AgreementSource
from evalfleet.alerts.rule import ReceiverSpec, RuleSet, load_rules
from evalfleet.alerts.telemetry import AlertTelemetry
from evalfleet.core.metric import load_registry
from evalfleet.core.settings import Settings
from evalfleet.store import open_store
from evalfleet.store.queries.estimate import EstimateReads
from evalfleet.store.queries.review_queue import ReviewQueue

#: Name of the receiver ``EVALFLEET_ALERTMANAGER_URL`` configures.
ALERTMANAGER_RECEIVER = "alertmanager"


def load_rule_set(settings: Settings) -> RuleSet:
    """The rules the settings point at, with the settings' Alertmanager as a receiver.

    Raises:
        InvalidAlertRule: When the rules file is invalid.
        InvalidMetricSpec: When a metric file is invalid.
    """
    extra = {}
    if settings.alerts.alertmanager_url:
        extra[ALERTMANAGER_RECEIVER] = ReceiverSpec(type="alertmanager",
                                                    url=settings.alerts.alertmanager_url,
                                                    default=True)
    return load_rules(settings.alerts.alert_rules_file,
                      registry=load_registry(settings.judge.metrics_dir),
                      extra_receivers=extra)


def open_alert_engine(settings: Settings, *, telemetry: AlertTelemetry | None = None,
                      deliver: bool = True) -> AlertEngine:
    """An alert engine on the configured database, rules and receivers.

    Args:
        settings: The settings.
        telemetry: Where metrics go; None for none.
        deliver: False to queue notifications without sending them.

    Raises:
        InvalidAlertRule: When the rules or receivers are invalid.
        InvalidMetricSpec: When a metric file is invalid.
    """
    rules = load_rule_set(settings)
    registry = load_registry(settings.judge.metrics_dir)
    store = open_store(settings.resolved_database_url(), pool_size=2)
    notifiers: dict[str, Notifier] = {}
    dispatcher = None
    if deliver:
        secret = settings.alerts.alert_webhook_secret
        notifiers = build_notifiers(
            rules.receivers, timeout_s=settings.alerts.alert_delivery_timeout_s,
            webhook_secret=secret.get_secret_value() if secret else None,
            external_url=settings.alerts.alert_external_url,
        )
        options = DeliveryOptions.from_settings(settings.alerts)
        on_attempt = None
        if telemetry is not None:
            counter = telemetry.notifications

            def on_attempt(receiver: str, outcome: str) -> None:
                counter.labels(receiver=receiver, outcome=outcome).inc()

        dispatcher = Dispatcher(store=store, notifiers=notifiers, options=options,
                                on_attempt=on_attempt)
    return AlertEngine(store=store, rules=rules, dispatcher=dispatcher,
                       external_url=settings.alerts.alert_external_url, telemetry=telemetry,
                       notifiers=notifiers, secrets=settings.secret_values(),
                       agreement=AgreementSource(ReviewQueue(store), registry),
                       judge_check=JudgeCheckSource(EstimateReads(store), registry))
