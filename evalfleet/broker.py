"""Broker connection settings shared by producers and workers.

Both sides must agree on the transport options (the embedded file-system
broker's folders above all), so they are built here, from the settings, once.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from evalfleet.settings import Settings

#: Redis connections kept beyond the worker's concurrency (consumer, acks, publishes).
#: Too few and late acks under the threads pool starve the pool (Celery issue #1350).
REDIS_SPARE_CONNECTIONS = 32


def broker_transport_options(settings: Settings, *, concurrency: int) -> dict[str, Any]:
    """kombu transport options for the configured broker.

    Args:
        settings: The settings.
        concurrency: Jobs in flight in this process (1 for a producer).

    Returns:
        The ``broker_transport_options`` for Celery.
    """
    url = settings.resolved_broker_url()
    if url.startswith(("redis://", "rediss://", "unix://")):
        return {
            "visibility_timeout": settings.visibility_timeout_s,
            "max_connections": concurrency + REDIS_SPARE_CONNECTIONS,
        }
    if settings.embedded_broker:
        folder = embedded_broker_folder(settings)
        for sub in ("queue", "control", "processed"):
            (folder / sub).mkdir(parents=True, exist_ok=True)
        return {
            "data_folder_in": str(folder / "queue"),
            "data_folder_out": str(folder / "queue"),
            "control_folder": str(folder / "control"),
            "processed_folder": str(folder / "processed"),
        }
    return {}


def embedded_broker_folder(settings: Settings) -> Path:
    """Where the file-system broker keeps its messages."""
    return (settings.data_dir / "broker").resolve()


def is_redis(settings: Settings) -> bool:
    """True when the broker is Redis."""
    return settings.resolved_broker_url().startswith(("redis://", "rediss://", "unix://"))
