"""Server time of the review page's steps on a large queue, and of the agreement figures.

Setup: a PostgreSQL database of its own (``evalfleet_bench_review``, dropped at the end)
migrated to head, and a review queue as the random slice of ``--verdicts`` rag_qa
verdicts leaves it at ``--rate`` (1% of 2,000,000 by default: 20,000 items), a share
``--labelled`` of them already labelled by one of five reviewers, then ``ANALYZE`` (as
autovacuum would on a live database). The review pages read
``review_items``, ``review_labels`` and ``review_skips`` only (items keep their own copy
of the sample and the judge's scores), so the verdicts themselves are not loaded.

Printed: the setup, then the median and p95 server time (``Server-Timing``: queries and
rendering) over ``--repeat`` rounds of each step a reviewer takes (the queue page, take
the next item, the item, label it, the judge's scores revealed), and how long
``live_agreement`` takes over the labelled items (what ``evalfleet review status``
computes, bootstrap intervals included).

    python -m bench.review_page                         # 20,000 items, 30% labelled
    python -m bench.review_page --verdicts 200000 --repeat 20
"""

from __future__ import annotations

import argparse
import os
import platform
import random
import statistics
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import psycopg

from evalfleet.cli.ui import build_ui_app
from evalfleet.core.live_agreement import REVIEWERS, live_agreement
from evalfleet.core.metric import load_registry
from evalfleet.core.settings import Settings
from evalfleet.store import migrate, open_store
from evalfleet.store.base import VerdictKey, VerdictRecord
from evalfleet.store.intake import insert_items, item_row
from evalfleet.store.queries.review_queue import LabelValue, ReviewQueue
from testkit.served import Served

POSTGRES_ADMIN = "postgresql://postgres@127.0.0.1:5432/postgres"
DATABASE = "evalfleet_bench_review"
SCORES = ("faithfulness", "context_relevance", "answer_relevance", "semantic_similarity")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--verdicts", type=int, default=2_000_000)
    parser.add_argument("--rate", type=float, default=0.01)
    parser.add_argument("--labelled", type=float, default=0.3)
    parser.add_argument("--repeat", type=int, default=50)
    args = parser.parse_args()
    with psycopg.connect(POSTGRES_ADMIN, autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{DATABASE}"')
        admin.execute(f'CREATE DATABASE "{DATABASE}"')
    url = f"postgresql+psycopg://postgres@127.0.0.1:5432/{DATABASE}"
    try:
        run(url, args)
    finally:
        with psycopg.connect(POSTGRES_ADMIN, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{DATABASE}" WITH (FORCE)')


def run(url: str, args: argparse.Namespace) -> None:
    items = int(args.verdicts * args.rate)
    print(f"setup: PostgreSQL, {items:,} review items (the {args.rate:.0%} random slice of "
          f"{args.verdicts:,} rag_qa verdicts), {args.labelled:.0%} labelled by 5 reviewers; "
          f"{os.cpu_count()} CPUs, Python {platform.python_version()}")
    store = open_store(url)
    migrate(store.engine)
    queue = ReviewQueue(store)
    started = time.perf_counter()
    fill(store, queue, items=items, labelled=args.labelled)
    with store.begin() as conn:  # the statistics autovacuum keeps on a live database
        conn.exec_driver_sql("ANALYZE")
    print(f"loaded and analysed in {time.perf_counter() - started:.1f} s")
    tokens = {f"r{n}": queue.add_reviewer(f"r{n}", now=datetime.now(UTC)) for n in range(5)}
    settings = Settings(database_url=url, review_secret="b" * 32)
    served = Served(build_ui_app(settings, token=None))
    try:
        times = walk(served.url, tokens["r0"], repeat=args.repeat)
    finally:
        served.stop()
    for step, values in times.items():
        values.sort()
        p95 = values[min(len(values) - 1, int(0.95 * len(values)))]
        print(f"  {step:<22} median {statistics.median(values):6.1f} ms   p95 {p95:6.1f} ms")
    started = time.perf_counter()
    found = live_agreement(queue.iter_items(), queue.iter_labels(), registry=load_registry())
    pairs = sum(a.items for a in found if a.judge_model != REVIEWERS)
    print(f"live agreement over {pairs:,} item-scores: {time.perf_counter() - started:.1f} s")
    store.close()


def fill(store: Any, queue: ReviewQueue, *, items: int, labelled: float) -> None:
    rng = random.Random(7)
    now = datetime.now(UTC) - timedelta(days=1)
    batch: list[dict[str, Any]] = []
    for n in range(items):
        scores = {name: round(rng.random(), 2) for name in SCORES}
        record = VerdictRecord(
            key=VerdictKey(f"req-{n}", "rag_qa", "v1", "judge-1"), status="ok",
            error_class=None, error=None, reason="the answer follows the context " * 5,
            scores=dict(scores), raw_scores=dict(scores), raw_output=None, attempts=1,
            latency_ms=1, prompt_tokens=None, completion_tokens=None,
            attributes={"app": f"app-{n % 10}"}, sample_ts=now, created_at=now,
            sample={"input": "a question " * 20, "output": "an answer " * 40,
                    "context": ["a chunk of context " * 30] * 3, "reference": None,
                    "fields": {}})
        batch.append(item_row(record, reason="random", detail=None, probability=0.01,
                              stratum=None, labels_wanted=1,
                              now=now + timedelta(milliseconds=n),
                              expires_at=now + timedelta(days=14)))
        if len(batch) == 2000:
            with store.begin() as conn:
                insert_items(conn, batch)
            batch = []
    if batch:
        with store.begin() as conn:
            insert_items(conn, batch)
    # Label a share, spread over the queue, as reviewers who came before would have.
    for item in list(queue.iter_items()):
        if rng.random() >= labelled:
            continue
        value = LabelValue(raw=0.5, value=0.5)
        queue.label(item_id=item.id, reviewer=f"r{rng.randrange(1, 5)}",
                    labels={name: value for name in SCORES}, comment=None, source="page",
                    now=now, require_lease=False)


def walk(url: str, token: str, *, repeat: int) -> dict[str, list[float]]:
    """A reviewer's rounds over HTTP; the server time of each step."""
    times: dict[str, list[float]] = {}
    client = httpx.Client(base_url=url, cookies={"evalfleet_reviewer": token}, timeout=30)

    def timed(step: str, response: httpx.Response) -> httpx.Response:
        assert response.status_code < 400, (step, response.status_code)
        value = response.headers["server-timing"].split("dur=")[1]
        times.setdefault(step, []).append(float(value))
        return response

    for _ in range(repeat):
        home = timed("GET /review", client.get("/review"))
        csrf = home.text.split('name="csrf" value="', 1)[1].split('"', 1)[0]
        taken = timed("POST take", client.post("/review/take", data={"csrf": csrf}))
        location = taken.headers["location"]
        page = timed("GET item", client.get(location))
        csrf = page.text.split('name="csrf" value="', 1)[1].split('"', 1)[0]
        form = {"csrf": csrf, "comment": "", **{f"score.{name}": "0.5" for name in SCORES}}
        labelled = timed("POST label", client.post(location + "/label", data=form))
        timed("GET revealed", client.get(labelled.headers["location"]))
    client.close()
    return times


if __name__ == "__main__":
    main()
