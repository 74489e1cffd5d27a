"""Opik's ContextPrecision and evalfleet's context_precision, side by side on one judge.

Setup: N distinct context_precision samples built here from a seed, the judge
simulator in its own process at a fixed latency, used by both sides (its
counters are reset between them). Opik: ``opik.evaluation.metrics.ContextPrecision``
scores every sample with ``ascore`` in this process under an asyncio semaphore
of C, through LiteLLM ("openai/judge-sim" pointed at the simulator), tracking
off; no broker, nothing stored. evalfleet: the same samples as context_precision
jobs in messages of ``--batch-size`` on Redis, one ``evalfleet worker
--concurrency C`` storing every verdict in a fresh Postgres database. Each side
first scores one warm-up sample that is not counted.

    python -m bench.opik_comparison --samples 500 --latency-ms 500 --concurrency 64

Needs the ``bench`` extra (``pip install -e '.[dev,bench]'``), Postgres and Redis
on 127.0.0.1 (as the tests do). Prints the setup and a table.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import os
import platform
import random
import resource
import subprocess
import sys
import time
import urllib.request
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg
from celery import Celery

from bench.worker_throughput import DATABASE, cpu_s, fresh_services, start_simulator
from evalfleet.core.message import EVALUATE_TASK, Job, encode_batch, new_job, queue_for
from evalfleet.core.sample import parse_sample
from evalfleet.core.settings import Settings
from evalfleet.store import VerdictStore, open_store

METRIC = "context_precision"
#: LiteLLM model string for Opik: the OpenAI provider, base URL from OPENAI_API_BASE.
OPIK_MODEL = "openai/judge-sim"
#: Longest wait for one side's verdicts, in seconds.
SIDE_TIMEOUT_S = 600
WORKER_LOG = Path("/tmp/evalfleet-bench-opik-comparison-worker.log")
WARM_UP = {"id": "cp-warm-up", "input": "What is the capital of Australia?",
           "output": "Canberra.", "reference": "Canberra is the capital of Australia.",
           "context": ["Canberra is the capital city of Australia."]}


@dataclass(frozen=True, slots=True)
class Topic:
    """One kind of support question: format strings over ``subject``, ``value`` and ``alt``."""

    question: str
    fact: str
    expected: str
    answers: tuple[str, str, str, str]
    """Right, partial, wrong (uses ``alt``, another value) and off-topic answers."""
    subjects: tuple[str, ...]
    values: tuple[str, ...]


PRODUCTS = ("X200 vacuum", "Aero 3 kettle", "Lumen desk lamp", "Trail 40 backpack",
            "Nimbus air purifier", "Pixel Pro headphones", "Cove espresso machine",
            "Orbit robot mower")
DEVICES = ("Pixel Pro headphones", "Orbit robot mower", "Trail GPS watch", "Lumen camping lantern",
           "Nimbus handheld vacuum", "Echo bike light")
COUNTRIES = ("Germany", "France", "Spain", "Italy", "Poland", "Sweden", "Portugal", "Austria")
TOPICS = (
    Topic("How long do I have to return the {subject}?",
          "Return policy: the {subject} can be returned within {value} days of delivery if "
          "unused and in its original packaging.",
          "Within {value} days of delivery, unused and in the original packaging.",
          ("You can return the {subject} within {value} days of delivery as long as it is "
           "unused and in its original packaging.",
           "You can return the {subject} within {value} days.",
           "Returns of the {subject} are accepted for {alt} days after purchase.",
           "The {subject} usually ships within two business days."),
          PRODUCTS, ("14", "30", "60", "90")),
    Topic("How long is the warranty on the {subject}?",
          "Warranty: the {subject} is covered for {value} years against manufacturing defects; "
          "accidental damage is excluded.",
          "{value} years against manufacturing defects, not accidental damage.",
          ("The {subject} has a {value}-year warranty for manufacturing defects; accidental "
           "damage is not covered.",
           "The {subject} comes with a {value}-year warranty.",
           "The {subject} is covered for {alt} years, including accidental damage.",
           "You can register the {subject} in the mobile app."),
          PRODUCTS, ("1", "2", "3", "5")),
    Topic("How much does express shipping to {subject} cost?",
          "Express shipping to {subject}: {value} EUR per order, delivered in 1-2 business days.",
          "{value} EUR per order, delivered in 1-2 business days.",
          ("Express shipping to {subject} costs {value} EUR per order and arrives in one to "
           "two business days.",
           "It costs {value} EUR.",
           "Express shipping to {subject} is {alt} EUR per item.",
           "Standard shipping is free on orders over 50 EUR."),
          COUNTRIES, ("9.90", "14.50", "19.00", "24.90")),
    Topic("How many weeks of paid parental leave do employees in {subject} get?",
          "HR handbook, {subject}: employees receive {value} weeks of fully paid parental "
          "leave, which can be split into two blocks.",
          "{value} weeks, fully paid, which can be taken in two blocks.",
          ("Employees in {subject} get {value} weeks of fully paid parental leave and can "
           "split it into two blocks.",
           "They get {value} weeks.",
           "Employees in {subject} get {alt} weeks of parental leave at half pay.",
           "Holiday requests must be submitted two weeks in advance."),
          COUNTRIES, ("12", "16", "20", "26")),
    Topic("What is the request limit on the {subject}?",
          "Rate limits: the {subject} allows {value} requests per minute; bursts above it get "
          "HTTP 429 with a Retry-After header.",
          "{value} requests per minute; above that the API answers 429 with Retry-After.",
          ("The {subject} allows {value} requests per minute, and requests above that get a "
           "429 with a Retry-After header.",
           "The limit is {value} requests per minute.",
           "The {subject} allows {alt} requests per second.",
           "API keys can be rotated from the dashboard."),
          ("Free tier of the Search API", "Team tier of the Search API",
           "Free tier of the Geocoding API", "Business tier of the Geocoding API",
           "Starter tier of the Payments API", "Enterprise tier of the Payments API"),
          ("60", "300", "1200", "6000")),
    Topic("How long is a password reset link valid in {subject}?",
          "Security FAQ ({subject}): a password reset link expires {value} minutes after it "
          "is sent and can be used only once.",
          "{value} minutes, and only once.",
          ("A reset link in {subject} expires after {value} minutes and works only once.",
           "It is valid for {value} minutes.",
           "Reset links in {subject} stay valid for {alt} hours.",
           "You can turn on two-factor authentication under Settings."),
          ("the web app", "the iOS app", "the Android app", "the admin console", "the partner "
           "portal"), ("15", "30", "60", "120")),
    Topic("How long are {subject} kept?",
          "Data retention: {subject} are kept for {value} days and then deleted permanently.",
          "{value} days, then they are permanently deleted.",
          ("{subject} are retained for {value} days and then permanently deleted.",
           "They are kept for {value} days.",
           "{subject} are kept for {alt} days and archived afterwards.",
           "Exports can be scheduled daily or weekly."),
          ("audit logs", "access logs", "billing records", "chat transcripts", "crash reports",
           "support tickets"), ("30", "90", "180", "365")),
    Topic("How long does the battery of the {subject} last?",
          "Specifications: the {subject} runs for up to {value} hours on a full charge; "
          "charging takes about 2 hours.",
          "Up to {value} hours per charge; about 2 hours to recharge.",
          ("The {subject} lasts up to {value} hours on a full charge and recharges in about "
           "two hours.",
           "About {value} hours.",
           "The battery of the {subject} lasts {alt} hours and needs a night to charge.",
           "The {subject} is available in black and silver."),
          DEVICES, ("6", "10", "24", "40")),
    Topic("When does the first train from {subject} leave on weekdays?",
          "Timetable: on weekdays the first train from {subject} departs at {value}; on "
          "Sundays service starts an hour later.",
          "At {value} on weekdays.",
          ("On weekdays the first train from {subject} leaves at {value}; on Sundays it is an "
           "hour later.",
           "Around {value}.",
           "The first weekday train from {subject} leaves at {alt}.",
           "Tickets can be bought in the app or at the station."),
          ("Lyon to Geneva", "Utrecht to Amsterdam", "Graz to Vienna", "Porto to Lisbon",
           "Malmo to Copenhagen", "Bologna to Florence"), ("04:52", "05:10", "05:35", "06:02")),
    Topic("How long does a refund by {subject} take?",
          "Refunds: money paid by {subject} is returned within {value} business days after "
          "the returned item is checked.",
          "Within {value} business days after the return is checked.",
          ("A refund by {subject} arrives within {value} business days after we check the "
           "returned item.",
           "Within {value} business days.",
           "Refunds by {subject} take {alt} weeks.",
           "You can print a return label from your order page."),
          ("credit card", "PayPal", "bank transfer", "gift card", "Klarna"),
          ("3", "5", "7", "10")),
)
DISTRACTORS = (
    "Customer service is open Monday to Friday, 8:00 to 18:00 CET.",
    "Orders placed before 14:00 ship the same day.",
    "Gift cards cannot be exchanged for cash.",
    "The loyalty programme gives one point per euro spent.",
    "Prices include VAT for deliveries within the EU.",
    "Firmware updates are installed automatically overnight.",
    "Accounts inactive for two years are closed after a notice by email.",
    "Student discounts require a valid university email address.",
)
ANSWER_WEIGHTS = (40, 25, 20, 15)


def build_samples(*, count: int, seed: int) -> list[dict[str, Any]]:
    """Distinct context_precision samples with 1 to 3 context chunks, the same for a seed.

    Args:
        count: How many samples.
        seed: Seed of the generator.

    Returns:
        Sample records (id, input, output, reference, context, attributes).
    """
    rng = random.Random(seed)
    samples: list[dict[str, Any]] = []
    seen: set[tuple[str, ...]] = set()
    while len(samples) < count:
        sample = _one_sample(rng, sample_id=f"cp-{len(samples):04d}")
        key = (sample["input"], sample["output"], *sample["context"])
        if key not in seen:
            seen.add(key)
            samples.append(sample)
    return samples


def _one_sample(rng: random.Random, *, sample_id: str) -> dict[str, Any]:
    topic = rng.choice(TOPICS)
    value = rng.choice(topic.values)
    names = {"subject": rng.choice(topic.subjects), "value": value,
             "alt": rng.choice([other for other in topic.values if other != value])}
    answer = rng.choices(topic.answers, weights=ANSWER_WEIGHTS)[0]
    context = [topic.fact.format(**names)] if rng.random() < 0.9 else []  # retrieval misses
    wanted = rng.randint(1, 3)
    while len(context) < wanted:
        other = rng.choice(TOPICS)
        chunk = rng.choice([
            rng.choice(DISTRACTORS),
            other.fact.format(subject=rng.choice(other.subjects), value=rng.choice(other.values)),
        ])
        if chunk not in context:
            context.append(chunk)
    rng.shuffle(context)
    output = answer.format(**names)
    return {"id": sample_id, "input": topic.question.format(**names),
            "output": output[0].upper() + output[1:],
            "reference": topic.expected.format(**names), "context": context,
            "attributes": {"app": "bench", "route": "/support"}}


@dataclass(slots=True)
class SideResult:
    """What one side did with the samples."""

    scored: int
    """Samples that got a score."""
    failures: Counter[str]
    """Samples without a score, by kind."""
    elapsed_s: float
    """From the first request (Opik) or the first enqueue (evalfleet) to the last verdict."""
    cpu_s: float
    """CPU of the process that judged: this one (Opik) or the worker (evalfleet)."""
    sim: dict[str, Any] = field(default_factory=dict)
    """The simulator's counters for this side alone."""
    notes: list[str] = field(default_factory=list)
    """Extra lines printed under the table."""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--samples", type=int, default=500)
    parser.add_argument("--latency-ms", type=float, default=500)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--batch-size", type=int, default=16, help="evalfleet jobs per message.")
    parser.add_argument("--seed", type=int, default=4)
    args = parser.parse_args()
    samples = build_samples(count=args.samples, seed=args.seed)
    sim, base_url = start_simulator(args.latency_ms)
    print_setup(args, samples)
    try:
        results = {
            "opik": run_opik(samples, base_url=base_url, concurrency=args.concurrency),
            "evalfleet": run_evalfleet(samples, base_url=base_url, concurrency=args.concurrency,
                                       batch_size=args.batch_size),
        }
    finally:
        sim.terminate()
        sim.wait()
    print_table(results, samples=len(samples), concurrency=args.concurrency,
                latency_ms=args.latency_ms)


def print_setup(args: argparse.Namespace, samples: Sequence[Mapping[str, Any]]) -> None:
    from importlib.metadata import version

    chunks = Counter(len(sample["context"]) for sample in samples)
    print(f"setup: {platform.machine()}, {os.cpu_count()} cores, python "
          f"{platform.python_version()}, opik {version('opik')}, litellm {version('litellm')}, "
          f"celery {version('celery')}; {len(samples)} distinct {METRIC} samples (seed "
          f"{args.seed}; context chunks {dict(sorted(chunks.items()))}), C = {args.concurrency}, "
          f"judge latency {args.latency_ms:g} ms (simulator in its own process, shared, "
          f"counters reset per side)")
    print(f"  opik: ContextPrecision(model={OPIK_MODEL!r}, track=False, temperature=0.0)"
          f".ascore in this process, asyncio semaphore of {args.concurrency}; includes LiteLLM "
          f"and Opik's parsing; no broker, no persistence")
    print(f"  evalfleet: jobs in messages of {args.batch_size} on Redis, one `evalfleet worker "
          f"--concurrency {args.concurrency}` process, verdicts stored in Postgres; includes "
          f"broker, claims, rendering, parsing, persistence; wall time starts at the enqueue")
    print("  both: one warm-up sample first, not counted; CPU is the judging process's "
          "user+system time over the measured window", flush=True)


def print_table(results: Mapping[str, SideResult], *, samples: int, concurrency: int,
                latency_ms: float) -> None:
    ceiling = concurrency / (latency_ms / 1000)
    print(f"{'side':<10} {'verdicts/s':>11} {'C/L':>7} {'of C/L':>7} {'CPU ms/verdict':>15} "
          f"{'judge calls':>12} {'peak in flight':>15} {'failures':>9}")
    for name, result in results.items():
        rate = result.scored / result.elapsed_s
        print(f"{name:<10} {rate:>11.1f} {ceiling:>7.1f} {rate / ceiling:>7.0%} "
              f"{1000 * result.cpu_s / samples:>15.2f} {result.sim.get('requests', 0):>12} "
              f"{result.sim.get('max_in_flight', 0):>15} {sum(result.failures.values()):>9}")
    for name, result in results.items():
        statuses, outcomes = result.sim.get("by_status", {}), result.sim.get("by_outcome", {})
        print(f"{name}: simulator saw HTTP statuses {statuses}, outcomes "
              f"{ {kind: n for kind, n in outcomes.items() if n} }, "
              f"{result.sim.get('requests', 0) / samples:.2f} judge calls per sample")
        if result.failures:
            print(f"{name}: failures {dict(result.failures)}")
        for note in result.notes:
            print(f"{name}: {note}")


# --- Opik ------------------------------------------------------------------------------


def run_opik(samples: Sequence[Mapping[str, Any]], *, base_url: str,
             concurrency: int) -> SideResult:
    """Score the samples with Opik's ContextPrecision in this process.

    Args:
        samples: The sample records.
        base_url: The simulator's OpenAI base URL (ending in ``/v1``).
        concurrency: Scores in flight at once.

    Returns:
        The side's figures.
    """
    with _environment(opik_environment(base_url)), _tally_log_records() as records:
        cpu_before, started = process_cpu_s(), time.monotonic()
        from opik.evaluation.metrics import ContextPrecision  # only this side needs opik

        metric = ContextPrecision(model=OPIK_MODEL, track=False, temperature=0.0)
        import_note = (f"importing opik and building the metric took "
                       f"{time.monotonic() - started:.1f} s, {process_cpu_s() - cpu_before:.1f} "
                       f"s CPU (not counted)")
        result = asyncio.run(_ascore_measured(metric, samples, base_url=base_url,
                                              concurrency=concurrency))
    result.sim = simulator_stats(base_url)
    result.notes.insert(0, import_note)
    kinds = Counter(f"{record.name}:{record.levelname}" for record in records)
    result.notes.append(f"log records at WARNING or above: {dict(kinds) or 'none'}")
    return result


def opik_environment(base_url: str) -> dict[str, str]:
    """Environment that keeps Opik and LiteLLM offline and points LiteLLM at the simulator."""
    return {
        "OPIK_TRACK_DISABLE": "true", "OPIK_ANALYTICS_ENABLE": "false",
        "OPIK_SENTRY_ENABLE": "false", "OPIK_ENABLE_LITELLM_MODELS_MONITORING": "false",
        # Otherwise LiteLLM fetches its price list from the internet on import, retrying.
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",
        "OPENAI_API_BASE": base_url, "OPENAI_API_KEY": "sk-bench-not-a-key",
    }


async def _ascore_measured(metric: Any, samples: Sequence[Mapping[str, Any]], *, base_url: str,
                           concurrency: int) -> SideResult:
    # One loop for warm-up and run: LiteLLM caches its HTTP clients per loop.
    await _ascore_one(metric, WARM_UP)
    reset_simulator(base_url)
    slots = asyncio.Semaphore(concurrency)

    async def one(sample: Mapping[str, Any]) -> str | None:
        async with slots:
            return await _ascore_one(metric, sample)

    cpu_before, started = process_cpu_s(), time.monotonic()
    outcomes = await asyncio.gather(*(one(sample) for sample in samples))
    elapsed, cpu = time.monotonic() - started, process_cpu_s() - cpu_before
    failures = Counter(outcome for outcome in outcomes if outcome is not None)
    return SideResult(scored=len(samples) - sum(failures.values()), failures=failures,
                      elapsed_s=elapsed, cpu_s=cpu)


async def _ascore_one(metric: Any, sample: Mapping[str, Any]) -> str | None:
    """None when scored, else the kind of failure."""
    try:
        result = await metric.ascore(input=sample["input"], output=sample["output"],
                                     expected_output=sample["reference"],
                                     context=list(sample["context"]))
    except Exception as exc:  # every failure is counted, whatever its type
        return type(exc).__name__
    if result.scoring_failed or not 0.0 <= result.value <= 1.0:
        return "scoring_failed"
    return None


@contextlib.contextmanager
def _environment(overrides: Mapping[str, str]) -> Iterator[None]:
    saved = {name: os.environ.get(name) for name in overrides}
    os.environ.update(overrides)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


class _Tally(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.records: dict[int, logging.LogRecord] = {}

    def emit(self, record: logging.LogRecord) -> None:
        self.records[id(record)] = record  # kept alive, so ids stay unique


@contextlib.contextmanager
def _tally_log_records() -> Iterator[list[logging.LogRecord]]:
    """Collect WARNING+ records; LiteLLM's loggers do not propagate to the root."""
    tally = _Tally()
    records: list[logging.LogRecord] = []
    loggers = [logging.getLogger(name) for name in ("", "LiteLLM", "LiteLLM Router")]
    logging.captureWarnings(True)
    for logger in loggers:
        logger.addHandler(tally)
    try:
        yield records
    finally:
        for logger in loggers:
            logger.removeHandler(tally)
        logging.captureWarnings(False)
        records.extend(tally.records.values())


# --- evalfleet -------------------------------------------------------------------------


def run_evalfleet(samples: Sequence[Mapping[str, Any]], *, base_url: str, concurrency: int,
                  batch_size: int) -> SideResult:
    """Judge the samples with one evalfleet worker process, verdicts stored in Postgres.

    Args:
        samples: The sample records.
        base_url: The simulator's OpenAI base URL (ending in ``/v1``).
        concurrency: ``--concurrency`` of the worker.
        batch_size: Jobs per message.

    Returns:
        The side's figures.
    """
    settings = fresh_services(base_url).model_copy(update={"batch_size": batch_size})
    store = open_store(settings.resolved_database_url())
    with WORKER_LOG.open("wb") as log:  # the child keeps its own copy of the descriptor
        worker = subprocess.Popen(
            [sys.executable, "-m", "evalfleet", "worker", "--queues", METRIC,
             "--concurrency", str(concurrency), "--loglevel", "WARNING"],
            env={**os.environ, **settings.as_environment()}, stdout=log,
            stderr=subprocess.STDOUT)
    try:
        enqueue(settings, [WARM_UP])
        wait_for_results(store, worker, total=1)
        reset_simulator(base_url)
        cpu_before, started = cpu_s(worker.pid), time.monotonic()
        producer_cpu_s = enqueue(settings, samples)
        wait_for_results(store, worker, total=1 + len(samples))
        elapsed, cpu = time.monotonic() - started, cpu_s(worker.pid) - cpu_before
    finally:
        worker.terminate()
        worker.wait()
    dead_letters = store.counts().dead_letters
    store.close()
    persisted, ok = count_persisted([sample["id"] for sample in samples])
    failures = Counter({"failed verdict": persisted - ok, "dead letter": dead_letters})
    return SideResult(
        scored=ok, failures=+failures, elapsed_s=elapsed, cpu_s=cpu,
        sim=simulator_stats(base_url),
        notes=[f"{persisted} of {len(samples)} samples have a verdict stored in Postgres "
               f"({ok} ok, {persisted - ok} failed), {dead_letters} dead letters",
               f"enqueueing took {1000 * producer_cpu_s / len(samples):.2f} ms CPU per job "
               f"in this process (not counted); worker log {WORKER_LOG}"])


def enqueue(settings: Settings, samples: Sequence[Mapping[str, Any]]) -> float:
    """Publish the samples as context_precision jobs in batches; returns this process's CPU s."""
    cpu_before = process_cpu_s()
    app = Celery("bench-producer", broker=settings.resolved_broker_url(), set_as_current=False)
    with app.producer_or_acquire() as producer:
        for start in range(0, len(samples), settings.broker.batch_size):
            batch: list[Job] = [new_job(METRIC, parse_sample(dict(sample)))
                                for sample in samples[start:start + settings.broker.batch_size]]
            app.send_task(EVALUATE_TASK, args=[encode_batch(batch)], queue=queue_for(METRIC),
                          producer=producer)
    app.close()
    return process_cpu_s() - cpu_before


def wait_for_results(store: VerdictStore, worker: subprocess.Popen[bytes], *,
                     total: int) -> None:
    """Wait until verdicts and dead letters add up to ``total``.

    Raises:
        RuntimeError: When the worker exits or the side runs past ``SIDE_TIMEOUT_S``.
    """
    deadline = time.monotonic() + SIDE_TIMEOUT_S
    while True:
        counts = store.counts()
        if counts.verdicts + counts.dead_letters >= total:
            return
        if worker.poll() is not None:
            raise RuntimeError(f"the worker exited, see {WORKER_LOG}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"no result for {total - counts.verdicts} jobs after "
                               f"{SIDE_TIMEOUT_S} s, see {WORKER_LOG}")
        time.sleep(0.02)


def count_persisted(sample_ids: Sequence[str]) -> tuple[int, int]:
    """Samples with a stored context_precision verdict, and those whose verdict is ok."""
    with psycopg.connect(f"postgresql://postgres@127.0.0.1:5432/{DATABASE}") as conn:
        row = conn.execute(
            "SELECT count(DISTINCT sample_id), count(DISTINCT sample_id) FILTER "
            "(WHERE status = 'ok') FROM verdicts WHERE metric = %s AND sample_id = ANY(%s)",
            (METRIC, list(sample_ids))).fetchone()
    assert row is not None
    return int(row[0]), int(row[1])


# --- shared ----------------------------------------------------------------------------


def process_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def simulator_stats(base_url: str) -> dict[str, Any]:
    with urllib.request.urlopen(f"{base_url.removesuffix('/v1')}/_sim/stats") as response:
        stats: dict[str, Any] = json.load(response)
    return stats


def reset_simulator(base_url: str) -> None:
    request = urllib.request.Request(f"{base_url.removesuffix('/v1')}/_sim/reset", data=b"",
                                     method="POST")
    urllib.request.urlopen(request).close()


if __name__ == "__main__":
    main()
