"""Check metrics end to end on real services: produce, worker, Postgres, export, beside a
judged metric on the same samples, with no judge call for the checks."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from pathlib import Path

from evalfleet.core.metric import load_registry
from evalfleet.core.settings import Settings
from evalfleet.judgesim import RunningSim
from tests.helpers import WorkerProcess, wait_until
from tests.test_fleet import cli, export, make_samples, write_jsonl
from tests.workers.checks.builders import contract_metrics


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
              load_registry(settings.metrics_dir).get("output_contract").checks}
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
