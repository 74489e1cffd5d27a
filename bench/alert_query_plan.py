"""Query plans at millions of verdicts: the alert window query and the retention purge.

Setup: a database of its own (``evalfleet_bench_plan``, dropped at the end unless
``--keep``) migrated to head, loaded with COPY through psycopg: ``--scores`` score
rows (5,000,000 by default) and the verdicts they belong to, spread evenly over
``--days`` days ending now, in creation order as a fleet writes them. Four metrics
in production proportions with their real score names, eight apps with a prompt
version that changes every ten days, three routes; 3% failed verdicts; a judge reply
of a few hundred characters per verdict; sample times seconds before creation (1%
backfilled up to six hours late). All but the last day is vacuumed; the last day is
only analysed, as Postgres leaves a large insert-only table by default: autovacuum
runs after 20% new rows (``autovacuum_vacuum_insert_scale_factor``), at 100 M
verdicts days of inserts, so recent pages are not all-visible and an index-only scan
must visit the heap for each of their rows. The alert queries are explained before
and after a VACUUM of that day.

Printed: the setup, table and index sizes, then EXPLAIN (ANALYZE, BUFFERS) and the
median of ``--repeat`` timed runs of

1. the alert window query of the shipped rule ``rag_qa_faithfulness_drop`` (rag_qa
   faithfulness per app and prompt version over the last 10 minutes), built and run by
   ``evalfleet.alerts.window.fetch_summaries``, the very SQL the alert engine issues;
2. the same rule's trailing baseline (one day, excluding firing periods);
3. the status command's activity query (``evalfleet.ops.activity``, last 5 minutes);
4. one batch of each purge statement ``evalfleet.ops.purger`` issues (deleting verdicts,
   emptying raw outputs), in transactions rolled back;
5. for contrast, a purge batch on ``created_at`` alone, the obvious query without the
   per-metric walk;

and finally a real purge of the oldest day, timed.

    python -m bench.alert_query_plan                  # 5,000,000 score rows, 30 days
    python -m bench.alert_query_plan --scores 300000  # a quick look
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import platform
import random
import statistics
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
from psycopg.types.json import Jsonb
from sqlalchemy import Engine, event
from sqlalchemy.engine import Connection

from evalfleet.alerts.rule import load_rules
from evalfleet.alerts.window import WindowQuery, fetch_summaries
from evalfleet.core.metric import load_registry
from evalfleet.ops.activity import read_activity
from evalfleet.ops.purger import Purger
from evalfleet.ops.retention import RetentionPolicy
from evalfleet.store import migrate, open_store

POSTGRES_ADMIN = "postgresql://postgres@127.0.0.1:5432/postgres"

#: Metric: (share of verdicts, score names).
METRICS: dict[str, tuple[float, tuple[str, ...]]] = {
    "rag_qa": (0.40, ("faithfulness", "context_relevance", "answer_relevance",
                      "semantic_similarity")),
    "context_precision": (0.25, ("context_precision",)),
    "bbh_match": (0.20, ("correct", "reasoning")),
    "rec_faithfulness": (0.15, ("faithfulness",)),
}
APPS = ("support-bot", "search", "checkout-help", "docs-qa", "sales-assist", "onboarding",
        "billing-bot", "internal-wiki")
APP_WEIGHTS = (35, 20, 12, 10, 8, 6, 5, 4)
ROUTES = ("/chat", "/ask", "/api")
#: Reply texts the verdicts' raw outputs are drawn from.
REASONS = [f"The answer is supported by chunk {n} of the context; it restates the refund "
           f"policy and the {n * 3}-day window accurately without adding claims. " * 3
           for n in range(1, 21)]
#: The shipped rule whose queries are explained.
RULE = "rag_qa_faithfulness_drop"

#: Verdicts generated and copied per round (their scores follow them).
CHUNK_VERDICTS = 50_000

VERDICT_COPY = (
    "COPY verdicts (id, sample_id, metric, prompt_version, judge_model, status, error_class,"
    " error, reason, scores, raw_scores, raw_output, attempts, latency_ms, prompt_tokens,"
    " completion_tokens, cost_usd, attributes, sample_ts, created_at) FROM STDIN")
SCORE_COPY = "COPY verdict_scores (verdict_id, name, metric, value, sample_ts) FROM STDIN"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--scores", type=int, default=5_000_000, help="Score rows to load.")
    parser.add_argument("--days", type=float, default=30.0)
    parser.add_argument("--database", default="evalfleet_bench_plan")
    parser.add_argument("--repeat", type=int, default=5, help="Timed runs per query.")
    parser.add_argument("--keep", action="store_true", help="Keep the database afterwards.")
    parser.add_argument("--reuse", action="store_true",
                        help="Use the database a --keep run left (no load).")
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    url = POSTGRES_ADMIN.rsplit("/", 1)[0] + f"/{args.database}"
    mean_scores = sum(share * len(names) for share, names in METRICS.values())
    verdicts = int(args.scores / (mean_scores * 0.97)) + 1  # failed verdicts have none
    with psycopg.connect(POSTGRES_ADMIN) as admin:
        version = admin.execute("SHOW server_version").fetchone()[0]  # type: ignore[index]
        knobs = {name: admin.execute(f"SHOW {name}").fetchone()[0]  # type: ignore[index]
                 for name in ("shared_buffers", "work_mem", "effective_cache_size",
                              "random_page_cost")}
    print(f"setup: {platform.machine()}, {os.cpu_count()} cores, PostgreSQL {version} "
          f"({', '.join(f'{k}={v}' for k, v in knobs.items())}), database {args.database}; "
          f"~{verdicts:,} verdicts over {args.days:g} days, about {args.scores:,} score rows, "
          f"metrics {', '.join(f'{m} {s:.0%}' for m, (s, _) in METRICS.items())}, "
          f"{len(APPS)} apps x prompt versions x {len(ROUTES)} routes")
    if not args.reuse:
        _create_database(args.database)
    store = open_store(url, pool_size=2)
    try:
        if not args.reuse:
            migrate(store.engine)
            _load(url, verdicts=verdicts, days=args.days, seed=args.seed)
        at = _latest(store.engine)
        _print_sizes(url)
        _explain_alerts(store.engine, at=at, repeat=args.repeat,
                        label="last day not vacuumed yet")
        _vacuum(url)
        _explain_alerts(store.engine, at=at, repeat=args.repeat, label="after VACUUM")
        _explain_activity(store, at=at, repeat=args.repeat)
        _explain_purge(store, at=at, days=args.days)
        _time_purge(store, at=at, days=args.days)
    finally:
        store.close()
        if not args.keep:
            with psycopg.connect(POSTGRES_ADMIN, autocommit=True) as admin:
                admin.execute(f'DROP DATABASE IF EXISTS "{args.database}" WITH (FORCE)')


def _create_database(name: str) -> None:
    with psycopg.connect(POSTGRES_ADMIN, autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.execute(f'CREATE DATABASE "{name}"')


def _load(url: str, *, verdicts: int, days: float, seed: int) -> None:
    """COPY the verdicts and their scores, oldest first. All but the last day are then
    vacuumed, as autovacuum would have done long ago; the last day is only analysed, as
    autovacuum leaves recent inserts on a large table (see the module docstring)."""
    rng = random.Random(seed)
    end = datetime.now(UTC).replace(microsecond=0)
    start = end - timedelta(days=days)
    step_s = days * 86400 / verdicts
    rows = _rows(rng, verdicts=verdicts, start=start, step_s=step_s)
    older = int(verdicts * (days - 1) / days)
    started = time.perf_counter()
    with psycopg.connect(url) as conn:
        scores = _copy(conn, itertools.islice(rows, older))
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("VACUUM ANALYZE verdicts")
        conn.execute("VACUUM ANALYZE verdict_scores")
        scores += _copy(conn, rows)
        conn.execute("SELECT setval('verdicts_id_seq', %s)", (verdicts,))
        conn.execute("ANALYZE verdicts")
        conn.execute("ANALYZE verdict_scores")
    elapsed = time.perf_counter() - started
    print(f"loaded {verdicts:,} verdicts and {scores:,} score rows in {elapsed:.0f} s "
          f"({(verdicts + scores) / elapsed:,.0f} rows/s, vacuum and analyse included); "
          f"the last day ({verdicts - older:,} verdicts) is not vacuumed yet")


def _copy(conn: psycopg.Connection[Any],
          rows: Iterator[tuple[tuple[Any, ...], list[tuple[Any, ...]]]]) -> int:
    """COPY chunk by chunk (one COPY at a time per connection); returns score rows."""
    scores = 0
    while chunk := list(itertools.islice(rows, CHUNK_VERDICTS)):
        with conn.cursor() as cur:
            with cur.copy(VERDICT_COPY) as copy:
                for row, _ in chunk:
                    copy.write_row(row)
            with cur.copy(SCORE_COPY) as copy:
                for _, score_rows in chunk:
                    for score_row in score_rows:
                        copy.write_row(score_row)
                    scores += len(score_rows)
        if not conn.autocommit:
            conn.commit()
    return scores


def _rows(rng: random.Random, *, verdicts: int, start: datetime,
          step_s: float) -> Iterator[tuple[tuple[Any, ...], list[tuple[Any, ...]]]]:
    names = list(METRICS)
    weights = [share for share, _ in METRICS.values()]
    for n in range(1, verdicts + 1):
        metric = rng.choices(names, weights)[0]
        created = start + timedelta(seconds=n * step_s)
        lag_s = rng.uniform(0, 6 * 3600) if rng.random() < 0.01 else rng.expovariate(1 / 20)
        sample_ts = created - timedelta(seconds=lag_s)
        app = rng.choices(APPS, APP_WEIGHTS)[0]
        version = f"v{10 + (created - start).days // 10 + APPS.index(app) % 3}"
        attributes = {"app": app, "route": rng.choice(ROUTES), "prompt_version": version,
                      "model": "m-2026-10"}
        failed = rng.random() < 0.03
        values = {} if failed else _scores(rng, metric)
        reason = rng.choice(REASONS)
        attempts = 2 if rng.random() < 0.05 else 1
        row = (n, f"req-{n:010d}", metric, "p" + metric[:6], "gpt-4o-mini",
               "failed" if failed else "ok", "schema" if failed else None,
               "reply did not match the schema" if failed else None,
               None if failed else reason[:120], Jsonb(values), Jsonb(values),
               json.dumps({"verdict": values, "reason": reason}), attempts,
               int(rng.lognormvariate(6.3, 0.4)) * attempts, rng.randint(700, 2500),
               rng.randint(40, 300), 0.0004, Jsonb(attributes), sample_ts, created)
        yield row, [(n, name, metric, value, sample_ts)
                    for name, value in values.items() if value is not None]


def _scores(rng: random.Random, metric: str) -> dict[str, float | None]:
    found: dict[str, float | None] = {}
    for name in METRICS[metric][1]:
        if name == "correct":
            found[name] = float(rng.random() < 0.8)
        elif name in ("reasoning",) or metric == "rec_faithfulness":
            found[name] = rng.randint(0, 4) / 4
        elif name == "semantic_similarity" and rng.random() < 0.3:
            found[name] = None  # no reference
        else:
            found[name] = round(rng.betavariate(8, 2), 3)
    return found


def _latest(engine: Engine) -> datetime:
    with engine.connect() as conn:
        moment = conn.exec_driver_sql("SELECT max(created_at) FROM verdicts").scalar_one()
    return moment.astimezone(UTC) + timedelta(seconds=1)


def _print_sizes(url: str) -> None:
    with psycopg.connect(url) as conn:
        rows = conn.execute(
            "SELECT c.relname, c.relkind, pg_size_pretty(pg_total_relation_size(c.oid)),"
            " pg_size_pretty(pg_relation_size(c.oid)), c.reltuples::bigint"
            " FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
            " WHERE n.nspname = 'public' AND c.relname LIKE ANY (ARRAY['verdict%', 'ix_verdict%',"
            " 'pk_verdict%', 'uq_verdict%']) ORDER BY c.relkind DESC, c.relname").fetchall()
    print("\nsizes (table: total with indexes and TOAST / heap; index: size):")
    for name, kind, total, own, tuples in rows:
        print(f"  {'table' if kind == 'r' else 'index'} {name:<55} "
              f"{(total + ' / ' + own) if kind == 'r' else own:>20}  ~{tuples:,} rows")


@contextmanager
def _capture(engine: Engine, *, stop_on: Callable[[str], bool] | None = None
             ) -> Iterator[list[tuple[str, Any]]]:
    """Record the statements the engine sends; with ``stop_on``, abort the first match."""
    seen: list[tuple[str, Any]] = []

    def record(_conn: Any, _cursor: Any, statement: str, parameters: Any, *_: Any) -> None:
        seen.append((statement, parameters))
        if stop_on is not None and stop_on(statement):
            raise _Captured

    event.listen(engine, "before_cursor_execute", record)
    try:
        yield seen
    finally:
        event.remove(engine, "before_cursor_execute", record)


class _Captured(Exception):
    """Raised to stop a statement once it has been recorded."""


def _explain(conn: Connection, title: str, statement: str, parameters: Any) -> None:
    print(f"\n=== {title}\n{_inline(statement, parameters)}\n")
    plan = conn.exec_driver_sql("EXPLAIN (ANALYZE, BUFFERS) " + statement, parameters)
    for (line,) in plan:
        print("  " + line)


def _inline(statement: str, parameters: Any) -> str:
    """The statement with its parameters written in, for reading (not for running)."""
    text = statement
    for key, value in sorted((parameters or {}).items(), key=lambda kv: -len(kv[0])):
        shown = f"'{value.isoformat()}'" if isinstance(value, datetime) else repr(value)
        text = text.replace(f"%({key})s", shown)
    return text


def _median_ms(run: Callable[[], object], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        run()
        times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times)


def _explain_alerts(engine: Engine, *, at: datetime, repeat: int, label: str) -> None:
    rule = next(r for r in load_rules(None, registry=load_registry()).rules if r.name == RULE)
    spec = rule.spec
    baseline_end = at - spec.window - spec.baseline.gap  # type: ignore[union-attr]
    windows = [
        ("alert window query", WindowQuery.for_rule(rule), at - spec.window, at),
        ("alert baseline query", WindowQuery.for_rule(rule, exclude_firing=True),
         baseline_end - spec.baseline.window, baseline_end),  # type: ignore[union-attr]
    ]
    for title, query, start, end in windows:
        with engine.connect() as conn:
            with _capture(engine) as seen:
                found = fetch_summaries(conn, query, start=start, end=end)
            statement, parameters = seen[-1]
            total = sum(s.n for seg, s in found.items() if not seg.labels)
            ms = _median_ms(lambda q=query, s=start, e=end, c=conn: fetch_summaries(
                c, q, start=s, end=e), repeat)
            _explain(conn, f"{title} ({label}): rule {RULE}, {spec.score} by "
                           f"{', '.join(spec.segment_keys)} over "
                           f"{(end - start).total_seconds() / 60:g} min ({total:,} samples, "
                           f"{len(found)} segments); median of {repeat}: {ms:.1f} ms",
                     statement, parameters)


def _vacuum(url: str) -> None:
    started = time.perf_counter()
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("VACUUM verdict_scores")
        conn.execute("VACUUM verdicts")
    print(f"\n=== VACUUM of both tables (the last day's pages become all-visible): "
          f"{time.perf_counter() - started:.1f} s")


def _explain_activity(store: Any, *, at: datetime, repeat: int) -> None:
    metrics = list(METRICS)
    since = at - timedelta(minutes=5)
    with _capture(store.engine) as seen:
        read_activity(store, metrics=metrics, since=since, until=at)
    ms = _median_ms(lambda: read_activity(store, metrics=metrics, since=since, until=at),
                    repeat)
    statement, parameters = seen[0]
    with store.engine.connect() as conn:
        _explain(conn, f"status: verdicts of the last 5 minutes per metric (whole "
                       f"read_activity, 3 queries: median of {repeat}: {ms:.1f} ms)",
                 statement, parameters)


def _explain_purge(store: Any, *, at: datetime, days: float) -> None:
    keep_days = days - 1  # the oldest day is past retention
    for title, policy, verb in (
        ("purge: one batch deleting verdicts (rolled back)",
         RetentionPolicy(verdict_days=keep_days), "DELETE"),
        ("purge: one batch emptying raw outputs (rolled back)",
         RetentionPolicy(raw_output_days=keep_days), "UPDATE"),
    ):
        with _capture(store.engine, stop_on=lambda s, v=verb: s.startswith(v)) as seen, \
                suppress(_Captured):
            Purger(store, policy).run(now=at)
        statement, parameters = seen[-1]
        with store.engine.connect() as conn:
            transaction = conn.begin()
            _explain(conn, title, statement, parameters)
            transaction.rollback()
    naive = ("DELETE FROM verdicts WHERE id IN (SELECT id FROM verdicts"
             " WHERE created_at < %(cutoff)s LIMIT 10000)")
    with store.engine.connect() as conn:
        transaction = conn.begin()
        _explain(conn, "for contrast: a batch on created_at alone (rolled back)", naive,
                 {"cutoff": at - timedelta(days=keep_days)})
        transaction.rollback()


def _time_purge(store: Any, *, at: datetime, days: float) -> None:
    purger = Purger(store, RetentionPolicy(verdict_days=days - 1))
    report = purger.run(now=at)
    deleted = sum(report.verdicts_deleted.values())
    print(f"\n=== purge of the oldest day: {deleted:,} verdicts (and their scores) deleted in "
          f"{report.transactions} transactions of up to {purger.batch_rows:,}, "
          f"{report.elapsed_s:.1f} s ({deleted / max(report.elapsed_s, 1e-9):,.0f} verdicts/s, "
          f"{report.elapsed_s / max(report.transactions, 1) * 1000:.0f} ms per transaction)")


if __name__ == "__main__":
    main()
