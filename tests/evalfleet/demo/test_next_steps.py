"""The demo runs on the embedded default with nothing configured, and its closing commands
work when pasted into a fresh shell, as README command 1 left it: in the folder it ran
in, the virtual environment never activated. (One demo run serves both: it is the
slowest thing a new user runs.)"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from importlib import resources
from pathlib import Path

import httpx
import pytest

from evalfleet.cli.demo import own_command
from evalfleet.demo.runner import DEMO_METRICS
from evalfleet.localfleet import SIMULATOR_MODEL
from testkit.judge_server import free_port

#: Longest the page may take to answer once started, in seconds.
UI_START_S = 60.0


@pytest.mark.parametrize(("argv0", "expected"), [
    (".venv/bin/evalfleet", ".venv/bin/evalfleet"),
    ("/opt/my tools/bin/evalfleet", "'/opt/my tools/bin/evalfleet'"),
    ("evalfleet", "evalfleet"),
    ("/x/site-packages/evalfleet/__main__.py", "/v/bin/python -m evalfleet"),
])
def test_the_command_is_the_one_the_user_ran(argv0: str, expected: str) -> None:
    assert own_command(argv0, executable="/v/bin/python") == expected


def fresh_shell_env(home: Path) -> dict[str, str]:
    """A new terminal's environment: no virtual environment on the PATH, no settings."""
    venv_bin = str(Path(sys.executable).parent)
    path = [p for p in os.environ.get("PATH", "/usr/bin:/bin").split(":") if p != venv_bin]
    return {"PATH": ":".join(path), "HOME": str(home), "LANG": "C.UTF-8"}


def readme_excerpt() -> list[str]:
    """The demo output the README shows (the block that starts with a FIRING line)."""
    readme = (Path(__file__).resolve().parents[3] / "README.md").read_text(encoding="utf-8")
    block = readme.split("```\nFIRING at", 1)[1].split("```", 1)[0]
    return ("FIRING at" + block).splitlines()


def bundled_samples() -> int:
    """Samples in the demo's bundled traffic."""
    text = (resources.files("evalfleet.demo") / "samples.jsonl").read_text("utf-8")
    return len(text.splitlines())


def printed_commands(out: str) -> list[str]:
    block = out.split("Look closer (the same data, nothing else to configure):\n", 1)[1]
    return [line.strip() for line in block.splitlines() if line.startswith("  ")]


def test_the_printed_next_steps_run_as_printed(tmp_path: Path) -> None:
    # README command 1 leaves `.venv/bin/evalfleet` in the folder the user is in.
    (tmp_path / ".venv").symlink_to(Path(sys.executable).parent.parent)
    env = fresh_shell_env(tmp_path)
    demo = subprocess.run(["bash", "-c", ".venv/bin/evalfleet demo"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=600, check=False)
    assert demo.returncode == 0, demo.stdout + demo.stderr
    assert_the_demo_ran_on_the_embedded_default(demo.stdout, tmp_path)
    printed = demo.stdout.splitlines()
    for line in readme_excerpt():
        if line.strip() != "...":  # the README leaves out lines and line ends
            shown = line.removesuffix(" ...")
            assert any(out.startswith(shown) for out in printed), line
    setup, show, ui, reviewer = printed_commands(demo.stdout)
    assert setup.startswith("export ") and show.startswith(".venv/bin/evalfleet alerts show ")
    assert ui.startswith(".venv/bin/evalfleet ui ")
    assert reviewer.startswith(".venv/bin/evalfleet review add-reviewer ")

    shown = subprocess.run(["bash", "-c", f"{setup}\n{show}"], cwd=tmp_path, env=env,
                           capture_output=True, text=True, timeout=120, check=False)
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.startswith("support_faithfulness_drop  prompt_version=v12,app=support-bot")
    # What needs a person comes first in the list, as on the overview page.
    listed = subprocess.run(["bash", "-c", f"{setup}\n.venv/bin/evalfleet alerts list"],
                            cwd=tmp_path, env=env, capture_output=True, text=True,
                            timeout=120, check=True).stdout.splitlines()
    assert [row.split()[2] for row in listed[1:3]] == ["firing", "firing"]
    assert {row.split()[2] for row in listed[3:]} == {"insufficient_data"}
    as_json = subprocess.run(["bash", "-c", f"{setup}\n{show} --json"], cwd=tmp_path, env=env,
                             capture_output=True, text=True, timeout=120, check=True)
    view = json.loads(as_json.stdout)
    assert (view["state"], view["since"]) == ("firing", "2026-11-21T12:15:00Z")
    assert [row["sample_id"] for row in view["worst"]][:1] == ["demo-0299"]
    assert all(row["sample_ts"].endswith("Z") for row in view["worst"])

    # Status reads the demo's own queue folder: a count, drained, not '?'.
    status = subprocess.run(["bash", "-c", f"{setup}\n.venv/bin/evalfleet status --sample 0 "
                             "--metric rag_qa"], cwd=tmp_path, env=env, capture_output=True,
                            text=True, timeout=120, check=True).stdout
    row = next(line for line in status.splitlines() if line.startswith("eval.rag_qa "))
    assert row.split()[1] == "0", status
    assert "embedded broker: jobs a worker holds" in status and "nothing published" not in status
    assert "EVALFLEET_DATA_DIR='" in setup

    # The verdicts say the simulator judged them, under its one name.
    exported = subprocess.run(["bash", "-c", f"{setup}\n.venv/bin/evalfleet export"],
                              cwd=tmp_path, env=env, capture_output=True, text=True,
                              timeout=120, check=True)
    rows = [json.loads(line) for line in exported.stdout.splitlines()]
    assert len(rows) == len(DEMO_METRICS) * bundled_samples()
    assert {(row["judge_model"], row["judge_simulated"]) for row in rows} == {
        (SIMULATOR_MODEL, True)}

    # As printed, on a port of its own: another server on the printed 8500 must not fail
    # the test or answer in its place.
    port = free_port()
    command = ui.split("#", 1)[0].strip()
    page = subprocess.Popen(["bash", "-c", f"{setup}\nexec {command} --port {port}"],
                            cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, start_new_session=True)
    try:
        assert "FIRING" in wait_for_page(f"http://127.0.0.1:{port}/", page)
        # The review queue holds every rag_qa verdict; the printed reviewer's token reads it.
        token = subprocess.run(["bash", "-c", f"{setup}\n{reviewer}"], cwd=tmp_path,
                               env=env, capture_output=True, text=True, timeout=120,
                               check=True).stdout.strip()
        pending = httpx.get(f"http://127.0.0.1:{port}/review/pending?limit=1000",
                            headers={"Authorization": f"Bearer {token}"}, timeout=30)
        assert pending.status_code == 200, pending.text
        assert {item["metric"] for item in pending.json()["items"]} == {"rag_qa"}
        assert len(pending.json()["items"]) == bundled_samples()
    finally:
        os.killpg(page.pid, signal.SIGTERM)
        page.wait(timeout=30)


def assert_the_demo_ran_on_the_embedded_default(out: str, folder: Path) -> None:
    """Nothing configured: the simulator judged, SQLite and the file-system broker held
    everything, every bundled sample was judged, and the planted drop fired alone with
    its evidence."""
    assert "SIMULATED" in out
    assert "embedded SQLite file" in out
    assert "embedded file-system broker" in out
    assert (folder / ".evalfleet" / "demo" / "evalfleet.db").exists()
    table = [line.split() for line in out.splitlines() if line.startswith("rag_qa ")]
    assert len(table) >= 6
    assert sum(int(row[4]) for row in table) + sum(int(row[5]) for row in table) == \
        bundled_samples()
    # The planted drop (support-bot's v12 answers add unsupported claims) fires...
    assert "FIRING at 2026-11-21" in out
    assert "support_faithfulness_drop prompt_version=v12,app=support-bot" in out
    assert "v11,app=" not in out.split("FIRING", 1)[1].split("\n\n")[0]  # nothing else fired
    # ...and is shown with its evidence: worst samples, their text and the judge's why.
    evidence = out.split("worst samples of the window", 1)[1]
    samples = [line for line in evidence.splitlines() if line.lstrip()[:2] in ("1.", "2.")]
    assert len(samples) == 2 and all("prompt_version=v12" in line for line in samples)
    assert evidence.count("judge:") >= 2 and "not supported by the context" in evidence
    assert "evalfleet alerts show support_faithfulness_drop" in out
    assert "evalfleet ui" in out


def wait_for_page(url: str, page: subprocess.Popen[bytes]) -> str:
    deadline = time.monotonic() + UI_START_S
    while time.monotonic() < deadline:
        if page.poll() is not None:
            _, err = page.communicate()
            raise AssertionError(f"evalfleet ui exited {page.returncode}: {err.decode()}")
        try:
            with urllib.request.urlopen(url, timeout=5) as response:
                return str(response.read().decode("utf-8"))
        except OSError:
            time.sleep(0.2)
    raise AssertionError(f"{url} did not answer within {UI_START_S:.0f} s")
