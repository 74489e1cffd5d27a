"""Worker health: liveness (work waits, nothing happens) and readiness (dependencies answer).

Pure decisions in :mod:`~workers.health.liveness` and :mod:`~workers.health.readiness`;
the I/O in :mod:`~workers.health.checks`; the HTTP endpoints in
:mod:`~workers.health.server`; what the worker did in :mod:`~workers.health.activity`.
"""

from __future__ import annotations

from workers.health.activity import ActivitySnapshot, WorkerActivity
from workers.health.checks import (
    BrokerProbe,
    DatabaseProbe,
    JudgeProbe,
    KombuBrokerProbe,
    RedisBrokerProbe,
    broker_probe,
    judge_probe,
    run_checks,
)
from workers.health.liveness import Liveness, assess_liveness, needs_depths
from workers.health.readiness import CheckResult, Readiness, assess_readiness, judge_result
from workers.health.server import WorkerHealth, serve_health

__all__ = [
    "ActivitySnapshot",
    "BrokerProbe",
    "CheckResult",
    "DatabaseProbe",
    "JudgeProbe",
    "KombuBrokerProbe",
    "Liveness",
    "Readiness",
    "RedisBrokerProbe",
    "WorkerActivity",
    "WorkerHealth",
    "assess_liveness",
    "assess_readiness",
    "broker_probe",
    "judge_probe",
    "judge_result",
    "needs_depths",
    "run_checks",
    "serve_health",
]
