"""Time per alert cycle against traffic and baseline length, before and after the rollups.

Setup: a database of its own (``evalfleet_bench_rollups``, dropped at the end unless
``--keep``) migrated to head. One rule like the shipped ``rag_qa_faithfulness_drop``
(rag_qa faithfulness, threshold 0.6, 10-minute window, one-minute interval, gap 10
minutes, ``exclude_firing``, the sequential test) split by ``app`` over ``--segments``
apps (100), with a trailing baseline of 1 hour, 1 day or 7 days. The real engine
(``open_alert_engine(...).check(at=...)``) runs ``--cycles`` consecutive cycles a
minute apart, each ``--offset-s`` seconds past a minute, evaluated as ``evalfleet beat``
evaluates (``--evaluate beat``: at the last whole minute, ``cover.settled_at``) or at
the tick's own time (``--evaluate tick``: every window then has partial minutes at both
ends, read from the score rows); printed: the median time of a cycle. After the
cycles of an *after* cell, the alert page's reads (``load_alert_view``: the trend and
the histograms of the window and the baseline's last window-length from the rollups,
the window's worst samples from the score rows of the minutes that can hold them) for
one app, median of three.

- **before**: the engine reading the score rows for every window and baseline, as
  before the rollups (``fetch_summaries`` replaced by the score rows' summaries over the
  whole range), evaluating at the tick's own time as beat then did. Score rows are
  loaded for the whole span, so a cell runs only where that is at most ``--raw-limit``
  rows (2,000,000): on a shared 2-core machine the 100-million-row cells are out of
  reach, and the cells that run show the growth.
- **after**: the engine as it is. The rollup rows of the whole span are generated
  directly into ``score_rollups`` (one per app, minute and hour; sums of a normal
  around 0.8), and score rows only for the minutes the cycles and the page read (the
  partial minutes at the windows' ends, the last window and the baseline's last
  window-length; with ``--explain-ab``, the cycles' windows instead), loaded through the
  rollups' triggers, which count those minutes as production does (per level, and off
  the level grid per tenth of 0..1): the generated rows leave them out, and their hours
  hold the rest of the hour. Both are generated in the database
  (``generate_series``), the rollups of the verdicts' judge model and prompt version. The
  1,000-a-minute, 7-day cell is a billion samples' rollups: the same rows as at 1 a
  minute, with larger counts.

With ``--explain-ab ROUNDS``: each *after* cell runs its cycles ``ROUNDS`` times with an
incident's ``explain_by`` read (``fetch_explained``) as main did before revision 0024
(the verdict's judge model from the window's score rows joined to their verdicts,
``rows``) and as it is (the rollups, ``rollups``), alternated; printed per variant: the
median cycle, and the time the explained reads took in the timed cycles with the heads
they were asked for.

With ``--write-cost``: instead, the cost the triggers add to saving verdicts: batches of
50 rag_qa verdicts with four scores each (20 apps), saved through the store as a worker
saves them, with the rollups' triggers enabled and disabled in turn; printed: the
worker's CPU and the wall time per verdict, medians of the rounds. With
``--segment-index`` as well, the rounds keep the triggers on and alternate with and
without the index of revision 0023 (``ix_verdicts_metric_segment_sample_ts``) instead.

    python -m bench.alert_cycle_rollups                       # the table in docs/performance.md
    python -m bench.alert_cycle_rollups --rates 1 10 --baselines 1h 1d
    python -m bench.alert_cycle_rollups --cells 1:1h 1000:7d --modes after --cycles 4
    python -m bench.alert_cycle_rollups --rates 1000 --baselines 1h 7d --modes after \
        --cycles 3 --explain-ab 2
    python -m bench.alert_cycle_rollups --write-cost
    python -m bench.alert_cycle_rollups --write-cost --segment-index
    python -m bench.alert_cycle_rollups --contention 8

With ``--contention W``: the cost per verdict when ``W`` writer processes (a connection
each) save verdicts of one segment and one minute at once, so every save adds to the
same rollup rows: batches of 16 rag_qa verdicts with four scores, rounds alternating
the triggers on and off; printed: the verdicts a second of all writers together, the
wall time per saving transaction (median and 95th percentile over every writer's
saves) and the waits on row locks Postgres reported during the round.

With ``--cells RATE:BASELINE ...``: only those cells (``1:1h 1000:7d`` are the aim's
two: the 1,000-a-minute 7-day cycle within twice the 1-a-minute 1-hour one); each rate's
data is loaded once, for its longest baseline asked.

With ``--breakdown``: for each timed cycle, where its time went: the time in the
database's statements (SQLAlchemy's cursor events, from sending a statement to its
result), the rest (the engine's Python, fetching rows, waiting for a core), the
process's CPU time, and the slowest statements.
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
from sqlalchemy import event, text

from evalfleet.alerts import engine as alert_engine
from evalfleet.alerts import window
from evalfleet.alerts.cover import settled_at
from evalfleet.alerts.factory import open_alert_engine
from evalfleet.alerts.rule import VERDICT_EXPLAINERS
from evalfleet.alerts.segment import Segment
from evalfleet.alerts.statistic import Summary
from evalfleet.alerts.view import load_alert_view
from evalfleet.core.settings import Settings
from evalfleet.store import VerdictKey, VerdictRecord, migrate, open_store
from evalfleet.store.partitions import created_since, ensure_partitions
from evalfleet.store.queries.evidence import segment_keys
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
    global AT, DATABASE  # set once from the command line
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--segments", type=int, default=100)
    parser.add_argument("--rates", type=int, nargs="+", default=[1, 10, 100, 1000])
    parser.add_argument("--baselines", nargs="+", default=list(BASELINES))
    parser.add_argument("--cells", nargs="+", metavar="RATE:BASELINE",
                        help="only these cells (1:1h 1000:7d: the aim's two), instead of"
                             " every rate with every baseline")
    parser.add_argument("--cycles", type=int, default=5)
    parser.add_argument("--raw-limit", type=int, default=2_000_000)
    parser.add_argument("--keep", action="store_true")
    parser.add_argument("--database", default=DATABASE,
                        help="the bench's own database (dropped first)")
    parser.add_argument("--write-cost", action="store_true")
    parser.add_argument("--segment-index", action="store_true",
                        help="write cost: rounds with and without the segment index"
                             " (revision 0023) instead of the triggers")
    parser.add_argument("--contention", type=int, default=0, metavar="WRITERS")
    parser.add_argument("--spread", action="store_true",
                        help="contention: each writer its own app (rollup rows apart)")
    parser.add_argument("--offset-s", type=int, default=30,
                        help="seconds past a minute of each cycle (0: on the minute)")
    parser.add_argument("--evaluate", choices=("beat", "tick"), default="beat",
                        help="after: at the last whole minute (beat) or at the tick")
    parser.add_argument("--modes", nargs="+", default=["before", "after"])
    parser.add_argument("--explain-ab", type=int, default=0, metavar="ROUNDS",
                        help="after: alternate the explained read from the score rows"
                             " (main before 0024) and from the rollups")
    parser.add_argument("--breakdown", action="store_true",
                        help="print each timed cycle's statements, Python and CPU time")
    args = parser.parse_args()
    AT = AT.replace(second=args.offset_s)
    DATABASE = args.database
    if args.write_cost:
        with _database(keep=args.keep) as url:
            _write_cost(url, index=args.segment_index)
        return
    if args.contention:
        with _database(keep=args.keep) as url:
            _contention(url, writers=args.contention, spread=args.spread)
        return
    print(f"setup: {platform.platform()}, {os.cpu_count()} cores, Postgres at 127.0.0.1; "
          f"{args.segments} segments, {args.cycles} cycles per cell {args.offset_s} s past"
          f" a minute, after evaluated at the {args.evaluate}, raw limit "
          f"{args.raw_limit:,} score rows; load average {os.getloadavg()}")
    results: dict[tuple[str, int, str], float | None] = {}
    cells = _cells(args)
    with _database(keep=args.keep) as url:
        for rate in sorted(cells):
            for mode in args.modes:
                longest = max(BASELINES[b] for b in cells[rate])
                for name in sorted(cells[rate], key=lambda b: BASELINES[b]):
                    span = WINDOW + GAP + BASELINES[name] + args.cycles * MINUTE
                    rows = rate * args.segments * span.total_seconds() / 60
                    if mode == "before" and rows > args.raw_limit:
                        results[(mode, rate, name)] = None
                        continue
                    if name == min(cells[rate], key=lambda b: BASELINES[b]):
                        # One load serves every baseline of the rate.
                        _reset(url)
                        reach = longest if mode == "after" else _raw_reach(args, rate)
                        _load(url, mode=mode, rate=rate, segments=args.segments,
                              span=WINDOW + GAP + reach, cycles=args.cycles,
                              page=not args.explain_ab)
                    if mode == "after" and args.explain_ab:
                        _explain_ab(url, rounds=args.explain_ab, rate=rate, name=name,
                                    args=args, results=results)
                        continue
                    cycle_s, page_s = _time_cycles(
                        url, baseline=BASELINES[name], cycles=args.cycles,
                        before=mode == "before", beat=args.evaluate == "beat",
                        breakdown=args.breakdown)
                    results[(mode, rate, name)] = cycle_s
                    if page_s is not None:
                        results[("page", rate, name)] = page_s
                    print(f"  {mode:6} {rate:>5}/min {name}: {_ms(cycle_s)}, page"
                          f" {_ms(page_s)} (load {os.getloadavg()[0]:.1f})", flush=True)
    _table(results, args)


def _explain_ab(url: str, *, rounds: int, rate: int, name: str, args: argparse.Namespace,
                results: dict[tuple[str, int, str], float | None]) -> None:
    """The cell's cycles with the explained read from the score rows and from the rollups,
    alternated ``rounds`` times; each variant's median cycle over its rounds."""
    found: dict[str, list[float]] = {"rows": [], "rollups": []}
    for _ in range(rounds):
        for variant in found:
            reads: list[tuple[float, list[str]]] = []
            cycle_s, _ = _time_cycles(url, baseline=BASELINES[name], cycles=args.cycles,
                                      before=False, beat=args.evaluate == "beat",
                                      explain_rows=variant == "rows", reads=reads,
                                      breakdown=args.breakdown)
            found[variant].append(cycle_s)
            print(f"  {variant:7} {rate:>5}/min {name}: cycle {_ms(cycle_s)}; explained"
                  f" reads {', '.join(f'{_ms(t)} under {heads}' for t, heads in reads)}"
                  f" (load {os.getloadavg()[0]:.1f})", flush=True)
    for variant, times in found.items():
        results[(f"explain {variant}", rate, name)] = statistics.median(times)


def _explained_from_rows(conn: Any, query: window.WindowQuery, *, explain: tuple[str, ...],
                         heads: Any, start: datetime, end: datetime) -> dict[Any, Any]:
    """Main's ``fetch_explained`` before revision 0024 (Postgres, no filters, no levels):
    a sample attribute from the rollups, the verdict's own fields from the window's score
    rows joined to their verdicts, by the segment index under heads that are not the
    whole traffic."""
    heads = sorted(set(heads))
    own = [name for name in explain if name in VERDICT_EXPLAINERS]
    units = window.fetch_explained(conn, query, heads=heads, start=start, end=end,
                                   explain=tuple(n for n in explain if n not in own))
    if not own:
        return units
    params: dict[str, Any] = {"metric": query.metric, "score": query.score, "start": start,
                              "end": end, "created_since": created_since(start)}
    conditions = ["vs.metric = :metric", "vs.name = :score", "vs.sample_ts >= :start",
                  "vs.sample_ts < :end", "vs.created_at >= :created_since",
                  "v.created_at >= :created_since"]
    if Segment() not in heads:
        params["keys"] = sorted({key for head in heads for key in segment_keys(
            conn, metric=query.metric, score=query.score, start=start, end=end,
            labels=head.as_dict())})
        conditions += ["v.metric = :metric", "v.sample_ts >= :start", "v.sample_ts < :end",
                       "md5(CAST(v.attributes AS text)) = ANY(:keys)"]
    keys = [f"v.attributes ->> '{key}' AS s{i}" for i, key in enumerate(query.keys)]
    extra = [f"v.{VERDICT_EXPLAINERS[name]} AS e{i}" for i, name in enumerate(own)]
    inner = (f"SELECT vs.value AS value, vs.sample_ts AS sample_ts, {', '.join(keys + extra)}"
             " FROM verdict_scores vs JOIN verdicts v ON v.id = vs.verdict_id"
             f" WHERE {' AND '.join(conditions)}")
    names = [f"s{i}" for i in range(len(query.keys))]
    es = [f"e{i}" for i in range(len(own))]
    sets = ", ".join("(" + ", ".join([*names, e]) + ")" for e in es)
    conn.exec_driver_sql("SET LOCAL jit = off")
    rows = conn.execute(text(
        f"SELECT GROUPING({', '.join(es)}) AS mask, {', '.join(names + es)}, count(*) AS n,"
        " sum(value) AS total, sum(value * value) AS total_sq, min(sample_ts) AS first_ts"
        f" FROM ({inner}) AS scored GROUP BY GROUPING SETS ({sets})"), params).mappings()
    for row in rows:
        j = next(i for i in range(len(own)) if not row["mask"] & (1 << (len(own) - 1 - i)))
        labels = []
        for key, value in zip(query.keys, [row[n] for n in names], strict=True):
            if value is None:
                break
            labels.append((key, str(value)))
        units[Segment((*labels, (own[j], str(row[f"e{j}"]))))] = Summary(
            n=int(row["n"]), total=float(row["total"]), total_sq=float(row["total_sq"]),
            first_seen_ts=row["first_ts"].timestamp())
    return units


def _cells(args: argparse.Namespace) -> dict[int, list[str]]:
    """The baselines to run per rate: ``--cells`` when given, else every rate with every
    baseline."""
    if not args.cells:
        return {rate: list(args.baselines) for rate in args.rates}
    cells: dict[int, list[str]] = {}
    for cell in args.cells:
        rate, _, name = cell.partition(":")
        if name not in BASELINES:
            raise SystemExit(f"--cells: {cell!r} is not RATE:BASELINE ({', '.join(BASELINES)})")
        cells.setdefault(int(rate), []).append(name)
    args.rates = sorted(cells)
    args.baselines = sorted({n for names in cells.values() for n in names},
                            key=lambda b: BASELINES[b])
    return cells


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
          cycles: int, page: bool = True) -> None:
    """Score rows of the whole span (before) or rollups plus the partial minutes' score
    rows (after), for ``rate`` samples a minute in each of ``segments`` apps; with
    ``page``, those of the page's reads too, else those of the cycles' windows (the
    explained read from the score rows reads them)."""
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
        # The page's reads at the last cycle: its window and the baseline's last
        # window-length (a minute more each side: the cycle's own second may be off).
        last = _floor(AT + (cycles - 1) * MINUTE)
        shown = {last - WINDOW - GAP - WINDOW + i * MINUTE for i in range(-1, 12)} | {
            last - WINDOW + i * MINUTE for i in range(-1, 12)}
        windows = {_floor(AT) - WINDOW + i * MINUTE for i in range(-1, 12 + cycles)}
        minutes = sorted({_floor(m) for m in edge} | (shown if page else windows))
        rollups = _load_rollups(url, rate=rate, segments=segments, start=_floor(start),
                                end=_floor(end), rng=rng, skip=minutes)
    scores = _load_scores(url, rate=rate, segments=segments, minutes=minutes, rng=rng,
                          triggers=mode == "after")
    if mode == "after":
        with psycopg.connect(_plain(url), autocommit=True) as conn:
            found = conn.execute("SELECT count(*) FROM score_rollups").fetchone()
        rollups = int(found[0]) if found else 0
    with psycopg.connect(_plain(url), autocommit=True) as conn:
        conn.execute("VACUUM ANALYZE")
    print(f"  loaded {mode} {rate}/min: {scores:,} score rows, {rollups:,} rollup rows"
          f" in {time.perf_counter() - started:.0f} s", flush=True)


def _load_scores(url: str, *, rate: int, segments: int, minutes: list[datetime],
                 rng: random.Random, triggers: bool) -> int:
    """``rate`` verdicts a minute in each app over ``minutes``, spread evenly with jitter,
    faithfulness a normal around 0.8 (sd 0.1) clipped to [0, 1], stored 5 s after their
    sample; generated in the database (three million rows at 1,000 a minute). With
    ``triggers`` the rollups' triggers count them (after: their minutes' rows are theirs,
    so the page's histograms and its choice of minutes see the rows it reads)."""
    with psycopg.connect(_plain(url)) as conn:
        if not triggers:  # before: the rollups are not read
            conn.execute("SET session_replication_role = replica")
        conn.execute("SELECT setseed(%s)", (rng.random(),))
        first = conn.execute("SELECT coalesce(max(id), 0) FROM verdicts").fetchone()
        base = int(first[0]) if first else 0
        conn.execute(
            "INSERT INTO verdicts (id, sample_id, metric, prompt_version, judge_model, status,"
            " scores, raw_scores, attempts, latency_ms, attributes, sample_ts, created_at)"
            " SELECT id, 's' || id, 'rag_qa', 'p1', 'judge', 'ok',"
            " jsonb_build_object('faithfulness', value), '{}', 1, 1,"
            " jsonb_build_object('app', 'app-' || lpad(app::text, 3, '0')), ts,"
            " ts + interval '5 seconds'"
            " FROM (SELECT %(base)s + row_number() OVER () AS id, app,"
            "   minute + make_interval(secs => 60 * (i + random()) / %(rate)s) AS ts,"
            "   least(1, greatest(0, 0.8 + 0.1 * sqrt(-2 * ln(1 - random()))"
            "     * cos(2 * pi() * random()))) AS value"
            "   FROM unnest(%(minutes)s::timestamptz[]) AS minute,"
            "   generate_series(0, %(segments)s - 1) AS app,"
            "   generate_series(0, %(rate)s - 1) AS i) AS generated",
            {"base": base, "rate": rate, "segments": segments, "minutes": minutes})
        found = conn.execute(
            "INSERT INTO verdict_scores (verdict_id, name, metric, value, sample_ts, created_at)"
            " SELECT id, 'faithfulness', 'rag_qa', CAST(scores ->> 'faithfulness' AS float),"
            " sample_ts, created_at FROM verdicts WHERE id > %s", (base,))
        conn.commit()
    return found.rowcount


def _load_rollups(url: str, *, rate: int, segments: int, start: datetime, end: datetime,
                  rng: random.Random, skip: list[datetime]) -> int:
    """One rollup row per app and minute (and hour) of ``[start, end)``, as ``rate``
    samples of a normal around 0.8 would give, of the judge model and prompt version the
    score rows carry; not the minutes in ``skip`` (the score rows' triggers count them:
    their hours' rows here hold the rest of the hour). Generated in the database (a week
    of a hundred apps is a million rows)."""
    with psycopg.connect(_plain(url)) as conn:
        conn.execute("SELECT setseed(%s)", (rng.random(),))
        for span_s in (60, 3600):
            # A mean of 0.8 plus a normal of sd 0.01 (Box-Muller), per app and bucket.
            conn.execute(
                "INSERT INTO score_rollups (metric, name, span_s, bucket, segment_key,"
                " judge_model, prompt_version, level, attributes, n, total, total_sq,"
                " first_ts)"
                " SELECT 'rag_qa', 'faithfulness', %(span)s, bucket,"
                " md5(CAST(attributes AS text)), 'judge', 'p1', %(level)s, attributes,"
                " n, n * mean, n * (mean * mean + 0.01), bucket"
                " FROM (SELECT bucket, a.attributes, 0.8 + 0.01 * sqrt(-2 * ln(1 - random()))"
                "   * cos(2 * pi() * random()) AS mean, %(rate)s * (%(span)s / 60 - ("
                "     SELECT count(*) FROM unnest(%(skip)s::timestamptz[]) AS minute"
                "     WHERE minute >= bucket"
                "       AND minute < bucket + make_interval(secs => %(span)s))) AS n"
                "   FROM generate_series(%(start)s::timestamptz, %(end)s::timestamptz"
                "     - make_interval(secs => 1), make_interval(secs => %(span)s)) AS bucket"
                "   CROSS JOIN (SELECT jsonb_build_object('app', 'app-' || lpad(i::text, 3, '0'))"
                "     AS attributes FROM generate_series(0, %(segments)s - 1) AS i) AS a"
                " ) AS generated WHERE n > 0",
                {"span": span_s, "level": OFF_GRID, "rate": rate, "skip": skip,
                 "start": _floor(start, span_s), "end": end, "segments": segments})
        conn.commit()
        found = conn.execute("SELECT count(*) FROM score_rollups").fetchone()
    return int(found[0]) if found else 0


def _floor(moment: datetime, span_s: int = 60) -> datetime:
    return datetime.fromtimestamp(moment.timestamp() // span_s * span_s, UTC)


def _time_cycles(url: str, *, baseline: timedelta, cycles: int, before: bool,
                 beat: bool, explain_rows: bool = False,
                 reads: list[tuple[float, list[str]]] | None = None,
                 breakdown: bool = False) -> tuple[float, float | None]:
    """The median cycle, and after the rollups the median of the alert page's reads
    (not with ``reads``: then the timed cycles' explained reads are appended to it, with
    ``explain_rows`` read as main did before revision 0024)."""
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
        original_explained = alert_engine.fetch_explained
        if before:
            alert_engine.fetch_summaries = _score_rows_only  # type: ignore[assignment]
        timed: list[tuple[float, list[str]]] = []
        if reads is not None:
            read = _explained_from_rows if explain_rows else original_explained

            def explained(conn: Any, query: Any, **kwargs: Any) -> Any:
                started = time.perf_counter()
                units = read(conn, query, **kwargs)
                timed.append((time.perf_counter() - started,
                              [str(head) for head in sorted(set(kwargs["heads"]))]))
                return units

            alert_engine.fetch_explained = explained  # type: ignore[assignment]
        statements: list[tuple[float, str]] = []
        if breakdown:
            _time_statements(engine.store.engine, statements)
        try:
            with psycopg.connect(_plain(url), autocommit=True) as conn:
                conn.execute(f"TRUNCATE {ALERT_TABLES}")
            times = []
            for k in range(cycles):
                tick = AT + k * MINUTE
                at = settled_at(tick, intervals=[MINUTE]) if beat and not before else tick
                if k == 1 and reads is not None:
                    reads.extend(timed)  # the first cycle is not timed
                    timed.clear()
                statements.clear()
                started, cpu = time.perf_counter(), time.process_time()
                engine.check(at=at)
                times.append(time.perf_counter() - started)
                if breakdown and k:
                    _print_breakdown(times[-1], time.process_time() - cpu, statements)
            if reads is not None:
                reads.extend(timed)
                page_s = None
            else:
                page_s = None if before else _time_page(engine)
        finally:
            alert_engine.fetch_summaries = original  # type: ignore[assignment]
            alert_engine.fetch_explained = original_explained  # type: ignore[assignment]
            engine.close()
    counted = times[1:] if len(times) > 1 else times
    print(f"    cycles {', '.join(_ms(t) for t in times)} (the first not counted)", flush=True)
    return statistics.median(counted), page_s


def _time_statements(bind: Any, found: list[tuple[float, str]]) -> None:
    """Append each statement's time and first words to ``found``."""

    def before(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        conn.info["bench_started"] = time.perf_counter()

    def after(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        found.append((time.perf_counter() - conn.info.pop("bench_started"),
                      " ".join(statement.split())[:70]))

    event.listen(bind, "before_cursor_execute", before)
    event.listen(bind, "after_cursor_execute", after)


def _print_breakdown(wall_s: float, cpu_s: float, statements: list[tuple[float, str]]) -> None:
    in_sql = sum(t for t, _ in statements)
    print(f"    cycle {_ms(wall_s)}: {len(statements)} statements {_ms(in_sql)}, the rest"
          f" {_ms(wall_s - in_sql)}, process CPU {_ms(cpu_s)}", flush=True)
    for took, statement in sorted(statements, reverse=True)[:4]:
        print(f"      {_ms(took):>8}  {statement}", flush=True)


def _time_page(engine: Any) -> float:
    """The alert page's reads for one app at its last evaluation, median of three."""
    rule = engine.rules.rules[0]
    times = []
    for _ in range(3):
        started = time.perf_counter()
        view = load_alert_view(engine.store, rule, Segment.of({"app": "app-000"}), worst=10)
        times.append(time.perf_counter() - started)
    assert any(view.histogram) and view.worst and any(point.n for point in view.trend)
    return statistics.median(times)


def _score_rows_only(conn: Any, query: window.WindowQuery, *, start: datetime,
                     end: datetime) -> dict[Any, Any]:
    """Main's ``fetch_summaries``: the score rows of the whole range."""
    periods = window._exclusion_periods(conn, query) if query.exclude_rule else []
    return window._raw(conn, query, ((start, end),), periods)


def _switch_triggers(store: Any, *, on: bool) -> bool:
    """Turn the rollups' triggers on or off (rounds alternate); returns ``on``."""
    with store.engine.begin() as conn:
        for trigger in ("score_rollups_add", "score_rollups_subtract"):
            conn.exec_driver_sql(f"ALTER TABLE verdict_scores {'ENABLE' if on else 'DISABLE'}"
                                 f" TRIGGER {trigger}")
    return on


#: The segment index of revision 0023, as its migration makes it.
SEGMENT_INDEX = ("ix_verdicts_metric_segment_sample_ts ON verdicts"
                 " (metric, md5(CAST(attributes AS text)), sample_ts)")


def _switch_segment_index(store: Any, *, on: bool) -> bool:
    """Create or drop the segment index (rounds alternate, triggers on); returns ``on``."""
    with store.engine.begin() as conn:
        conn.exec_driver_sql(f"CREATE INDEX IF NOT EXISTS {SEGMENT_INDEX}" if on else
                             "DROP INDEX IF EXISTS ix_verdicts_metric_segment_sample_ts")
    return on


def _write_cost(url: str, *, index: bool = False, rounds: int = 6, batches: int = 40,
                size: int = 50) -> None:
    store = open_store(url)
    rng = random.Random(0)
    serial = 0
    found: dict[bool, list[tuple[float, float]]] = {True: [], False: []}
    for round_ in range(rounds):
        enabled = (_switch_segment_index if index else _switch_triggers)(
            store, on=round_ % 2 == 0)
        records = []
        for _ in range(batches * size):
            serial += 1
            records.append(_verdict(f"w{serial}", ts=AT + timedelta(seconds=serial / 10),
                                    app=f"app-{rng.randrange(20):02d}", rng=rng))
        cpu, wall = time.process_time(), time.perf_counter()
        for start in range(0, len(records), size):
            store.save(verdicts=records[start:start + size], owner="bench")
        found[enabled].append(((time.process_time() - cpu) / len(records),
                               (time.perf_counter() - wall) / len(records)))
    store.close()
    labels = ("segment index off", "segment index on") if index else (
        "triggers off", "triggers on")
    for enabled, label in ((False, labels[0]), (True, labels[1])):
        cpu_s = statistics.median(c for c, _ in found[enabled])
        wall_s = statistics.median(w for _, w in found[enabled])
        print(f"  {label}: worker CPU {cpu_s * 1e6:.0f} us, wall {wall_s * 1e6:.0f} us"
              f" per verdict ({batches} batches of {size}, {rounds // 2} rounds)")


def _verdict(sample_id: str, *, ts: datetime, app: str, rng: random.Random) -> VerdictRecord:
    """A rag_qa verdict with four scores, as a worker saves it."""
    return VerdictRecord(
        key=VerdictKey(sample_id, "rag_qa", "p1", "judge"), status="ok",
        error_class=None, error=None, reason="fine",
        scores={name: rng.random() for name in (
            "faithfulness", "context_relevance", "answer_relevance", "semantic_similarity")},
        raw_scores={}, raw_output="{}", attempts=1, latency_ms=500,
        prompt_tokens=900, completion_tokens=100, attributes={"app": app, "route": "/chat"},
        sample_ts=ts, created_at=ts + timedelta(seconds=5))


def _contention_writer(url: str, name: str, app: str, batches: int, size: int,
                       start_at: float, out: Any) -> None:
    """One writer process: waits for the common start, saves its batches one by one, all
    of ``app`` and within a second of ``AT``."""
    store = open_store(url, pool_size=1)
    rng = random.Random(name)

    def batch(prefix: str, count: int) -> list[VerdictRecord]:
        return [_verdict(f"{prefix}-{i}", ts=AT + timedelta(microseconds=rng.randrange(10**6)),
                         app=app, rng=rng) for i in range(count)]

    prepared = [batch(f"{name}-{b}", size) for b in range(batches)]
    store.save(verdicts=batch(f"{name}-warm", 1), owner="bench")
    time.sleep(max(0.0, start_at - time.time()))
    times = []
    first = time.time()
    for batch in prepared:
        started = time.perf_counter()
        store.save(verdicts=batch, owner="bench")
        times.append(time.perf_counter() - started)
    store.close()
    out.put((first, time.time(), times))


def _contention(url: str, *, writers: int, spread: bool, rounds: int = 6, batches: int = 60,
                size: int = 16) -> None:
    import multiprocessing

    context = multiprocessing.get_context("spawn")
    store = open_store(url)
    found: dict[bool, list[tuple[float, list[float], float]]] = {True: [], False: []}
    for round_ in range(rounds):
        enabled = _switch_triggers(store, on=round_ % 2 == 0)
        out = context.Queue()
        start_at = time.time() + 10.0  # every writer connected and warm before
        processes = [context.Process(target=_contention_writer,
                                     args=(url, f"r{round_}w{w}", f"app-{w if spread else 0:02d}",
                                           batches, size, start_at, out))
                     for w in range(writers)]
        for process in processes:
            process.start()
        waits = _lock_waits(url, processes=processes)
        reports = [out.get(timeout=600) for _ in processes]
        for process in processes:
            process.join()
        times = [t for _, _, ts in reports for t in ts]
        elapsed = max(max(end for _, end, _ in reports) - min(s for s, _, _ in reports), 1e-9)
        found[enabled].append((writers * batches * size / elapsed, times, waits))
        print(f"  round {round_}: triggers {'on' if enabled else 'off'}:"
              f" {writers * batches * size / elapsed:.0f} verdicts/s,"
              f" save median {statistics.median(times) * 1000:.1f} ms,"
              f" writers waiting on a lock {waits:.2f}",
              flush=True)
    store.close()
    print(f"setup: {writers} writer processes, {'an app each' if spread else 'one app'},"
          f" one minute, {batches} batches of"
          f" {size} verdicts each per round, {rounds // 2} rounds each way;"
          f" load average {os.getloadavg()[0]:.1f}")
    for enabled, label in ((False, "triggers off"), (True, "triggers on")):
        rates = [rate for rate, _, _ in found[enabled]]
        times = sorted(t for _, ts, _ in found[enabled] for t in ts)
        p95 = times[int(len(times) * 0.95)]
        print(f"  {label}: {statistics.median(rates):.0f} verdicts/s,"
              f" save {statistics.median(times) * 1000:.1f} ms median,"
              f" {p95 * 1000:.1f} ms p95 ({statistics.median(times) / size * 1e6:.0f} us"
              f" per verdict), writers waiting on a lock"
              f" {statistics.mean(w for _, _, w in found[enabled]):.2f} of {writers}")


def _lock_waits(url: str, *, processes: list[Any]) -> float:
    """How many sessions wait on a lock (a row's, a buffer's), on average over samples taken
    every 5 ms until the writers are done: the writers' share of time lost to each other."""
    samples = waiting = 0
    with psycopg.connect(_plain(url), autocommit=True) as conn:
        while any(process.is_alive() for process in processes):
            row = conn.execute("SELECT count(*) FROM pg_stat_activity WHERE datname ="
                               " current_database() AND wait_event_type IN ('Lock', 'LWLock')"
                               ).fetchone()
            waiting += int(row[0]) if row else 0
            samples += 1
            time.sleep(0.005)
    return waiting / max(samples, 1)


def _ms(seconds: float | None) -> str:
    return "not run" if seconds is None else f"{seconds * 1000:.0f} ms"


def _table(results: dict[tuple[str, int, str], float | None],
           args: argparse.Namespace) -> None:
    names = sorted(args.baselines, key=lambda b: BASELINES[b])
    print("\n| samples/min per segment | " + " | ".join(
        f"{name} before | {name} after | {name} page" for name in names) + " |")
    print("|---|" + "---|" * (3 * len(names)))
    for rate in args.rates:
        cells = []
        for name in names:
            cells += [_ms(results.get(("before", rate, name))),
                      _ms(results.get(("after", rate, name))),
                      _ms(results.get(("page", rate, name)))]
        print(f"| {rate:,} | " + " | ".join(cells) + " |")
    if args.explain_ab:
        print("\n| samples/min per segment | " + " | ".join(
            f"{name} explained from rows | {name} from rollups" for name in names) + " |")
        print("|---|" + "---|" * (2 * len(names)))
        for rate in args.rates:
            cells = [_ms(results.get((f"explain {variant}", rate, name)))
                     for name in names for variant in ("rows", "rollups")]
            print(f"| {rate:,} | " + " | ".join(cells) + " |")
    print(f"load average at the end: {os.getloadavg()}")


if __name__ == "__main__":
    main()
