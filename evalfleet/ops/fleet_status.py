"""The fleet's state per queue, from queue readings and recent activity. Pure.

Completions (verdicts plus dead letters), failures, lag and judge figures are over
the activity window. Arrivals come from two queue readings, by conservation of
jobs: what arrived between them is what completed between them plus the growth of
the backlog (waiting plus in-flight jobs). Without two readings of a known backlog,
arrivals are taken to equal the window's completions, and the status says so.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any, NamedTuple

from evalfleet.broker.probe import QueueReading
from evalfleet.core.endpoint import JudgeEndpoint
from evalfleet.core.message import queue_for
from evalfleet.core.metric import Metric
from evalfleet.core.ratelimit import RateLimit
from evalfleet.core.settings import strip_credentials
from evalfleet.ops.activity import Activity, JudgeCost
from evalfleet.ops.capacity import Demand, Recommendation, recommend_fleet
from evalfleet.store import JudgeIdentity


@dataclass(frozen=True, slots=True)
class FailureRate:
    """How often one kind of failure ended a job in the window."""

    error_class: str
    count: int
    per_s: float
    share: float
    """Of the jobs completed in the window."""
    outcome: str
    """``failed`` (a failed verdict) or ``dead_letter``."""


@dataclass(frozen=True, slots=True)
class TierEndpoint:
    """Where one judge tier of a metric's cascade is asked, as status shows it."""

    tier: int
    """1 for the cheapest (check tiers count: they run in the worker, no endpoint)."""
    model: str
    endpoint: str | None
    """The named endpoint (``EVALFLEET_JUDGE_ENDPOINTS``); None: the fleet's judge."""
    url: str | None
    """Its base URL without credentials; None when the settings give none (a named
    endpoint they do not define, a worker refuses to start; the fleet's judge with
    ``OPENAI_BASE_URL`` unset, the OpenAI API)."""

    @property
    def defined(self) -> bool:
        """False for a named endpoint the settings do not define."""
        return self.endpoint is None or self.url is not None


def cascade_endpoints(metric: Metric, *, endpoints: Mapping[str, JudgeEndpoint],
                      default_url: str | None) -> tuple[TierEndpoint, ...]:
    """Each judge tier of the metric's cascade with the endpoint it is asked on (none
    for a metric without a cascade: its queue's judge model is the fleet's judge's). Pure.

    Args:
        metric: The metric.
        endpoints: The settings' named endpoints.
        default_url: The fleet's judge's base URL (``OPENAI_BASE_URL``), if set.
    """
    found = []
    for number, tier in enumerate(metric.spec.judge.cascade, start=1):
        if tier.check is not None:
            continue
        named = endpoints.get(tier.endpoint) if tier.endpoint is not None else None
        url = named.base_url if named is not None else (
            default_url if tier.endpoint is None else None)
        found.append(TierEndpoint(tier=number, model=tier.label, endpoint=tier.endpoint,
                                  url=strip_credentials(url) if url else None))
    return tuple(found)


def endpoint_text(tier: TierEndpoint) -> str:
    """One tier's endpoint as the status table's note says it."""
    if tier.endpoint is None:
        return (f"tier {tier.tier} {tier.model} on the fleet's judge "
                f"({tier.url or 'OPENAI_BASE_URL unset: the OpenAI API'})")
    where = tier.url or "not defined in EVALFLEET_JUDGE_ENDPOINTS: workers refuse to start"
    return f"tier {tier.tier} {tier.model} on endpoint {tier.endpoint} ({where})"


@dataclass(frozen=True)
class QueueStatus:
    """One metric queue."""

    metric: str
    queue: str
    judge_model: str
    reading: QueueReading
    oldest_age_s: float | None
    """Age of the oldest waiting job (since the producer accepted it)."""
    arrival_per_s: float
    arrival_basis: str
    """How ``arrival_per_s`` was estimated, in words."""
    completed_per_s: float
    """Verdicts plus dead letters per second."""
    failures: tuple[FailureRate, ...]
    lag_mean_s: float | None
    """Mean time from the sample to its verdict."""
    lag_max_s: float | None
    judge: JudgeCost | None
    recommendation: Recommendation
    endpoints: tuple[TierEndpoint, ...] = ()
    """A cascade's judge tiers and where each is asked; empty without a cascade."""


@dataclass(frozen=True)
class FleetStatus:
    """Every queue at one moment, and the assumptions behind the recommendations."""

    at: datetime
    window_s: float
    concurrency: int
    """Judge calls in flight per worker process."""
    drain_s: float
    """Time the drain recommendation clears backlogs in."""
    queues: tuple[QueueStatus, ...]
    identities: tuple[JudgeIdentity, ...] = ()
    """What the judge models reported about themselves lately (see :func:`identity_changes`)."""


class _Flow(NamedTuple):
    completed_per_s: float
    arrival_per_s: float
    basis: str


def arrival_rate(
    *, completed_per_s: float, completed_between: int | None,
    earlier: QueueReading | None, later: QueueReading,
) -> tuple[float, str]:
    """Jobs arriving per second between two readings of a queue.

    Args:
        completed_per_s: Jobs completed per second over the activity window (the
            fallback when the backlog change is unknown).
        completed_between: Jobs completed between the two readings (None: not counted).
        earlier: The previous reading of the queue, if any.
        later: The current reading.

    Returns:
        The rate (never negative) and how it was estimated.
    """
    growth = backlog_growth(earlier, later) if earlier is not None else None
    if earlier is None or growth is None or completed_between is None:
        return completed_per_s, "window completions (backlog change unknown)"
    elapsed_s = (later.read_at - earlier.read_at).total_seconds()
    if elapsed_s <= 0:
        return completed_per_s, "window completions (one reading)"
    arrived = completed_between + growth
    return max(0.0, arrived / elapsed_s), \
        f"completions + backlog change over {elapsed_s:.0f} s"


def backlog_growth(earlier: QueueReading, later: QueueReading) -> int | None:
    """Jobs the backlog (waiting plus in flight) grew by between two readings.

    When either waiting count is sampled, both are taken as messages x the later
    sample's jobs per message: the sample's mix changes as the queue moves (batches of
    16 consumed at one end, smaller ones published at the other), and two different
    means would pass that change off as arrivals or departures.
    """
    before, after = earlier.backlog_jobs, later.backlog_jobs
    if before is None or after is None:
        return None
    sampled = not (earlier.waiting_exact and later.waiting_exact)
    if not sampled or earlier.waiting_messages is None or not later.waiting_messages:
        return after - before
    per_message = (later.waiting_jobs or 0) / later.waiting_messages
    waiting_growth = (later.waiting_messages - earlier.waiting_messages) * per_message
    return round(waiting_growth) + (later.in_flight_jobs or 0) - (earlier.in_flight_jobs or 0)


def failure_rates(activity: Activity, *, window_s: float) -> tuple[FailureRate, ...]:
    """Failed verdicts and dead letters by error class, most frequent first."""
    completed = activity.completed
    rates = [
        FailureRate(error_class, count, count / window_s,
                    count / completed if completed else 0.0, outcome)
        for outcome, counts in (("failed", activity.failed),
                                ("dead_letter", activity.dead_letters))
        for error_class, count in counts.items()
    ]
    return tuple(sorted(rates, key=lambda rate: (-rate.count, rate.error_class)))


def build_status(
    *, at: datetime, window_s: float, concurrency: int, drain_s: float,
    readings: Mapping[str, QueueReading], earlier: Mapping[str, QueueReading],
    completed_between: Mapping[str, int], activity: Mapping[str, Activity],
    models: Mapping[str, str], limits: Mapping[str, RateLimit],
    identities: Sequence[JudgeIdentity] = (),
    endpoints: Mapping[str, Sequence[TierEndpoint]] | None = None,
) -> FleetStatus:
    """Put readings and activity together, with a worker recommendation per queue.

    Args:
        at: The time of the status.
        window_s: Length of the activity window, in seconds.
        concurrency: Judge calls in flight per worker process.
        drain_s: Time to clear backlogs in, for the drain recommendation.
        readings: The current reading per metric.
        earlier: A previous reading per metric (for arrivals), possibly empty.
        completed_between: Jobs completed per metric since the ``earlier`` readings.
        activity: Activity per metric.
        models: Judge model per metric.
        limits: Rate limits per judge model.
        identities: What the judge models reported about themselves lately.
        endpoints: A cascade metric's judge tiers and their endpoints, by metric
            (:func:`cascade_endpoints`).

    Returns:
        The fleet status, metrics in the order of ``readings``.
    """
    flows = {}
    for metric, reading in readings.items():
        done = activity[metric].completed / window_s
        flows[metric] = _Flow(done, *arrival_rate(
            completed_per_s=done, completed_between=completed_between.get(metric),
            earlier=earlier.get(metric), later=reading))
    judges = {metric: activity[metric].judge or (
                  _borrowed_judge(metric, activity, models)
                  if readings[metric].backlog_jobs or flows[metric].arrival_per_s else None)
              for metric in readings}
    demands = {metric: _demand(flows[metric].arrival_per_s, readings[metric], judges[metric])
               for metric in readings}
    advice = recommend_fleet(demands, models=models, limits=limits, concurrency=concurrency,
                             drain_s=drain_s)
    queues = tuple(
        QueueStatus(
            metric=metric, queue=queue_for(metric), judge_model=models[metric],
            reading=reading, oldest_age_s=_age_s(reading, at=at),
            arrival_per_s=flows[metric].arrival_per_s, arrival_basis=flows[metric].basis,
            completed_per_s=flows[metric].completed_per_s,
            failures=failure_rates(activity[metric], window_s=window_s),
            lag_mean_s=activity[metric].lag_mean_s, lag_max_s=activity[metric].lag_max_s,
            judge=judges[metric], recommendation=advice[metric],
            endpoints=tuple((endpoints or {}).get(metric, ())),
        )
        for metric, reading in readings.items()
    )
    return FleetStatus(at=at, window_s=window_s, concurrency=concurrency, drain_s=drain_s,
                       queues=queues, identities=tuple(identities))


def identity_changes(identities: Sequence[JudgeIdentity]) -> dict[str, list[JudgeIdentity]]:
    """The judge models that answered under more than one identity, each with its
    identities in the order first seen: a provider's silent model or backend change.

    Args:
        identities: As :meth:`VerdictStore.judge_identities` returns them.

    Returns:
        By model asked for, only those with a change.
    """
    by_model: dict[str, list[JudgeIdentity]] = {}
    for identity in identities:
        by_model.setdefault(identity.judge_model, []).append(identity)
    return {model: sorted(seen, key=lambda identity: identity.first_at)
            for model, seen in by_model.items() if len(seen) > 1}


def _borrowed_judge(metric: str, activity: Mapping[str, Activity],
                    models: Mapping[str, str]) -> JudgeCost | None:
    """For a metric with work but no verdicts yet: another metric's judge figures, same model.

    Its own prompts may be longer or shorter, so the basis says where the figures
    come from; that is better than no recommendation for a queue nobody drains yet.
    """
    for other, seen in activity.items():
        if other != metric and seen.judge and models.get(other) == models.get(metric):
            return replace(seen.judge, basis=f"{other} (same judge model)")
    return None


def _demand(arrival_per_s: float, reading: QueueReading, judge: JudgeCost | None) -> Demand:
    return Demand(
        arrival_per_s=arrival_per_s, backlog_jobs=reading.backlog_jobs,
        latency_s=judge.latency_s if judge else None,
        calls_per_job=judge.calls_per_job if judge else 1.0,
        tokens_per_call=judge.tokens_per_call if judge else None,
    )


def _age_s(reading: QueueReading, *, at: datetime) -> float | None:
    if reading.oldest_enqueued_at is None:
        return None
    return max(0.0, (at - reading.oldest_enqueued_at).total_seconds())


def status_json(status: FleetStatus) -> dict[str, Any]:
    """The status as a JSON-safe dict (``evalfleet status --json``)."""
    return {
        "at": _iso(status.at), "window_s": status.window_s,
        "concurrency": status.concurrency, "drain_s": status.drain_s,
        "queues": [_queue_json(queue) for queue in status.queues],
        "judge_identities": [
            {"judge_model": identity.judge_model, "reported_model": identity.reported_model,
             "fingerprint": identity.fingerprint, "verdicts": identity.verdicts,
             "first_at": _iso(identity.first_at), "last_at": _iso(identity.last_at)}
            for identity in status.identities],
    }


def _queue_json(queue: QueueStatus) -> dict[str, Any]:
    reading, advice, judge = queue.reading, queue.recommendation, queue.judge
    return {
        "metric": queue.metric, "queue": queue.queue, "judge_model": queue.judge_model,
        "waiting_jobs": reading.waiting_jobs, "waiting_messages": reading.waiting_messages,
        "waiting_exact": reading.waiting_exact, "in_flight_jobs": reading.in_flight_jobs,
        "in_flight_messages": reading.in_flight_messages,
        "scheduled_jobs": reading.scheduled_jobs, "oldest_job_age_s": queue.oldest_age_s,
        "queue_note": reading.note,
        "arrival_per_s": queue.arrival_per_s, "arrival_basis": queue.arrival_basis,
        "completed_per_s": queue.completed_per_s,
        "lag_mean_s": queue.lag_mean_s, "lag_max_s": queue.lag_max_s,
        "judge_latency_s": judge.latency_s if judge else None,
        "calls_per_job": judge.calls_per_job if judge else None,
        "tokens_per_call": judge.tokens_per_call if judge else None,
        "cached_prompt_share": judge.cached_share if judge else None,
        "judge_basis": judge.basis if judge else None,
        "failures": [
            {"error_class": f.error_class, "outcome": f.outcome, "count": f.count,
             "per_s": f.per_s, "share": f.share} for f in queue.failures
        ],
        "recommended_workers": advice.workers, "drain_workers": advice.drain_workers,
        "calls_in_flight": advice.calls_in_flight,
        "rate_limit_calls_in_flight": advice.cap_calls_in_flight,
        "rate_limited": advice.rate_limited, "recommendation_note": advice.reason,
        "judge_endpoints": [
            {"tier": tier.tier, "model": tier.model, "endpoint": tier.endpoint,
             "url": tier.url, "defined": tier.defined} for tier in queue.endpoints],
    }


def _iso(moment: datetime) -> str:
    return moment.isoformat().replace("+00:00", "Z")
