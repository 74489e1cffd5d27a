"""Operating the fleet: status and capacity, dead letters, retention.

    capacity.py     workers per queue from Little's law, capped by rate limits (pure)
    status.py       the fleet's state per queue from readings and activity (pure)
    activity.py     what finished in a recent window, from the verdict store
    monitor.py      observing queues and activity again and again (status --watch)
    queue/          queue depth, in-flight jobs and ages, one probe per broker kind
    dead_letter.py  list, replay and purge dead letters
    retention.py    the retention policy as cut-off times (pure)
    purger.py       applying it in small transactions
"""

from __future__ import annotations

from evalfleet.broker.probe import QueueProbe, QueueReading, open_queue_probe
from evalfleet.ops.activity import Activity, JudgeCost, count_completed, read_activity
from evalfleet.ops.capacity import Demand, Recommendation, recommend, recommend_fleet
from evalfleet.ops.dead_letter import (
    DeadLetterFilter,
    ReplayReport,
    StoredDeadLetter,
    count_dead_letters,
    dead_letter_json,
    iter_dead_letters,
    purge_dead_letters,
    replay_dead_letters,
    replay_jobs,
)
from evalfleet.ops.fleet_status import FleetStatus, QueueStatus, build_status, status_json
from evalfleet.ops.monitor import MonitorOptions, StatusMonitor
from evalfleet.ops.purger import Purger, PurgeReport
from evalfleet.ops.retention import Cutoffs, RetentionPolicy

__all__ = [
    "Activity",
    "Cutoffs",
    "DeadLetterFilter",
    "Demand",
    "FleetStatus",
    "JudgeCost",
    "MonitorOptions",
    "PurgeReport",
    "Purger",
    "QueueProbe",
    "QueueReading",
    "QueueStatus",
    "Recommendation",
    "ReplayReport",
    "RetentionPolicy",
    "StatusMonitor",
    "StoredDeadLetter",
    "build_status",
    "count_completed",
    "count_dead_letters",
    "dead_letter_json",
    "iter_dead_letters",
    "open_queue_probe",
    "purge_dead_letters",
    "read_activity",
    "recommend",
    "recommend_fleet",
    "replay_dead_letters",
    "replay_jobs",
    "status_json",
]
