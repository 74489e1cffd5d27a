"""A fleet on this machine for one command's run: the judge simulator and a worker process.

``evalfleet demo`` and ``evalfleet calibrate --start-worker`` use it so that one
command works with nothing running; the worker is a real ``evalfleet worker``
process on the configured broker and store.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Sequence
from contextlib import ExitStack
from pathlib import Path

from evalfleet.core.settings import Settings
from evalfleet.core.simulator import SIMULATOR_NAME
from evalfleet.judgesim import SimConfig, start_in_thread

#: Seconds a worker gets to finish its jobs after SIGTERM before it is killed.
STOP_GRACE_S = 20.0


#: The judge model the demo asks the simulator for, so its verdicts name it.
SIMULATOR_MODEL = SIMULATOR_NAME


def start_simulator(stack: ExitStack) -> str:
    """Start the judge simulator in a thread until ``stack`` closes.

    Returns:
        Its base URL (an ``OPENAI_BASE_URL``).
    """
    sim = start_in_thread(SimConfig.build({"latency": "lognormal", "latency_median_ms": 60,
                                           "latency_p99_ms": 400}))
    stack.callback(sim.stop)
    return sim.base_url


def start_worker(settings: Settings, *, queues: Sequence[str], concurrency: int,
                 log_path: Path) -> subprocess.Popen[bytes]:
    """Start ``evalfleet worker`` for ``queues`` with ``settings``, logging to ``log_path``.

    Returns:
        The process; stop it with :func:`stop_worker`.
    """
    env = {**os.environ, **settings.as_environment()}
    command = [sys.executable, "-m", "evalfleet", "worker", "--queues", ",".join(queues),
               "--concurrency", str(concurrency), "--loglevel", "INFO"]
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with log_path.open("ab") as log:
        return subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT)


def stop_worker(worker: subprocess.Popen[bytes]) -> None:
    """SIGTERM, a grace period for the jobs in hand, then SIGKILL."""
    if worker.poll() is None:
        worker.send_signal(signal.SIGTERM)
        try:
            worker.wait(timeout=STOP_GRACE_S)
        except subprocess.TimeoutExpired:
            worker.kill()
            worker.wait()
