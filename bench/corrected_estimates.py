"""Coverage and width of corrected and raw intervals, of an alert's corrected drop, and the
server time of corrected estimates on the pages and the command.

Part 1, simulated at the estimator level (no store): ``--verdicts`` verdicts (100,000 by
default) whose true score is Beta(5, 2) (mean 0.714), Beta(4, 2) (0.667) in the last tenth
(people's scores drop there, the judge's bias does not); the judge adds 0.15 on 40% of the
traffic, 0.05 elsewhere, plus noise (sd 0.08), not clipped: a judge biased by +0.09 on
average, the same before and after the drop. People's labels are the truth on a random
slice. For each label budget (50, 100, 200, 1,000) and each design (one probability
budget/N for every verdict; strata: judge scores below 0.6 labelled at four times the
rate of the rest, the same budget on average), ``--repeat`` fresh populations and
slices: the share of runs whose 90% interval holds the true mean of the verdicts, and the
median interval width, for the judge's raw mean and for the corrected mean (pool =
window, lam tuned; and the last tenth of the verdicts as the window, corrected by the
whole pool's labels with lam 1).

Part 2, through the real store: a PostgreSQL database of its own
(``evalfleet_bench_estimates``, dropped at the end) with ``--store-verdicts`` rag_qa
verdicts over 30 days (default 2,000,000, eight apps, in day partitions) and a 1% random
review slice, every item labelled, written with COPY; then, after one alert cycle, the
median and p95 of ``--rounds`` timed calls of ``evalfleet review estimate --json`` in
process (the last 6 hours corrected by 30 days of labels: settings, store and estimates,
no interpreter start), of the alert page and the 6-hour trend page of a rule on the score
over HTTP (each computes the corrected estimate on view), for all traffic and for one app,
and of an alert's label check as the engine runs it when the alert fires (one app; the
default pools, and 30-day pools).

Part 3, an alert's window against its baseline (``testkit/drop_simulation.py``): for each
scenario (people's scores drop; the judge turns harsher while people's stay), pools (each
period's own labels; pools reaching back far enough to share most labels) and label
budget, ``--drop-repeat`` runs: the share whose 90% interval of the corrected change held
people's true change, the same interval without the covariance of shared labels, the
median width, and what a decrease alert would say.

    python -m bench.corrected_estimates
    python -m bench.corrected_estimates --parts 3 --drop-repeat 300
    python -m bench.corrected_estimates --parts 2 --store-verdicts 200000
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from functools import partial
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import psycopg
from click.testing import CliRunner
from psycopg.types.json import Jsonb

from evalfleet.alerts import load_rule_set, open_alert_engine
from evalfleet.alerts.detector import Finding
from evalfleet.alerts.judgecheck import JudgeCheckSource, spans
from evalfleet.alerts.segment import Segment
from evalfleet.alerts.statistic import Summary
from evalfleet.cli import main as main_command
from evalfleet.cli.ui import build_ui_app
from evalfleet.core.estimator import LabelledItem, corrected_mean, raw_mean
from evalfleet.core.metric import load_registry
from evalfleet.core.settings import Settings
from evalfleet.core.sums import RunningSums
from evalfleet.store import migrate, open_store
from evalfleet.store.partitions import ensure_partitions
from evalfleet.store.queries.estimate import EstimateReads
from testkit.drop_simulation import simulate_drop
from testkit.served import Served

POSTGRES_ADMIN = "postgresql://postgres@127.0.0.1:5432/postgres"
DATABASE = "evalfleet_bench_estimates"
BUDGETS = (50, 100, 200, 1000)
CONFIDENCE = 0.9


def population(rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray]:
    """True scores (people's drop in the last tenth) and the judge's (steady bias)."""
    tenth = n // 10
    truth = np.concatenate([rng.beta(5, 2, n - tenth), rng.beta(4, 2, tenth)])
    shift = np.where(rng.random(n) < 0.4, 0.15, 0.05)
    # Not clipped to 0..1: clipping makes the judge's bias depend on where people's scores
    # lie, so the drop would change the bias too (82% coverage at 1,000 labels with it).
    return truth, truth + shift + rng.normal(0, 0.08, n)


def probabilities(judge: np.ndarray, *, budget: int, design: str) -> np.ndarray:
    if design == "uniform":
        return np.full(len(judge), budget / len(judge))
    low = judge < 0.6
    base = budget / (len(judge) + 3 * int(low.sum()))
    return np.where(low, 4 * base, base)


def moments(values: np.ndarray) -> RunningSums:
    return RunningSums(n=len(values), total=float(values.sum()),
                       total_sq=float((values ** 2).sum()))


def one_run(rng: np.random.Generator, *, n: int, budget: int, design: str
            ) -> dict[str, tuple[bool, float]]:
    truth, judge = population(rng, n)
    pi = probabilities(judge, budget=budget, design=design)
    mask = rng.random(n) < pi
    labelled = [LabelledItem(judge=float(f), label=float(y), probability=float(p))
                for f, y, p in zip(judge[mask], truth[mask], pi[mask], strict=True)]
    tail = slice(n - n // 10, n)
    found: dict[str, tuple[bool, float]] = {}
    # The whole pool tunes lam; the last tenth, corrected by the whole pool, takes lam 1.
    for name, window, target, lam in (("all", judge, truth.mean(), None),
                                      ("last tenth", judge[tail], truth[tail].mean(), 1.0)):
        raw = raw_mean(moments(window), confidence=CONFIDENCE)
        corrected = corrected_mean(moments(window), moments(judge), labelled,
                                   confidence=CONFIDENCE, lam=lam).interval
        found[f"raw {name}"] = (raw.low <= target <= raw.high, raw.high - raw.low)
        found[f"corrected {name}"] = (corrected.low <= target <= corrected.high,
                                      corrected.high - corrected.low)
    return found


def coverage(*, n: int, repeat: int, seed: int) -> None:
    print(f"part 1: {n:,} verdicts, {repeat} runs per row, {CONFIDENCE:.0%} intervals, "
          "simulated at the estimator level")
    print(f"{'design':8} {'labels':>6}  {'estimate':22} {'coverage':>8} {'median width':>12}")
    rng = np.random.default_rng(seed)
    for design in ("uniform", "strata"):
        for budget in BUDGETS:
            runs = [one_run(rng, n=n, budget=budget, design=design) for _ in range(repeat)]
            for key in runs[0]:
                held = sum(run[key][0] for run in runs) / repeat
                width = statistics.median(run[key][1] for run in runs)
                print(f"{design:8} {budget:>6}  {key:22} {held:>8.1%} {width:>12.4f}")


def drop_coverage(*, n: int, repeat: int, seed: int) -> None:
    """Part 3: the corrected change of an alert's window against its baseline."""
    print(f"\npart 3: an alert's window against its baseline (testkit/drop_simulation.py), "
          f"{n:,} verdicts, {repeat} runs per row, {CONFIDENCE:.0%} intervals of the change; "
          f"verdicts of a decrease alert at the one-sided {(1 + CONFIDENCE) / 2:.0%} level")
    print(f"{'scenario':12} {'pools':6} {'labels':>6} {'w/b labels':>10} {'shared':>6} "
          f"{'raw change':>10} {'held':>6} {'held w/o cov':>12} {'width':>7}  "
          f"{'confirmed':>9} {'judge bias':>10} {'not conf.':>9}")
    rng = np.random.default_rng(seed)
    for scenario in ("people drop", "judge drop"):
        for pools in ("own", "shared"):
            for labels in (1000, 5000):
                runs = [simulate_drop(rng, n=n, labels=labels, scenario=scenario, pools=pools,
                                      confidence=CONFIDENCE) for _ in range(repeat)]

                def share(test: Any, found: list[Any] = runs) -> str:
                    return f"{sum(map(test, found)) / len(found):.1%}"

                counts = "/".join(str(round(statistics.mean(r.labels[i] for r in runs)))
                                  for i in (0, 1))
                print(f"{scenario:12} {pools:6} {labels:>6} {counts:>10} "
                      f"{round(statistics.mean(r.shared for r in runs)):>6} "
                      f"{statistics.mean(r.raw for r in runs):>+10.3f} "
                      f"{share(lambda r: r.covered):>6} {share(lambda r: r.naive_covered):>12} "
                      f"{statistics.median(r.high - r.low for r in runs):>7.4f}  "
                      f"{share(lambda r: r.verdict == 'confirmed'):>9} "
                      f"{share(lambda r: r.verdict == 'judge bias changed'):>10} "
                      f"{share(lambda r: r.verdict == 'not confirmed'):>9}")


def server_time(*, verdicts: int, rounds: int, seed: int, tmp: Path) -> None:
    """Part 2: the page and the command over a store of ``verdicts``."""
    with psycopg.connect(POSTGRES_ADMIN, autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{DATABASE}" WITH (FORCE)')
        admin.execute(f'CREATE DATABASE "{DATABASE}"')
    url = f"postgresql+psycopg://postgres@127.0.0.1:5432/{DATABASE}"
    try:
        now = _load(url, verdicts=verdicts, seed=seed)
        _time(url, now=now, rounds=rounds, tmp=tmp)
    finally:
        with psycopg.connect(POSTGRES_ADMIN, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{DATABASE}" WITH (FORCE)')


def _load(url: str, *, verdicts: int, seed: int) -> datetime:
    """COPY ``verdicts`` rag_qa verdicts over 30 days (eight apps), their scores, and a 1%
    random review slice labelled with the truth, into day partitions. Returns now."""
    store = open_store(url, pool_size=1)
    migrate(store.engine)
    now = datetime.now(UTC).replace(microsecond=0)
    with store.begin() as schema:
        ensure_partitions(schema, now=now, since=now - timedelta(days=31))
    store.close()
    rng = np.random.default_rng(seed)
    truth, unclipped = population(rng, verdicts)
    judge = np.clip(unclipped, 0, 1)  # stored scores are normalised
    ages = np.sort(rng.random(verdicts))[::-1] * 30 * 86_400
    chosen = rng.random(verdicts) < 0.01
    started = time.perf_counter()
    raw = url.replace("+psycopg", "")
    with psycopg.connect(raw) as conn, conn.cursor() as cur:
        with cur.copy(_COPY_VERDICTS) as verdict_copy:
            for i in range(verdicts):
                at = now - timedelta(seconds=float(ages[i]))
                score = {"faithfulness": float(judge[i])}
                verdict_copy.write_row((
                    i + 1, f"s-{i}", "rag_qa", "v1", "judge-1", "ok", Jsonb(score),
                    Jsonb(score), 1, 5, Jsonb({"app": f"app-{i % 8}"}), at, at))
        with cur.copy(_COPY_SCORES) as score_copy:
            for i in range(verdicts):
                at = now - timedelta(seconds=float(ages[i]))
                score_copy.write_row((i + 1, "faithfulness", "rag_qa", float(judge[i]), at, at))
        items = [int(i) for i in np.flatnonzero(chosen)]
        with cur.copy(_COPY_ITEMS) as item_copy:
            for n, k in enumerate(items, start=1):
                at = now - timedelta(seconds=float(ages[k]))
                score = {"faithfulness": float(judge[k])}
                item_copy.write_row((
                    n, f"s-{k}", "rag_qa", f"k-{k}", "v1", "judge-1", "random", 0.01, 1, 1, 0,
                    at, at, at + timedelta(days=60), at, Jsonb(score), Jsonb(score),
                    Jsonb({"app": f"app-{k % 8}"})))
        with cur.copy(_COPY_LABELS) as label_copy:
            for n, k in enumerate(items, start=1):
                label_copy.write_row((n, "ann", "faithfulness", Jsonb(float(truth[k])),
                                      float(truth[k]), "import", now))
        conn.commit()
    with psycopg.connect(raw, autocommit=True) as conn:
        conn.execute("SELECT setval('verdicts_id_seq', %s)", (verdicts,))
        conn.execute("SELECT setval('review_items_id_seq', %s)", (len(items) + 1,))
        conn.execute("VACUUM ANALYZE")
    print(f"\npart 2: {verdicts:,} rag_qa verdicts over 30 days (8 apps) and {len(items):,} "
          f"labelled random items (1%), loaded with COPY and vacuumed in "
          f"{time.perf_counter() - started:.0f} s; PostgreSQL, {os.cpu_count()} cores "
          f"({platform.processor() or platform.machine()}), shared with other work")
    return now


#: The load's COPY statements (the columns a fleet's store would fill for these rows).
_COPY_VERDICTS = ("COPY verdicts (id, sample_id, metric, prompt_version, judge_model, status,"
                  " scores, raw_scores, attempts, latency_ms, attributes, sample_ts,"
                  " created_at) FROM STDIN")
_COPY_SCORES = ("COPY verdict_scores (verdict_id, name, metric, value, sample_ts, created_at)"
                " FROM STDIN")
_COPY_ITEMS = ("COPY review_items (id, sample_id, metric, verdict_key, prompt_version,"
               " judge_model, reason, probability, labels_wanted, labels_given, skips,"
               " created_at, sample_ts, expires_at, done_at, judge_scores, judge_raw_scores,"
               " attributes)"
               " FROM STDIN")
_COPY_LABELS = ("COPY review_labels (item_id, reviewer, score, raw_value, value, source,"
                " created_at) FROM STDIN")


def _time(url: str, *, now: datetime, rounds: int, tmp: Path) -> None:
    """Median and p95 server time of the command, the two pages and an alert's check."""
    rules = tmp / "rules.yaml"
    rules.write_text(
        "rules:\n"
        "  - {name: drop, metric: rag_qa, score: faithfulness, segment_by: [app],\n"
        "     window: 6h, baseline: {type: trailing, window: 1d}}\n"
        "  - {name: pooled, metric: rag_qa, score: faithfulness, segment_by: [app],\n"
        "     window: 6h, baseline: {type: trailing, window: 1d},\n"
        "     judge_check: {label_window: 30d}}\n")
    settings = Settings(database_url=url, alert_rules_file=rules, data_dir=tmp)
    env = settings.as_environment()
    since = (now - timedelta(hours=6)).isoformat()
    engine = open_alert_engine(settings, deliver=False)
    engine.check(at=now)  # the rules evaluated once, as the pages usually find them
    engine.close()
    served = Served(build_ui_app(settings, token=None))
    store = open_store(url, pool_size=2)
    try:
        timed: list[tuple[str, Callable[[], object]]] = []
        for segment in ("", "app=app-3"):
            args = ["review", "estimate", "--metric", "rag_qa", "--score", "faithfulness",
                    "--since", since, "--until", now.isoformat(), "--label-window", "30d",
                    "--json", *(["--segment", segment] if segment else [])]
            timed.append((f"CLI review estimate, {segment or '(all)'}",
                          partial(_cli, args, env)))
            params = {"segment": segment or "(all)"}
            timed.append((f"alert page, {segment or '(all)'}",
                          partial(_get, served.url + "/alerts/drop", params)))
            timed.append((f"trend page 6h, {segment or '(all)'}",
                          partial(_get, served.url + "/rules/drop/trend",
                                  {**params, "range": "6h"})))
        for rule in load_rule_set(settings).rules:
            finding = _finding(store, rule, now=now)
            source = JudgeCheckSource(EstimateReads(store), load_registry())
            timed.append((f"alert check on firing, {rule.name} (app-3)",
                          partial(source.check, rule, finding, at=now, confidence=0.95)))
        for name, call in timed:
            call()  # warm
            times = []
            for _ in range(rounds):
                t0 = time.perf_counter()
                call()
                times.append(time.perf_counter() - t0)
            times.sort()
            print(f"{name:42} median {statistics.median(times) * 1000:>6.0f} ms, "
                  f"p95 {times[int(0.95 * (len(times) - 1))] * 1000:>6.0f} ms")
    finally:
        served.stop()
        store.close()


def _cli(args: list[str], env: dict[str, str]) -> None:
    result = CliRunner().invoke(main_command, args, env=env, catch_exceptions=False)
    assert result.exit_code == 0, result.output


def _get(url: str, params: dict[str, str]) -> None:
    response = httpx.get(url, params=params, timeout=120)
    assert response.status_code == 200, response.text[:300]
    assert "corrected-mean" in response.text


def _finding(store: Any, rule: Any, *, now: datetime) -> Finding:
    """The app-3 segment's window and baseline as the engine summarises them."""
    segment = Segment((("app", "app-3"),))
    spans_of = spans(rule, segment=segment, baseline_segment=None, at=now)
    summaries = []
    for span in spans_of:
        assert span is not None
        sums = EstimateReads(store).score_sums(metric="rag_qa", score="faithfulness",
                                               start=span.start, end=span.end,
                                               segment=segment.as_dict())
        summaries.append(Summary(n=sums.n, total=sums.total, total_sq=sums.total_sq))
    return Finding(segment=segment, current=summaries[0], baseline=summaries[1],
                   baseline_segment=segment, tests=())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--verdicts", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=500)
    parser.add_argument("--drop-repeat", type=int, default=300)
    parser.add_argument("--store-verdicts", type=int, default=2_000_000)
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--parts", default="1,2,3", help="Which parts to run, e.g. 3 or 2,3.")
    args = parser.parse_args()
    parts = set(args.parts.split(","))
    if "1" in parts:
        coverage(n=args.verdicts, repeat=args.repeat, seed=args.seed)
    if "3" in parts:
        drop_coverage(n=args.verdicts, repeat=args.drop_repeat, seed=args.seed)
    if "2" in parts and args.store_verdicts:
        with tempfile.TemporaryDirectory() as folder:
            server_time(verdicts=args.store_verdicts, rounds=args.rounds, seed=args.seed,
                        tmp=Path(folder))


if __name__ == "__main__":
    main()
