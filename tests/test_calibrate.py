"""``evalfleet calibrate`` through the fleet: real queues, a worker, Postgres, the simulator."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import psycopg
import pytest
from click.testing import CliRunner

from evalfleet.cli import main
from evalfleet.core.agreement import agreement
from evalfleet.core.gold import bundled_gold, load_gold
from evalfleet.core.metric import load_registry
from evalfleet.core.sample import parse_sample
from evalfleet.core.settings import Settings, ShadowJudge
from evalfleet.judgesim import RunningSim, simulated_scores
from evalfleet.store import VerdictStore
from producers.dispatcher import shadows
from tests.helpers import WorkerProcess, wait_until
from workers.renderer import render_messages


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


def test_a_shadow_judge_is_compared_with_the_current_one(
    settings: Settings, sim: RunningSim, start_worker: Callable[..., WorkerProcess],
    tmp_path: Path,
) -> None:
    # The shadow scores every 0..1 score 0.1 higher than the current judge (clamped at 1).
    sim.configure(score_shifts={"judge-shadow": 0.1})
    shadowed = settings.model_copy(update={"shadow_judges": {
        "rag_qa": ShadowJudge(model="judge-shadow", share=0.5)}})
    samples = [{"id": f"s-{n}", "input": f"question {n} about refunds",
                "output": f"Refunds take {n} days" + " and are free" * (n % 3),
                "context": [f"Refunds take {n % 5} days."], "reference": "a week"}
               for n in range(40)]
    path = tmp_path / "s.jsonl"
    path.write_text("".join(json.dumps(sample) + "\n" for sample in samples))
    assert run_cli(shadowed, "produce", str(path), "--metric", "rag_qa")[0] == 0
    start_worker(shadowed, queues=["rag_qa"])
    shadow_ids = [s["id"] for s in samples if shadows(s["id"], share=0.5)]
    assert 10 <= len(shadow_ids) <= 30
    wait_until(lambda: sim.stats()["requests"] == 40 + len(shadow_ids), timeout_s=60,
               what="every production and shadow call")
    wait_until(lambda: len(run_cli(shadowed, "export", "--purpose", "shadow")[1].splitlines())
               == len(shadow_ids), timeout_s=30, what="shadow verdicts stored")
    assert len(run_cli(shadowed, "export")[1].splitlines()) == 40  # production only
    code, out, err = run_cli(shadowed, "calibrate", "--compare", "--metric", "rag_qa", "--json")
    assert code == 0, err
    (report,) = json.loads(out)["shadows"]
    assert (report["judge_model"], report["gold"], report["items"]) == (
        "judge-shadow", "judge:gpt-4o-mini", len(shadow_ids))
    metric = load_registry().get("rag_qa")
    current = [simulated_scores(render_messages(metric, parse_sample(s)))["faithfulness"]
               for s in samples if s["id"] in shadow_ids]
    shifted = [round(min(1.0, value + 0.1), 2) for value in current]
    expected = agreement(shifted, current, kind="continuous")
    bias = report["scores"]["faithfulness"]["statistics"]["bias"]
    assert bias["value"] == pytest.approx(expected.statistics["bias"].value)
    assert 0.0 < bias["value"] <= 0.1


def test_compare_without_shadow_verdicts_says_how_to_get_them(settings: Settings) -> None:
    code, _, err = run_cli(settings, "calibrate", "--compare", "--metric", "rag_qa")
    assert code == 1 and "EVALFLEET_SHADOW_JUDGES" in err
