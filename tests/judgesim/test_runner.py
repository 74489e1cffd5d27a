"""Running the simulator: in a background thread for tests, and from the command line."""

from __future__ import annotations

import signal
import subprocess
import sys
from typing import Any

import httpx
import pytest

from evalfleet.judgesim import (
    InvalidScript,
    InvalidSimConfig,
    RunningSim,
    SimConfig,
    run_judge_sim,
    start_in_thread,
)


def test_start_in_thread_picks_a_free_port_and_stop_ends_serving() -> None:
    with start_in_thread(SimConfig(models=("a", "b"))) as sim:
        assert sim.host == "127.0.0.1" and sim.port > 0
        assert sim.base_url == f"http://127.0.0.1:{sim.port}/v1"
        with httpx.Client(base_url=sim.base_url, trust_env=False, timeout=10) as client:
            assert [m["id"] for m in client.get("/models").json()["data"]] == ["a", "b"]
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"{sim.base_url}/models", trust_env=False, timeout=2)


def test_a_port_in_use_cannot_be_bound(running: RunningSim) -> None:
    with pytest.raises(OSError):
        start_in_thread(port=running.port)


def test_configure_and_current_config(judge: RunningSim) -> None:
    config = judge.configure(latency_ms=1, models=["x"])
    assert (config.latency_ms, config.models) == (1, ("x",))
    assert judge.current_config() == config
    judge.reset()
    assert judge.current_config() == config


def test_error_replies_are_raised_as_the_matching_exception(judge: RunningSim) -> None:
    with pytest.raises(InvalidSimConfig, match="malformed_rate"):
        judge.configure(malformed_rate=7)
    with pytest.raises(InvalidScript):
        judge.script([{"match": "x", "replies": []}])
    assert judge.current_config() == SimConfig()


def test_run_judge_sim_rejects_a_bad_option_before_serving() -> None:
    with pytest.raises(InvalidSimConfig, match="no_such_knob"):
        run_judge_sim(port=0, seed=None, models=(), no_such_knob=1)


def test_command_line_entry_prints_its_address(tmp_path: Any) -> None:
    code = ("from evalfleet.judgesim import run_judge_sim; "
            "run_judge_sim(host='127.0.0.1', port=0, seed=None, models=(), latency_ms=1)")
    process = subprocess.Popen([sys.executable, "-c", code], stderr=subprocess.PIPE, text=True)
    try:
        assert process.stderr is not None
        line = process.stderr.readline().strip()
        assert line.startswith("judge-sim listening on http://127.0.0.1:") and line.endswith("/v1")
        base_url = line.rsplit(" ", 1)[1]
        with httpx.Client(base_url=base_url, trust_env=False) as client:
            assert client.get("/models").status_code == 200
    finally:
        process.terminate()
        process.wait(timeout=10)
    # uvicorn stops gracefully, then re-raises the signal so the exit status tells why.
    assert process.returncode == -signal.SIGTERM
