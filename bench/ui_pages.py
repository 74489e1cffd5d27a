"""Server time of each ``evalfleet ui`` page on a large store, and the queries behind it.

Setup: a PostgreSQL database of its own (``evalfleet_bench_ui``, dropped at the end
unless ``--keep``) migrated to head and loaded with COPY through psycopg:
``--verdicts`` rag_qa verdicts (2,000,000 by default) with their faithfulness scores,
spread evenly over ``--days`` days ending now across ``--apps`` x ``--routes``
segments (10 x 20 = 200); values around 0.85, except one segment that drops to 0.60
for the last two hours. Samples are kept for the last day only (a sample retention
shorter than the verdicts'). The store is partitioned by day (``evalfleet.store.
partitions``) as one that ran partitioned for the whole span: the empty legacy
partition the migration made is dropped and the days of the span created before the
load; the verdict keys (``verdict_keys``) are loaded too. The GIN index on attributes
is built after the load, as ``CREATE INDEX`` on a filled table, and timed. Then the
alert engine runs ``--cycles`` cycles of a rule segmented by app and route (1h window,
trailing 1d baseline, every 5 minutes), each cycle timed, which fills the states,
transitions and the per-evaluation rollup (``alert_points``) the pages read.

Printed: the setup, the load and index times, the alert cycle's median and p95, then
per page the median and p95 of
``--repeat`` loads' server time (the page's ``Server-Timing``: queries and rendering,
not the network), and every SQL statement one load issued with its time; finally
``EXPLAIN (ANALYZE, BUFFERS)`` of the alert page's heaviest statement.

    python -m bench.ui_pages                          # 2,000,000 verdicts, 200 segments
    python -m bench.ui_pages --verdicts 200000 --repeat 5   # a quick look
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import statistics
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from tempfile import TemporaryDirectory
from typing import Any
from urllib.parse import urlencode

import httpx
import psycopg
from psycopg.types.json import Jsonb
from sqlalchemy import event, text

from evalfleet.alerts import open_alert_engine
from evalfleet.alerts.rule import load_rules
from evalfleet.core.settings import Settings
from evalfleet.store import VerdictKey, migrate, open_store
from evalfleet.store.partitions import LEGACY_SUFFIX, drop_partition, ensure_partitions
from evalfleet.web import UiOptions, create_app
from evalfleet.web.pages import PageData
from testkit.served import Served

POSTGRES_ADMIN = "postgresql://postgres@127.0.0.1:5432/postgres"

RULE = "bench_faithfulness"
RULES_YAML = f"""
rules:
  - name: {RULE}
    metric: rag_qa
    score: faithfulness
    segment_by: [app, route]
    window: 1h
    interval: 5m
    min_samples: 30
    min_effect: 0.05
    baseline: {{type: trailing, window: 1d}}
    for: 2
"""

#: Rows per COPY round.
CHUNK = 50_000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--verdicts", type=int, default=2_000_000)
    parser.add_argument("--days", type=float, default=7.0)
    parser.add_argument("--apps", type=int, default=10)
    parser.add_argument("--routes", type=int, default=20)
    parser.add_argument("--cycles", type=int, default=24)
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--database", default="evalfleet_bench_ui")
    parser.add_argument("--keep", action="store_true")
    parser.add_argument("--reuse", action="store_true", help="Use a --keep run's database.")
    args = parser.parse_args()
    url = POSTGRES_ADMIN.rsplit("/", 1)[0] + f"/{args.database}"
    with psycopg.connect(POSTGRES_ADMIN) as admin:
        version = admin.execute("SHOW server_version").fetchone()[0]  # type: ignore[index]
        buffers = admin.execute("SHOW shared_buffers").fetchone()[0]  # type: ignore[index]
    print(f"setup: {platform.machine()}, {os.cpu_count()} cores, PostgreSQL {version} "
          f"(shared_buffers={buffers}), database {args.database}; {args.verdicts:,} verdicts "
          f"over {args.days:g} days, {args.apps * args.routes} leaf segments "
          f"({args.apps} apps x {args.routes} routes), samples kept for the last day")
    now = datetime.now(UTC).replace(microsecond=0)
    with TemporaryDirectory() as folder:
        rules_file = Path(folder) / "rules.yaml"
        rules_file.write_text(RULES_YAML)
        settings = Settings(database_url=url, alert_rules_file=rules_file,
                            data_dir=Path(folder))
        try:
            if not args.reuse:
                _create_database(args.database)
                _load(url, args, now=now)
                _evaluate(settings, cycles=args.cycles, now=now)
            _measure(settings, repeat=args.repeat)
        finally:
            if not args.keep:
                _drop_database(args.database)


def _create_database(name: str) -> None:
    with psycopg.connect(POSTGRES_ADMIN, autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}"')
        admin.execute(f'CREATE DATABASE "{name}"')


def _drop_database(name: str) -> None:
    with psycopg.connect(POSTGRES_ADMIN, autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _load(url: str, args: argparse.Namespace, *, now: datetime) -> None:
    span_s = args.days * 86400
    step_s = span_s / args.verdicts
    start = now - timedelta(seconds=span_s)
    store = open_store(url)
    migrate(store.engine)
    with store.engine.begin() as conn:
        drop_partition(conn, LEGACY_SUFFIX)
        ensure_partitions(conn, now=now, since=start)
    store.close()
    started = time.perf_counter()
    rng = random.Random(11)
    keep_from = now - timedelta(days=1)
    drop_from = now - timedelta(hours=2)
    with psycopg.connect(url) as conn:
        conn.execute("DROP INDEX ix_verdicts_attributes")
        for first in range(0, args.verdicts, CHUNK):
            rows = range(first, min(args.verdicts, first + CHUNK))
            with conn.cursor() as cur:
                with cur.copy("COPY verdicts (id, sample_id, metric, prompt_version, judge_model,"
                              " status, reason, scores, raw_scores, raw_output, attempts,"
                              " latency_ms, prompt_tokens, completion_tokens, attributes,"
                              " sample_ts, created_at) FROM STDIN") as copy:
                    values = []
                    for n in rows:
                        ts = start + timedelta(seconds=n * step_s)
                        app, route = rng.randrange(args.apps), rng.randrange(args.routes)
                        centre = 0.60 if (app, route) == (3, 7) and ts >= drop_from else 0.85
                        value = round(min(1.0, max(0.0, rng.gauss(centre, 0.1))), 3)
                        values.append((n + 1, ts, value, app, route))
                        copy.write_row((
                            n + 1, f"s-{n}", "rag_qa", "p1", "judge", "ok",
                            f"faithfulness_explanation: {'most' if value < 0.5 else 'all'} "
                            "claims checked against the context.",
                            Jsonb({"faithfulness": value}), Jsonb({"faithfulness": value}),
                            f'{{"faithfulness": {value}}}', 1, 400, 900, 80,
                            Jsonb({"app": f"app-{app}", "route": f"/r{route}"}), ts, ts))
                with cur.copy("COPY verdict_scores (verdict_id, name, metric, value, sample_ts,"
                              " created_at) FROM STDIN") as copy:
                    for verdict_id, ts, value, _, _ in values:
                        copy.write_row((verdict_id, "faithfulness", "rag_qa", value, ts, ts))
                with cur.copy("COPY verdict_keys (digest, created_at) FROM STDIN") as copy:
                    for verdict_id, ts, _, _, _ in values:
                        key = VerdictKey(f"s-{verdict_id - 1}", "rag_qa", "p1", "judge")
                        copy.write_row((key.digest(), ts))
                with cur.copy("COPY verdict_samples (verdict_id, created_at, sample)"
                              " FROM STDIN") as copy:
                    for verdict_id, ts, value, app, route in values:
                        if ts >= keep_from:
                            copy.write_row((verdict_id, ts, Jsonb({
                                "input": f"question {verdict_id} of app-{app} on /r{route}",
                                "output": f"answer {verdict_id}, scored {value}",
                                "context": ["chunk one", "chunk two"], "reference": None,
                                "fields": {}})))
            conn.commit()
        conn.execute("SELECT setval(pg_get_serial_sequence('verdicts', 'id'), %s)",
                     (args.verdicts,))
        conn.commit()
        loaded = time.perf_counter()
        conn.execute("CREATE INDEX ix_verdicts_attributes ON verdicts"
                     " USING gin (attributes jsonb_path_ops)")
        conn.commit()
        indexed = time.perf_counter()
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("VACUUM ANALYZE")
        size = conn.execute(
            "SELECT (SELECT pg_size_pretty(sum(pg_relation_size(relid)))"
            " FROM pg_partition_tree('ix_verdicts_attributes')),"
            " (SELECT pg_size_pretty(sum(pg_total_relation_size(relid)))"
            " FROM pg_partition_tree('verdicts'))").fetchone()
    print(f"load: {args.verdicts:,} verdicts and scores by COPY in {loaded - started:.0f} s; "
          f"GIN index on attributes built in {indexed - loaded:.0f} s "
          f"({size[0] if size else '?'}; verdicts with indexes {size[1] if size else '?'})")


def _evaluate(settings: Settings, *, cycles: int, now: datetime) -> None:
    engine = open_alert_engine(settings, deliver=False)
    firing: set[str] = set()
    took_ms = []
    try:
        for i in range(cycles):
            started = time.perf_counter()
            report = engine.check(at=now - timedelta(minutes=5 * (cycles - 1 - i)))
            took_ms.append((time.perf_counter() - started) * 1000)
            firing = {row.segment for row in report.rows if row.state == "firing"}
    finally:
        engine.close()
    print(f"alert engine: {cycles} cycles, one cycle median "
          f"{statistics.median(took_ms):.0f} ms, p95 {_p95(took_ms):.0f} ms "
          f"(the first, cold: {took_ms[0]:.0f} ms); "
          f"firing at the end: {', '.join(sorted(firing)) or 'none'}")


def _p95(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]


@contextmanager
def _statements(engine: Any) -> Iterator[list[tuple[str, float]]]:
    found: list[tuple[str, float]] = []

    def before(conn: Any, cursor: Any, statement: str, *_: Any) -> None:
        conn.info["bench_started"] = time.perf_counter()

    def after(conn: Any, cursor: Any, statement: str, *_: Any) -> None:
        found.append((" ".join(statement.split()),
                      (time.perf_counter() - conn.info["bench_started"]) * 1000))

    event.listen(engine, "before_cursor_execute", before)
    event.listen(engine, "after_cursor_execute", after)
    try:
        yield found
    finally:
        event.remove(engine, "before_cursor_execute", before)
        event.remove(engine, "after_cursor_execute", after)


def _measure(settings: Settings, *, repeat: int) -> None:
    from evalfleet.core.metric import load_registry

    rules = load_rules(settings.alerts.alert_rules_file, registry=load_registry())
    store = open_store(settings.resolved_database_url(), pool_size=4)
    app = create_app(PageData(store=store, rules=rules), UiOptions())
    served = Served(app)
    segment = "app=app-3,route=/r7"
    with store.engine.connect() as conn:
        worst = conn.execute(text(
            "SELECT v.id FROM verdict_scores vs JOIN verdicts v ON v.id = vs.verdict_id"
            " WHERE v.attributes @> '{\"app\": \"app-3\", \"route\": \"/r7\"}'"
            " ORDER BY vs.sample_ts DESC LIMIT 1")).scalar()
    pages = {
        "overview": "/",
        "alert page": f"/alerts/{RULE}?" + urlencode({"segment": segment}),
        "trend (6h)": f"/rules/{RULE}/trend?" + urlencode({"segment": segment, "range": "6h"}),
        "verdict": f"/verdicts/{worst}",
        "dead letters": "/dead-letters",
    }
    try:
        with httpx.Client(base_url=served.url, timeout=60) as client:
            for name, path in pages.items():
                client.get(path)  # warm the caches once
                times = []
                for _ in range(repeat):
                    response = client.get(path)
                    response.raise_for_status()
                    timing = response.headers["server-timing"]
                    times.append(float(timing.split("dur=")[1]))
                with _statements(store.engine) as found:
                    client.get(path)
                p95 = _p95(times)
                print(f"\n{name} ({path}): median {statistics.median(times):.1f} ms, "
                      f"p95 {p95:.1f} ms over {repeat} loads; {len(found)} statements:")
                for statement, took_ms in found:
                    print(f"  {took_ms:7.1f} ms  {statement[:300]}")
        _explain_baseline(store.engine, segment_labels={"app": "app-3", "route": "/r7"})
    finally:
        served.stop()
        store.close()


def _explain_baseline(engine: Any, *, segment_labels: dict[str, str]) -> None:
    """The alert page's read of one segment: its trend, window and baseline rows."""
    # The statement evalfleet.store.queries.evidence.segment_scores issues for the alert page.
    query = text(
        "EXPLAIN (ANALYZE, BUFFERS) SELECT vs.value, vs.sample_ts FROM verdicts v"
        " JOIN verdict_scores vs ON vs.verdict_id = v.id AND vs.name = 'faithfulness'"
        " WHERE v.metric = 'rag_qa' AND v.sample_ts >= now() - interval '25 hours'"
        " AND v.created_at >= now() - interval '26 hours'"
        " AND vs.created_at >= now() - interval '26 hours'"
        " AND v.sample_ts < now() AND vs.metric = 'rag_qa'"
        " AND vs.sample_ts >= now() - interval '25 hours' AND vs.sample_ts < now()"
        " AND v.attributes @> CAST(:labels AS jsonb)")
    with engine.connect() as conn:
        plan = [row[0] for row in conn.execute(query, {"labels": json.dumps(segment_labels)})]
    print("\nalert page, one segment's trend, window and baseline (25 hours):")
    for line in plan:
        print("  " + line)


if __name__ == "__main__":
    main()
