"""Time per alert cycle against traffic and baseline length, before and after the rollups.

Setup: a database of its own (``evalfleet_bench_rollups``, dropped at the end unless
``--keep``) migrated to head. One rule like the shipped ``rag_qa_faithfulness_drop``
(rag_qa faithfulness, threshold 0.6, 10-minute window, one-minute interval, gap 10
minutes, ``exclude_firing``, the sequential test) split by ``app`` over ``--segments``
apps (100), with a trailing baseline of 1 hour, 1 day or 7 days. The real engine
(``open_alert_engine(...).check(at=...)``) runs ``--cycles`` consecutive cycles a
minute apart, each ``--offset-s`` seconds past a minute (30: every window has partial
minutes at both ends; 0: none); printed: the median time of a cycle.

- **before**: the engine reading the score rows for every window and baseline, as on
  main (``fetch_summaries`` replaced by the score rows' summaries over the whole range,
  the code main runs). Score rows are loaded for the whole span, so a cell runs only
  where that is at most ``--raw-limit`` rows (2,000,000): on a shared 2-core machine
  the 100-million-row cells are out of reach, and the cells that run show the growth.
- **after**: the engine as it is. The rollup rows of the whole span are generated
  directly into ``score_rollups`` (one per app, minute and hour; sums of a normal
  around 0.8), and score rows only for the partial minutes the cycles read, loaded
  with the triggers off so they do not count twice. The 1,000-a-minute, 7-day cell is
  a billion samples' rollups: the same rows as at 1 a minute, with larger counts.

With ``--write-cost``: instead, the cost the triggers add to saving verdicts: batches of
50 rag_qa verdicts with four scores each (20 apps), saved through the store as a worker
saves them, with the rollups' triggers enabled and disabled in turn; printed: the
worker's CPU and the wall time per verdict, medians of the rounds.

    python -m bench.alert_cycle_rollups                       # the table in docs/performance.md
    python -m bench.alert_cycle_rollups --rates 1 10 --baselines 1h 1d
    python -m bench.alert_cycle_rollups --write-cost
"""

from __future__ import annotations

import argparse
import os
import platform
import random
import statistics
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import yaml
from psycopg.types.json import Jsonb

from evalfleet.alerts import engine as alert_engine
from evalfleet.alerts import window
from evalfleet.alerts.factory import open_alert_engine
from evalfleet.core.settings import Settings
from evalfleet.store import VerdictKey, VerdictRecord, migrate, open_store
from evalfleet.store.partitions import ensure_partitions
from evalfleet.store.rollup import OFF_GRID

POSTGRES_ADMIN = "postgresql://postgres@127.0.0.1:5432/postgres"
DATABASE = "evalfleet_bench_rollups"
BASELINES = {"1h": timedelta(hours=1), "1d": timedelta(days=1), "7d": timedelta(days=7)}
WINDOW, GAP = timedelta(minutes=10), timedelta(minutes=10)
#: The first cycle: 30 s past a minute.
AT = datetime(2026, 11, 20, 12, 0, 30, tzinfo=UTC)
MINUTE = timedelta(minutes=1)
ALERT_TABLES = ("alert_states, alert_exclusions, alert_notifications, alert_transitions,"
                " alert_points, alert_rule_runs")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--segments", type=int, default=100)
    parser.add_argument("--rates", type=int, nargs="+", default=[1, 10, 100, 1000])
    parser.add_argument("--baselines", nargs="+", default=list(BASELINES))
    parser.add_argument("--cycles", type=int, default=5)
    parser.add_argument("--raw-limit", type=int, default=2_000_000)
    parser.add_argument("--keep", action="store_true")
    parser.add_argument("--write-cost", action="store_true")
    parser.add_argument("--offset-s", type=int, default=30,
                        help="seconds past a minute of each cycle (0: on the minute)")
    args = parser.parse_args()
    global AT  # the cycles' time, set once from the command line
    AT = AT.replace(second=args.offset_s)
    if args.write_cost:
        with _database(keep=args.keep) as url:
            _write_cost(url)
        return
    print(f"setup: {platform.platform()}, {os.cpu_count()} cores, Postgres at 127.0.0.1; "
          f"{args.segments} segments, {args.cycles} cycles per cell {args.offset_s} s past"
          " a minute, raw limit "
          f"{args.raw_limit:,} score rows")
    results: dict[tuple[str, int, str], float | None] = {}
    with _database(keep=args.keep) as url:
        for rate in args.rates:
            for mode in ("before", "after"):
                longest = max(BASELINES[b] for b in args.baselines)
                for name in sorted(args.baselines, key=lambda b: BASELINES[b]):
                    span = WINDOW + GAP + BASELINES[name] + args.cycles * MINUTE
                    rows = rate * args.segments * span.total_seconds() / 60
                    if mode == "before" and rows > args.raw_limit:
                        results[(mode, rate, name)] = None
                        continue
                    if name == _shortest(args):  # one load serves every baseline
                        _reset(url)
                        reach = longest if mode == "after" else _raw_reach(args, rate)
                        _load(url, mode=mode, rate=rate, segments=args.segments,
                              span=WINDOW + GAP + reach, cycles=args.cycles)
                    results[(mode, rate, name)] = _time_cycles(
                        url, baseline=BASELINES[name], cycles=args.cycles, before=mode == "before")
                    print(f"  {mode:6} {rate:>5}/min {name}: {_ms(results[(mode, rate, name)])}",
                          flush=True)
    _table(results, args)


def _shortest(args: argparse.Namespace) -> str:
    return min(args.baselines, key=lambda b: BASELINES[b])


def _raw_reach(args: argparse.Namespace, rate: int) -> timedelta:
    """The longest baseline whose score rows fit the raw limit at ``rate``."""
    fitting = [BASELINES[b] for b in args.baselines
               if rate * args.segments * (WINDOW + GAP + BASELINES[b] + args.cycles * MINUTE)
               .total_seconds() / 60 <= args.raw_limit]
    return max(fitting, default=timedelta(0))


@contextmanager
def _database(*, keep: bool) -> Iterator[str]:
    with psycopg.connect(POSTGRES_ADMIN, autocommit=True) as admin:
        admin.execute(f"DROP DATABASE IF EXISTS {DATABASE} WITH (FORCE)")
        admin.execute(f"CREATE DATABASE {DATABASE}")
    url = f"postgresql+psycopg://postgres@127.0.0.1:5432/{DATABASE}"
    store = open_store(url)
    migrate(store.engine)
    with store.engine.begin() as conn:
        ensure_partitions(conn, now=AT, since=AT - timedelta(days=8), days_ahead=1)
    store.close()
    try:
        yield url
    finally:
        if not keep:
            with psycopg.connect(POSTGRES_ADMIN, autocommit=True) as admin:
                admin.execute(f"DROP DATABASE IF EXISTS {DATABASE} WITH (FORCE)")


def _plain(url: str) -> str:
    return url.replace("+psycopg", "")


def _reset(url: str) -> None:
    with psycopg.connect(_plain(url), autocommit=True) as conn:
        conn.execute("TRUNCATE verdicts, verdict_scores, verdict_keys, score_rollups, "
                     + ALERT_TABLES)


def _load(url: str, *, mode: str, rate: int, segments: int, span: timedelta,
          cycles: int) -> None:
    """Score rows of the whole span (before) or rollups plus the partial minutes' score
    rows (after), for ``rate`` samples a minute in each of ``segments`` apps."""
    started = time.perf_counter()
    rng = random.Random(rate)
    end = AT + cycles * MINUTE
    start = AT - span
    if mode == "before":
        minutes = [start + i * MINUTE for i in range(int((end - start) / MINUTE) + 1)]
        rollups = 0
    else:
        edge = [AT - WINDOW + k * MINUTE for k in range(cycles)] + [
            AT + k * MINUTE for k in range(cycles)]
        minutes = sorted({_floor(m) for m in edge})
        rollups = _load_rollups(url, rate=rate, segments=segments, start=_floor(start),
                                end=_floor(end), rng=rng)
    scores = _load_scores(url, rate=rate, segments=segments, minutes=minutes, rng=rng)
    with psycopg.connect(_plain(url), autocommit=True) as conn:
        conn.execute("VACUUM ANALYZE")
    print(f"  loaded {mode} {rate}/min: {scores:,} score rows, {rollups:,} rollup rows"
          f" in {time.perf_counter() - started:.0f} s", flush=True)


def _load_scores(url: str, *, rate: int, segments: int, minutes: list[datetime],
                 rng: random.Random) -> int:
    count = 0
    with psycopg.connect(_plain(url)) as conn:
        # The rollups of these rows are generated with the rest (after) or not read (before).
        conn.execute("SET session_replication_role = replica")
        first = conn.execute("SELECT coalesce(max(id), 0) + 1 FROM verdicts").fetchone()
        next_id = int(first[0]) if first else 1
        with conn.cursor().copy(
                "COPY verdicts (id, sample_id, metric, prompt_version, judge_model, status,"
                " scores, raw_scores, attempts, latency_ms, attributes, sample_ts, created_at)"
                " FROM STDIN") as verdict_copy:
            rows = []
            for minute in minutes:
                for app in range(segments):
                    for i in range(rate):
                        ts = minute + timedelta(seconds=60 * (i + rng.random()) / rate)
                        value = min(1.0, max(0.0, rng.gauss(0.8, 0.1)))
                        verdict_copy.write_row((
                            next_id, f"s{next_id}", "rag_qa", "p1", "judge", "ok",
                            Jsonb({"faithfulness": value}), Jsonb({}), 1, 1,
                            Jsonb({"app": f"app-{app:03d}"}), ts, ts + timedelta(seconds=5)))
                        rows.append((next_id, "faithfulness", "rag_qa", value, ts,
                                     ts + timedelta(seconds=5)))
                        next_id += 1
        with conn.cursor().copy(
                "COPY verdict_scores (verdict_id, name, metric, value, sample_ts, created_at)"
                " FROM STDIN") as score_copy:
            for row in rows:
                score_copy.write_row(row)
                count += 1
        conn.commit()
    return count


def _load_rollups(url: str, *, rate: int, segments: int, start: datetime, end: datetime,
                  rng: random.Random) -> int:
    """One rollup row per app and minute (and hour) of ``[start, end)``, as ``rate``
    samples of a normal around 0.8 would give (the partial minutes' score rows are read
    from the score rows, so their generated rollups differ from them by noise only)."""
    count = 0
    # Leaving the connection's block commits, after the copy's block has ended it.
    with psycopg.connect(_plain(url)) as conn, conn.cursor().copy(
            "COPY score_rollups (metric, name, span_s, bucket, segment_key, level, attributes,"
            " n, total, total_sq, first_ts) FROM STDIN") as copy:
        for span_s in (60, 3600):
            bucket = _floor(start, span_s)
            while bucket < end:
                for app in range(segments):
                    n = rate * span_s // 60
                    mean = 0.8 + rng.gauss(0, 0.01)
                    total = n * mean
                    total_sq = n * (mean * mean + 0.01)
                    copy.write_row(("rag_qa", "faithfulness", span_s, bucket, f"app-{app:03d}",
                                    OFF_GRID, Jsonb({"app": f"app-{app:03d}"}), n, total,
                                    total_sq, bucket))
                    count += 1
                bucket += timedelta(seconds=span_s)
    return count


def _floor(moment: datetime, span_s: int = 60) -> datetime:
    return datetime.fromtimestamp(moment.timestamp() // span_s * span_s, UTC)


def _time_cycles(url: str, *, baseline: timedelta, cycles: int, before: bool) -> float:
    with tempfile.TemporaryDirectory() as folder:
        rules = Path(folder) / "rules.yaml"
        rules.write_text(yaml.safe_dump({"rules": [{
            "name": "rag_qa_faithfulness_drop", "metric": "rag_qa", "score": "faithfulness",
            "threshold": 0.6, "segment_by": ["app"],
            "baseline": {"type": "trailing", "window": f"{int(baseline.total_seconds())}s",
                         "gap": "10m", "exclude_firing": True}}]}))
        engine = open_alert_engine(Settings(database_url=url, alert_rules_file=rules),
                                   deliver=False)
        original = alert_engine.fetch_summaries
        if before:
            alert_engine.fetch_summaries = _score_rows_only  # type: ignore[assignment]
        try:
            with psycopg.connect(_plain(url), autocommit=True) as conn:
                conn.execute(f"TRUNCATE {ALERT_TABLES}")
            times = []
            for k in range(cycles):
                started = time.perf_counter()
                engine.check(at=AT + k * MINUTE)
                times.append(time.perf_counter() - started)
        finally:
            alert_engine.fetch_summaries = original  # type: ignore[assignment]
            engine.close()
    return statistics.median(times[1:] if len(times) > 1 else times)


def _score_rows_only(conn: Any, query: window.WindowQuery, *, start: datetime,
                     end: datetime) -> dict[Any, Any]:
    """Main's ``fetch_summaries``: the score rows of the whole range."""
    periods = window._exclusion_periods(conn, query) if query.exclude_rule else []
    return window._raw(conn, query, ((start, end),), periods)


def _write_cost(url: str, *, rounds: int = 6, batches: int = 40, size: int = 50) -> None:
    store = open_store(url)
    rng = random.Random(0)
    serial = 0
    found: dict[bool, list[tuple[float, float]]] = {True: [], False: []}
    for round_ in range(rounds):
        enabled = round_ % 2 == 0
        state = "ENABLE" if enabled else "DISABLE"
        with store.engine.begin() as conn:
            for name in ("score_rollups_add", "score_rollups_subtract"):
                conn.exec_driver_sql(f"ALTER TABLE verdict_scores {state} TRIGGER {name}")
        records = []
        for _ in range(batches * size):
            serial += 1
            ts = AT + timedelta(seconds=serial / 10)
            records.append(VerdictRecord(
                key=VerdictKey(f"w{serial}", "rag_qa", "p1", "judge"), status="ok",
                error_class=None, error=None, reason="fine",
                scores={name: rng.random() for name in (
                    "faithfulness", "context_relevance", "answer_relevance",
                    "semantic_similarity")},
                raw_scores={}, raw_output="{}", attempts=1, latency_ms=500,
                prompt_tokens=900, completion_tokens=100,
                attributes={"app": f"app-{rng.randrange(20):02d}", "route": "/chat"},
                sample_ts=ts, created_at=ts + timedelta(seconds=5)))
        cpu, wall = time.process_time(), time.perf_counter()
        for start in range(0, len(records), size):
            store.save(verdicts=records[start:start + size], owner="bench")
        found[enabled].append(((time.process_time() - cpu) / len(records),
                               (time.perf_counter() - wall) / len(records)))
    store.close()
    for enabled, label in ((False, "triggers off"), (True, "triggers on")):
        cpu_s = statistics.median(c for c, _ in found[enabled])
        wall_s = statistics.median(w for _, w in found[enabled])
        print(f"  {label}: worker CPU {cpu_s * 1e6:.0f} us, wall {wall_s * 1e6:.0f} us"
              f" per verdict ({batches} batches of {size}, {rounds // 2} rounds)")


def _ms(seconds: float | None) -> str:
    return "not run" if seconds is None else f"{seconds * 1000:.0f} ms"


def _table(results: dict[tuple[str, int, str], float | None],
           args: argparse.Namespace) -> None:
    names = sorted(args.baselines, key=lambda b: BASELINES[b])
    print("\n| samples/min per segment | " + " | ".join(
        f"{name} before | {name} after" for name in names) + " |")
    print("|---|" + "---|" * (2 * len(names)))
    for rate in args.rates:
        cells = []
        for name in names:
            cells += [_ms(results.get(("before", rate, name))),
                      _ms(results.get(("after", rate, name)))]
        print(f"| {rate:,} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
