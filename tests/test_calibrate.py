"""``evalfleet calibrate`` through the fleet: real queues, a worker, Postgres, the simulator."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import psycopg
from click.testing import CliRunner

from evalfleet.calibration import agreement
from evalfleet.calibration.gold import bundled_gold, load_gold
from evalfleet.cli import main
from evalfleet.judgesim import RunningSim, simulated_scores
from evalfleet.metric import load_registry
from evalfleet.settings import Settings
from tests.helpers import WorkerProcess
from workers.renderer import render_messages
from workers.store import VerdictStore


def run_cli(settings: Settings, *args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, list(args), env=settings.as_environment(),
                                catch_exceptions=False)
    return result.exit_code, result.stdout, result.stderr


def test_calibration_reports_the_agreement_the_judge_implies(
    settings: Settings, sim: RunningSim, start_worker: Callable[..., WorkerProcess],
    store: VerdictStore, database_url: str,
) -> None:
    start_worker(settings, queues=["rag_qa"])
    code, out, err = run_cli(settings, "calibrate", "--metric", "rag_qa", "--judge-model",
                             "judge-cal", "--timeout", "120", "--json")
    assert code == 0, err
    (report,) = json.loads(out)
    assert (report["metric"], report["judge_model"], report["items"]) == (
        "rag_qa", "judge-cal", 24)
    # The simulator's scores are a function of the prompt: what it must have said.
    metric = load_registry().get("rag_qa")
    items, _ = load_gold(bundled_gold("rag_qa"), metric=metric)
    said = [simulated_scores(render_messages(metric, item.sample))["faithfulness"]
            for item in items]
    expected = agreement(said, [item.labels["faithfulness"] for item in items],
                         kind="continuous")
    measured = report["scores"]["faithfulness"]["statistics"]
    for name, estimate in expected.statistics.items():
        assert measured[name]["value"] == estimate.value, name
    assert measured["spearman"]["value"] > 0.5  # copied answers are faithful, made-up ones not
    assert sim.stats()["requests"] == 24
    # Calibration verdicts stay out of exports, dashboards and alerts...
    assert run_cli(settings, "export")[1] == ""
    exported = [json.loads(line) for line in
                run_cli(settings, "export", "--purpose", "calibration")[1].splitlines()]
    assert len(exported) == 24 and {v["purpose"] for v in exported} == {"calibration"}
    assert {v["judge_model"] for v in exported} == {"judge-cal"}
    with psycopg.connect(database_url.replace("+psycopg", "")) as conn:
        assert conn.execute("SELECT count(*) FROM verdict_scores").fetchone() == (0,)
    # ...and the report is kept.
    (kept,) = store.calibration_runs(metric="rag_qa")
    assert kept.report == report and kept.judge_model == "judge-cal"


def test_calibration_without_a_worker_says_what_to_start(settings: Settings,
                                                         tmp_path: Path) -> None:
    gold = tmp_path / "gold.jsonl"
    gold.write_text(bundled_gold("bbh_match").read_text().splitlines()[0] + "\n{bad\n")
    code, _, err = run_cli(settings, "calibrate", str(gold), "--metric", "bbh_match",
                             "--timeout", "2")
    assert code == 1
    assert "gold.jsonl: line 2" in err  # the bad record is named, the good one sent
    assert "0 of 1 gold samples judged" in err and "--start-worker" in err


def test_a_metric_without_a_shipped_gold_set_needs_a_file(settings: Settings) -> None:
    code, _, err = run_cli(settings, "calibrate", "--metric", "tone")
    assert code == 2 and "give a GOLD file" in err
