"""Check metrics end to end on real services: produce, worker, Postgres, export, beside a
judged metric on the same samples, with no judge call for the checks."""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest

from evalfleet.cli.ui import build_ui_app
from evalfleet.core.metric import load_registry
from evalfleet.core.settings import Settings
from evalfleet.judgesim import RunningSim
from testkit.served import Served
from tests.evalfleet.alerts.conftest import write_rules
from tests.helpers import WorkerProcess, wait_until
from tests.test_fleet import cli, export, make_samples, write_jsonl
from tests.workers.checks.builders import contract_metrics, install_team_package


def test_a_check_metric_and_a_judged_metric_on_the_same_samples(
    settings: Settings, sim: RunningSim, start_worker: Callable[..., WorkerProcess],
    tmp_path: Path,
) -> None:
    settings = settings.model_copy(update={"metrics_dir": contract_metrics(tmp_path)})
    samples = make_samples(40)
    for n, sample in enumerate(samples):  # every fourth answer leaks a key
        leak = " sk-" + "x" * 24 if n % 4 == 0 else ""
        sample["output"] = f'{{"answer": "{sample["output"]}{leak}", "sources": ["p.md"]}}'
    result = cli(settings, "produce", str(write_jsonl(tmp_path / "s.jsonl", samples)),
                 "--metric", "rag_qa", "--metric", "output_contract")
    assert result.exit_code == 0, result.output
    start_worker(settings, queues=["rag_qa", "output_contract"], concurrency=8)
    wait_until(lambda: len(export(settings)) == 40 * 6, timeout_s=120, what="240 verdicts")
    checks = {check.name: check for check in
              load_registry(settings.judge.metrics_dir).get("output_contract").checks}
    verdicts = export(settings, "--metric", "output_contract")
    assert Counter(v["judge_model"] for v in verdicts) == {f"check:{n}": 40 for n in checks}
    for verdict in verdicts:
        name = verdict["judge_model"].removeprefix("check:")
        assert verdict["prompt_version"] == checks[name].version
        assert verdict["status"] == "ok" and verdict["reason"], verdict
        assert verdict["prompt_tokens"] is None and verdict["attributes"]["prompt_version"] == "v12"
        leaked = int(verdict["sample_id"].split("-")[1]) % 4 == 0
        expected = 0.0 if name == "no_api_key" and leaked else 1.0
        assert verdict["scores"] == {name: expected}, verdict
    judged = export(settings, "--metric", "rag_qa")
    assert len(judged) == 40 and {v["status"] for v in judged} == {"ok"}
    assert sim.stats()["requests"] == 40  # one per judged verdict, none for the checks
    status = json.loads(cli(settings, "status", "--json", "--sample", "0", "--window", "1h",
                            "--metric", "output_contract", "--metric", "rag_qa").stdout)
    models = {queue["metric"]: queue["judge_model"] for queue in status["queues"]}
    assert models == {"output_contract": "check:*", "rag_qa": settings.judge.judge_model}
    cost = cli(settings, "cost").stdout.splitlines()
    (row,) = [line.split() for line in cost if " output_contract " in line]
    assert row[2:7] == ["200", "0", "-", "0", "0.0000"]  # verdicts, tokens, cached, cost


TEAM_METRIC = """\
name: team_checks
kind: check
checks:
  polite: {check: team, entry_point: polite}
  spins: {check: team, entry_point: spins, timeout_s: 0.5}
  raises: {check: team, entry_point: raises}
  seven: {check: team, entry_point: seven}
"""


def test_team_checks_in_a_worker_fail_by_name_and_the_worker_serves_on(
    settings: Settings, sim: RunningSim, start_worker: Callable[..., WorkerProcess],
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("PYTHONPATH", str(install_team_package(tmp_path / "site")))
    folder = tmp_path / "metrics"
    folder.mkdir()
    (folder / "team_checks.yaml").write_text(TEAM_METRIC)
    settings = settings.model_copy(update={"metrics_dir": folder})
    start_worker(settings, queues=["team_checks"], concurrency=4)
    for batch in ("a", "b"):  # the second batch finds the worker serving
        samples = make_samples(3, prefix=batch)
        result = cli(settings, "produce", str(write_jsonl(tmp_path / f"{batch}.jsonl", samples)),
                     "--metric", "team_checks")
        assert result.exit_code == 0, result.output
        wanted = 3 * 4 * (2 if batch == "b" else 1)
        wait_until(lambda: len(export(settings)) == wanted,  # noqa: B023 - waited for here
                   timeout_s=120, what=f"{wanted} team check verdicts")
    found = {(v["judge_model"], v["status"], v["error_class"]) for v in export(settings)}
    assert found == {("check:polite", "ok", None), ("check:spins", "failed", "check_timeout"),
                     ("check:raises", "failed", "check_raised"),
                     ("check:seven", "failed", "check_off_scale")}
    assert sim.stats()["requests"] == 0


AGENT_METRIC = """\
name: agent_contract
kind: check
checks:
  asks_weather: {check: tool_sequence, expected: [weather, weather], mode: subset}
  arguments_valid: {check: tool_arguments}
  never_deletes: {check: forbidden_tools, tools: [delete_user]}
  not_stuck: {check: repeated_calls, times: 3}
  short_run: {check: max_steps, max: 10}
  tools_work: {check: max_tool_errors, max: 0}
"""


def agent_trajectory(n: int) -> dict[str, object]:
    """A weather agent's run: every third repeats one call, every fifth passes a number
    as the city and its tool fails."""
    city: object = 7 if n % 5 == 0 else "Oslo"
    calls = 3 if n % 3 == 0 else 2
    steps = [{"type": "tool", "name": "weather", "arguments": {"city": city},
              "result": "4 C, rain", "error": "bad city" if n % 5 == 0 else None}] * calls
    return {"steps": [{"type": "model", "model": "m-1"}, *steps],
            "tools": [{"name": "weather", "parameters": {
                "type": "object", "required": ["city"],
                "properties": {"city": {"type": "string"}}}}],
            "final_answer": "Rain in Oslo."}


def test_trajectory_checks_end_to_end(
    settings: Settings, sim: RunningSim, start_worker: Callable[..., WorkerProcess],
    tmp_path: Path,
) -> None:
    folder = tmp_path / "metrics"
    folder.mkdir()
    (folder / "agent_contract.yaml").write_text(AGENT_METRIC)
    settings = settings.model_copy(update={"metrics_dir": folder})
    samples = make_samples(12)
    for n, sample in enumerate(samples):  # the eleventh is a plain answer, no agent run
        if n != 11:
            sample["trajectory"] = agent_trajectory(n)
    result = cli(settings, "produce", str(write_jsonl(tmp_path / "agents.jsonl", samples)),
                 "--metric", "agent_contract")
    assert result.exit_code == 0, result.output
    start_worker(settings, queues=["agent_contract"], concurrency=4)
    wait_until(lambda: len(export(settings)) == 12 * 6, timeout_s=120, what="72 verdicts")
    checks = {check.name: check for check in
              load_registry(settings.judge.metrics_dir).get("agent_contract").checks}
    for verdict in export(settings):
        name = verdict["judge_model"].removeprefix("check:")
        n = int(verdict["sample_id"].split("-")[1])
        assert verdict["prompt_version"] == checks[name].version
        if n == 11:
            assert (verdict["status"], verdict["error_class"]) == ("failed", "no_trajectory")
            continue
        failing = {"not_stuck": n % 3 == 0, "short_run": False,
                   "arguments_valid": n % 5 == 0, "tools_work": n % 5 == 0}
        expected = 0.0 if failing.get(name) else 1.0
        assert verdict["status"] == "ok" and verdict["scores"] == {name: expected}, verdict
    assert sim.stats()["requests"] == 0


def test_an_alert_fires_on_a_check_metrics_rising_failure_rate_from_produce_to_worker(
    settings: Settings, sim: RunningSim, start_worker: Callable[..., WorkerProcess],
    tmp_path: Path,
) -> None:
    at = datetime(2026, 11, 21, 12, 0, tzinfo=UTC)
    rule = {"name": "key_leaks", "metric": "output_contract", "score": "no_api_key",
            "window": "10m", "min_samples": 30, "min_effect": 0.05, "mode": "baseline",
            "test": "fixed", "for": 1,
            "baseline": {"type": "trailing", "window": "2h", "gap": "10m"}}
    settings = settings.model_copy(update={
        "metrics_dir": contract_metrics(tmp_path),
        "alert_rules_file": write_rules(tmp_path / "rules.yaml", rule)})
    # 120 answers over the two hours before the window, one in 20 leaking a key; then 60
    # in the last ten minutes, one in 3 leaking.
    timed = [(at - timedelta(minutes=130) + n * timedelta(minutes=1), n % 20 == 0)
             for n in range(120)]
    timed += [(at - timedelta(minutes=10) + n * timedelta(seconds=10), n % 3 == 0)
              for n in range(60)]
    samples = make_samples(len(timed))
    for sample, (when, leaks) in zip(samples, timed, strict=True):
        leak = " sk-" + "x" * 24 if leaks else ""
        sample["timestamp"] = when.isoformat()
        sample["output"] = f'{{"answer": "{sample["output"]}{leak}", "sources": ["p.md"]}}'
    result = cli(settings, "produce", str(write_jsonl(tmp_path / "s.jsonl", samples)),
                 "--metric", "output_contract")
    assert result.exit_code == 0, result.output
    start_worker(settings, queues=["output_contract"], concurrency=8)
    wait_until(lambda: len(export(settings)) == 180 * 5, timeout_s=120, what="900 verdicts")
    fired = cli(settings, "alerts", "check", "--at", at.isoformat())
    assert fired.exit_code == 1, fired.output  # a segment is firing
    assert "key_leaks" in fired.output and "firing" in fired.output.lower()
    assert sim.stats()["requests"] == 0  # no judge call for any of it


NEW_USER_METRIC = """\
name: answer_contract
kind: check
checks:
  answer_schema: {check: json_schema, schema_file: answer.schema.json}
  no_api_key: {check: never_matches, pattern: 'sk-[A-Za-z0-9_-]{20,}'}
  polite: {check: team, entry_point: polite}
"""


def test_done_when_a_new_user_adds_a_check_metric_beside_a_judged_one(
    settings: Settings, sim: RunningSim, start_worker: Callable[..., WorkerProcess],
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Issue 36's "done when", as a new user goes: a schema check, a must-not-match pattern
    and the team's own check from an installed package, in one metric file beside the
    judged rag_qa; the verdicts in the export, status and the page (with the check's
    reason), an alert on the pattern's rising failure rate, and no judge call for them."""
    monkeypatch.setenv("PYTHONPATH", str(install_team_package(tmp_path / "site")))
    folder = contract_metrics(tmp_path)
    (folder / "answer_contract.yaml").write_text(NEW_USER_METRIC)
    at = datetime(2026, 11, 21, 12, 0, tzinfo=UTC)
    rule = {"name": "answer_leaks", "metric": "answer_contract", "score": "no_api_key",
            "window": "10m", "min_samples": 30, "min_effect": 0.05, "mode": "baseline",
            "test": "fixed", "for": 1,
            "baseline": {"type": "trailing", "window": "2h", "gap": "10m"}}
    settings = settings.model_copy(update={
        "metrics_dir": folder, "alert_rules_file": write_rules(tmp_path / "rules.yaml", rule)})
    # 120 answers over two hours, one in 20 leaking a key, then 60 in the last ten
    # minutes, one in 3 leaking; every other answer says please.
    timed = [(at - timedelta(minutes=130) + n * timedelta(minutes=1), n % 20 == 0)
             for n in range(120)]
    timed += [(at - timedelta(minutes=10) + n * timedelta(seconds=10), n % 3 == 0)
              for n in range(60)]
    samples = make_samples(len(timed))
    for n, (sample, (when, leaks)) in enumerate(zip(samples, timed, strict=True)):
        leak = " sk-" + "x" * 24 if leaks else ""
        polite = " Thank you, please ask again." if n % 2 == 0 else ""
        sample["timestamp"] = when.isoformat()
        sample["output"] = (f'{{"answer": "{sample["output"]}{polite}{leak}", '
                            f'"sources": ["p.md"]}}')
    result = cli(settings, "produce", str(write_jsonl(tmp_path / "s.jsonl", samples)),
                 "--metric", "rag_qa", "--metric", "answer_contract")
    assert result.exit_code == 0, result.output
    start_worker(settings, queues=["rag_qa", "answer_contract"], concurrency=8)
    wait_until(lambda: len(export(settings)) == 180 * 4, timeout_s=180, what="720 verdicts")

    verdicts = export(settings, "--metric", "answer_contract")
    assert Counter(v["judge_model"] for v in verdicts) == {
        "check:answer_schema": 180, "check:no_api_key": 180, "check:polite": 180}
    leaking = {f"req-{n:04d}" for n, (_, leaks) in enumerate(timed) if leaks}
    for verdict in verdicts:
        name = verdict["judge_model"].removeprefix("check:")
        assert verdict["status"] == "ok" and verdict["reason"], verdict
        assert verdict["cost_usd"] == 0 and verdict["prompt_tokens"] is None
        n = int(verdict["sample_id"].split("-")[1])
        expected = {"answer_schema": 1.0, "no_api_key": 0.0 if verdict["sample_id"] in leaking
                    else 1.0, "polite": 1.0 if n % 2 == 0 else 0.0}[name]
        assert verdict["scores"] == {name: expected}, verdict
    # Every judge call was rag_qa's (a re-asked reply counts in its verdict's attempts).
    judge_calls = sum(v["attempts"] for v in export(settings, "--metric", "rag_qa"))
    assert judge_calls >= 180 and sim.stats()["requests"] == judge_calls

    status = json.loads(cli(settings, "status", "--json", "--sample", "0", "--window", "1h",
                            "--metric", "answer_contract", "--metric", "rag_qa").stdout)
    models = {queue["metric"]: queue["judge_model"] for queue in status["queues"]}
    assert models == {"answer_contract": "check:*", "rag_qa": settings.judge.judge_model}
    cost = cli(settings, "cost").stdout.splitlines()
    (row,) = [line.split() for line in cost if " answer_contract " in line]
    assert row[2:7] == ["540", "0", "-", "0", "0.0000"]  # verdicts, tokens, cached, cost

    fired = cli(settings, "alerts", "check", "--at", at.isoformat())
    assert fired.exit_code == 1, fired.output  # firing
    assert "answer_leaks" in fired.output and "firing" in fired.output.lower()

    site = Served(build_ui_app(settings, token=None))
    try:
        alert = httpx.get(f"{site.url}/alerts/answer_leaks", timeout=10)
        assert alert.status_code == 200, alert.text[:500]
        assert "<b>check</b>" in alert.text  # the worst samples were scored by code
        assert "matches at offset" in alert.text  # the pattern check's reason
        (first, *_) = re.findall(r'href="/verdicts/(\d+)"', alert.text)
        page = httpx.get(f"{site.url}/verdicts/{first}", timeout=10)
    finally:
        site.stop()
    assert page.status_code == 200
    assert "The check&#39;s reason" in page.text or "The check's reason" in page.text
    assert 'id="scored-by-code"' in page.text and "No judge was called." in page.text
    reason = re.search(r'<pre class="text" id="reason">([^<]*)</pre>', page.text)
    assert reason is not None and reason.group(1) not in ("", "(none)")
    assert sim.stats()["requests"] == judge_calls
