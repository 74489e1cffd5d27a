"""How long saving and exporting a dataset takes, on Postgres and the embedded SQLite.

Setup: a store of its own per backend (a PostgreSQL database ``evalfleet_bench_datasets``
dropped at the end, and a SQLite file in a temporary folder), migrated to head and loaded
through the store's own ``save`` with ``--verdicts`` rag_qa verdicts (20,000 by default)
that keep their samples, one in ten labelled by a reviewer in the review queue.

Printed per backend: the load time, then the time to select and copy every verdict into a
new dataset (version 1), to add ``--add`` more as version 2, to read version 1 back, and
to write each export format (JSONL, CSV, OpenAI fine-tuning lines, the gold file), with
items per second.

    python -m bench.datasets                      # 20,000 verdicts
    python -m bench.datasets --verdicts 2000      # a quick look
"""

from __future__ import annotations

import argparse
import io
import json
import platform
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from tempfile import TemporaryDirectory
from typing import Any

import psycopg

from evalfleet.core.metric import load_registry
from evalfleet.dataset import csv_rows, finetune_records, gold_records, jsonl_records
from evalfleet.store import SqlStore, VerdictKey, VerdictRecord, migrate, open_store
from evalfleet.store.queries.datasets import Datasets, Selection
from evalfleet.store.queries.review_queue import LabelValue, ReviewQueue

POSTGRES_ADMIN = "postgresql://postgres@127.0.0.1:5432/postgres"
DATABASE = "evalfleet_bench_datasets"
NOW = datetime(2026, 11, 22, 12, 0, tzinfo=UTC)


def verdict(n: int) -> VerdictRecord:
    """One rag_qa verdict with its sample, as a worker stores it."""
    scores = {"faithfulness": (n % 10) / 10, "context_relevance": 0.8,
              "answer_relevance": 0.7, "semantic_similarity": None}
    return VerdictRecord(
        key=VerdictKey(f"s-{n}", "rag_qa", "v1", "judge-1"), status="ok", error_class=None,
        error=None, reason=f"explanation {n} " + "the answer follows the context. " * 4,
        scores=scores, raw_scores=scores, raw_output="{}", attempts=1, latency_ms=5,
        prompt_tokens=None, completion_tokens=None, attributes={"app": f"app-{n % 4}"},
        sample_ts=NOW + timedelta(seconds=n), created_at=NOW + timedelta(seconds=n),
        sample={"input": f"question {n}?", "output": "an answer " * 20,
                "context": ["chunk one " * 30, "chunk two " * 30], "reference": None,
                "fields": {"evaluation_goal": "balanced"}})


def load(store: SqlStore, count: int) -> None:
    """``count`` verdicts; one in ten labelled."""
    for start in range(0, count, 1000):
        store.save(verdicts=[verdict(n) for n in range(start, min(start + 1000, count))],
                   owner="bench")
    queue = ReviewQueue(store)
    labelled = [f"s-{n}" for n in range(0, count, 10)]
    queue.queue_chosen(reason="ids", detail=None, now=NOW, expire_s=86400,
                       sample_ids=labelled, limit=len(labelled))
    for item in list(queue.iter_items()):
        queue.label(item_id=item.id, reviewer="ann",
                    labels={"faithfulness": LabelValue(1.0, 1.0)}, comment=None,
                    source="import", now=NOW, require_lease=False)


def timed(label: str, items: int, step: Callable[[], Any]) -> Any:
    started = time.perf_counter()
    result = step()
    elapsed = time.perf_counter() - started
    print(f"  {label:<28} {elapsed:7.2f} s  {items / elapsed:>9,.0f} items/s")
    return result


def run(store: SqlStore, *, verdicts: int, added: int) -> None:
    registry = load_registry()
    timed("load verdicts + labels", verdicts, lambda: load(store, verdicts))
    sets = Datasets(store)
    first = verdicts - added
    timed("create (select + copy)", first, lambda: sets.create(
        "bench", sets.select(Selection(limit=first)), note="bench", now=NOW))
    timed("add (version 2)", added, lambda: sets.add(
        "bench", sets.select(Selection(since=NOW + timedelta(seconds=first), limit=added)),
        note="add", now=NOW))
    items = timed("read version 1", first, lambda: list(sets.items("bench", version=1)))

    def write(lines: Iterator[str]) -> int:
        out = io.StringIO()
        for line in lines:
            out.write(line)
        return len(out.getvalue())

    def as_lines(records: Iterator[dict[str, Any]]) -> Iterator[str]:
        return (json.dumps(record, ensure_ascii=False) + "\n" for record in records)

    timed("export jsonl", first, lambda: write(as_lines(jsonl_records(
        items, registry=registry, secrets=["sk-x"]))))
    timed("export csv", first, lambda: write(csv_rows(jsonl_records(
        items, registry=registry, secrets=["sk-x"]))))
    timed("export openai", first, lambda: write(as_lines(finetune_records(
        items, registry=registry, secrets=["sk-x"]))))
    timed("export gold", first, lambda: write(as_lines(gold_records(
        items, registry=registry, metric="rag_qa", secrets=["sk-x"]))))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--verdicts", type=int, default=20_000)
    parser.add_argument("--add", type=int, default=1_000)
    args = parser.parse_args()
    print(f"setup: {args.verdicts:,} rag_qa verdicts with samples, 1 in 10 labelled; "
          f"version 1 of {args.verdicts - args.add:,}, version 2 adds {args.add:,}; "
          f"python {platform.python_version()}, {platform.machine()}")
    with psycopg.connect(POSTGRES_ADMIN, autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{DATABASE}"')
        admin.execute(f'CREATE DATABASE "{DATABASE}"')
    try:
        url = f"postgresql+psycopg://postgres@127.0.0.1:5432/{DATABASE}"
        print("postgres")
        store = open_store(url)
        migrate(store.engine)
        run(store, verdicts=args.verdicts, added=args.add)
        store.close()
    finally:
        with psycopg.connect(POSTGRES_ADMIN, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{DATABASE}" WITH (FORCE)')
    with TemporaryDirectory() as folder:
        print("sqlite")
        store = open_store(f"sqlite:///{Path(folder) / 'bench.db'}")
        migrate(store.engine)
        run(store, verdicts=args.verdicts, added=args.add)
        store.close()


if __name__ == "__main__":
    main()
