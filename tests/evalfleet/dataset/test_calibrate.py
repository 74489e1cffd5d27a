"""``evalfleet calibrate --dataset``: a dataset's labelled items judged through the fleet."""

from __future__ import annotations

import json
from collections.abc import Callable

from click.testing import CliRunner

from evalfleet.cli import main
from evalfleet.core.settings import Settings
from evalfleet.judgesim import RunningSim
from evalfleet.store import SqlStore
from evalfleet.store.queries.datasets import Datasets, Selection
from evalfleet.store.queries.review_queue import LabelValue, ReviewQueue
from tests.evalfleet.store.queries.test_datasets import NOW, record
from tests.helpers import WorkerProcess


def test_calibrate_judges_a_datasets_labelled_items(
    settings: Settings, sim: RunningSim, start_worker: Callable[..., WorkerProcess],
    store: SqlStore,
) -> None:
    store.save(verdicts=[record(f"s-{i}", score=i / 4, minutes=i) for i in range(5)],
               owner="w")
    queue = ReviewQueue(store)
    queue.queue_chosen(reason="ids", detail=None, now=NOW, expire_s=3600,
                       sample_ids=["s-0", "s-1", "s-2"])
    for item in queue.iter_items():
        queue.label(item_id=item.id, reviewer="ann",
                    labels={"faithfulness": LabelValue(1.0, 1.0)}, comment=None,
                    source="import", now=NOW, require_lease=False)
    sets = Datasets(store)
    sets.create("labelled", sets.select(Selection()), note="all", now=NOW)
    start_worker(settings, queues=["rag_qa"])
    result = CliRunner().invoke(main, [
        "calibrate", "--metric", "rag_qa", "--dataset", "labelled", "--judge-model",
        "judge-cal", "--timeout", "120", "--json"], env=settings.as_environment())
    assert result.exit_code == 0, result.stderr
    (report,) = json.loads(result.stdout)
    # The three labelled items of five were the gold set, judged through the fleet.
    assert (report["items"], report["gold"]) == (3, "labelled.jsonl")
    assert "gold set: 3 labelled item(s) of dataset labelled" in result.stderr
    assert sim.stats()["requests"] == 3
