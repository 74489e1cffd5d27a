"""Notifier tests share the receiver fixture of the alert tests."""

from tests.workers.alerts.conftest import receiver

__all__ = ["receiver"]
