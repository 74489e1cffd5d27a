"""What ranking an incident's causes outside the segment tree costs a cycle.

Setup: a database of its own (``evalfleet_bench_explain``, dropped at the end) migrated
to head; ``--segments`` apps (300) at each of ``--rates`` samples a minute (1, 10, 100)
over one 10-minute window, half the apps judged by one judge model and half by another,
each sample with one of three prompt versions; loaded in SQL (the rollups' triggers on).
Timed, median of ``--repeats`` (5): the window's summaries every cycle reads
(``fetch_summaries``, split by ``app``), and the extra read of a cycle with an
incident (``fetch_explained``) by ``prompt_version`` (a sample attribute) and by
``judge_model`` (the verdict's own: in the rollups' key since revision 0024; from the
score rows before), both from the rollups, under the whole traffic (an incident headed
by ``(all)``: the worst case) and under one app.

    python -m bench.incident_explain
    python -m bench.incident_explain --rates 10 --segments 100
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import psycopg

from evalfleet.alerts.segment import Segment
from evalfleet.alerts.window import WindowQuery, fetch_explained, fetch_summaries
from evalfleet.store import migrate, open_store
from evalfleet.store.partitions import ensure_partitions

ADMIN = "postgresql://postgres@127.0.0.1:5432/postgres"
DATABASE = "evalfleet_bench_explain"
URL = f"postgresql+psycopg://postgres@127.0.0.1:5432/{DATABASE}"
AT = datetime(2026, 11, 20, 12, 0, tzinfo=UTC)
WINDOW = timedelta(minutes=10)
QUERY = WindowQuery(metric="rag_qa", score="faithfulness", keys=("app",))

_LOAD = """
INSERT INTO verdicts (id, sample_id, metric, prompt_version, judge_model, status, scores,
                      raw_scores, attempts, latency_ms, attributes, sample_ts, created_at)
SELECT g, 's' || g, 'rag_qa', 'p1', CASE WHEN mod(g, %(segments)s) * 2 < %(segments)s
       THEN 'j2' ELSE 'j1' END, 'ok', '{}', '{}', 1, 1,
       jsonb_build_object('app', 'app-' || mod(g, %(segments)s), 'prompt_version',
                          'v' || mod(g, 3)),
       %(start)s + (g - 1) * %(step)s, %(start)s + (g - 1) * %(step)s
FROM generate_series(1, %(n)s) AS g
"""

_SCORES = """
INSERT INTO verdict_scores (verdict_id, name, metric, value, sample_ts, created_at)
SELECT id, 'faithfulness', 'rag_qa', random(), sample_ts, created_at FROM verdicts
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--segments", type=int, default=300)
    parser.add_argument("--rates", type=int, nargs="+", default=[1, 10, 100])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    print(f"setup: {platform.platform()}, {os.cpu_count()} cores, Postgres at 127.0.0.1; "
          f"{args.segments} apps, 10-minute window; load average {os.getloadavg()}")
    print("rate/min  window rows  summaries ms  prompt_version (all) ms"
          "  judge_model (all) ms  judge_model (one app) ms")
    with psycopg.connect(ADMIN, autocommit=True) as admin:
        admin.execute(f"DROP DATABASE IF EXISTS {DATABASE} WITH (FORCE)")
        admin.execute(f"CREATE DATABASE {DATABASE}")
    store = open_store(URL)
    try:
        migrate(store.engine)
        with store.engine.begin() as conn:
            ensure_partitions(conn, now=AT, since=AT - timedelta(days=1), days_ahead=1)
        for rate in args.rates:
            n = _load(rate=rate, segments=args.segments)
            with store.engine.connect() as conn:
                def timed(read: Callable[[], object]) -> float:
                    return _median_ms(read, repeats=args.repeats)
                summaries = timed(lambda: fetch_summaries(conn, QUERY, start=AT - WINDOW,
                                                          end=AT))
                version, judge, one = (timed(lambda e=e, h=h: fetch_explained(
                    conn, QUERY, explain=(e,), heads=[h], start=AT - WINDOW, end=AT))
                    for e, h in (("prompt_version", Segment()), ("judge_model", Segment()),
                                 ("judge_model", Segment.of({"app": "app-1"}))))
            print(f"{rate:>8}  {n:>11,}  {summaries:>12.1f}  {version:>23.1f}"
                  f"  {judge:>20.1f}  {one:>24.1f}", flush=True)
    finally:
        store.close()
        with psycopg.connect(ADMIN, autocommit=True) as admin:
            admin.execute(f"DROP DATABASE IF EXISTS {DATABASE} WITH (FORCE)")


def _load(*, rate: int, segments: int) -> int:
    n = rate * segments * int(WINDOW / timedelta(minutes=1))
    with psycopg.connect(URL.replace("+psycopg", ""), autocommit=True) as conn:
        conn.execute("TRUNCATE verdicts, verdict_scores, score_rollups")
        conn.execute(_LOAD, {"segments": segments, "n": n, "start": AT - WINDOW,
                             "step": WINDOW / n})
        conn.execute(_SCORES)
        conn.execute("VACUUM ANALYZE")
    return n


def _median_ms(read: Callable[[], object], *, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        read()
        times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times)


if __name__ == "__main__":
    main()
