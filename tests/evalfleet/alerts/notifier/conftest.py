"""Notifier tests share the receiver fixture of the alert tests."""

from tests.evalfleet.alerts.conftest import receiver

__all__ = ["receiver"]
