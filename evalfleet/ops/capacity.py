"""How many workers a queue needs: Little's law over the judge calls in flight. Pure.

A queue receiving ``arrival_per_s`` jobs, each costing ``calls_per_job`` judge
calls of ``latency_s`` seconds, keeps ``arrival_per_s x calls_per_job x latency_s``
calls in flight on average (Little's law, L = lambda W). A worker process holds
``concurrency`` calls in flight, so the queue needs that many calls divided by the
concurrency, rounded up. With one call per job this is the familiar
``arrival rate x judge latency / concurrency``.

The judge's rate limit caps what more workers can buy. Limits are per judge model
for the whole fleet: ``rpm`` allows ``rpm / 60`` calls a second and ``tpm`` allows
``tpm / 60`` tokens a second, shared by every queue judged by that model. Each
queue gets a share of both in proportion to what it asks for; its calls a second
times its own call latency is then the most calls in flight it can use.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from evalfleet.core.ratelimit import RateLimit

#: Why a queue gets no steady-state figure.
NO_LATENCY = "judge latency unknown: no verdicts yet"

#: Digits kept before rounding up, so 2.0000000001 workers is 2, not 3.
_ROUNDING_DIGITS = 9


@dataclass(frozen=True, slots=True)
class Demand:
    """What one queue asks of the judge."""

    arrival_per_s: float
    """Jobs arriving per second."""
    backlog_jobs: int | None = 0
    """Jobs waiting or in flight now (None: the broker does not say)."""
    latency_s: float | None = None
    """Mean duration of one judge call, in seconds (None: not measured)."""
    calls_per_job: float = 1.0
    """Judge calls per job (re-asks and retries make it more than one)."""
    tokens_per_call: float | None = None
    """Mean tokens one call uses (None: not measured, the token limit is not applied)."""


@dataclass(frozen=True, slots=True)
class Recommendation:
    """Worker processes for one queue; None fields mean "cannot say" (see ``reason``)."""

    workers: int | None
    """To keep up with arrivals (steady state)."""
    drain_workers: int | None
    """To keep up and also clear the backlog within the drain time."""
    calls_in_flight: float | None = None
    """Judge calls the steady state keeps in flight."""
    cap_calls_in_flight: float | None = None
    """Most calls in flight the rate limit leaves this queue (None: no limit)."""
    rate_limited: bool = False
    """The rate limit, not the arrivals, sets ``drain_workers`` (and maybe ``workers``)."""
    reason: str | None = None
    """Why there is no steady-state recommendation."""


def calls_in_flight(*, jobs_per_s: float, calls_per_job: float, latency_s: float) -> float:
    """Judge calls in flight on average (Little's law).

    Args:
        jobs_per_s: Jobs started per second.
        calls_per_job: Judge calls per job.
        latency_s: Mean duration of one call, in seconds.

    Returns:
        The mean number of calls in flight.
    """
    return max(0.0, jobs_per_s) * max(0.0, calls_per_job) * max(0.0, latency_s)


def workers_for(calls: float, *, concurrency: int) -> int:
    """Worker processes that hold ``calls`` in flight at ``concurrency`` each (rounded up).

    Raises:
        ValueError: When ``concurrency`` is not positive.
    """
    if concurrency < 1:
        raise ValueError(f"concurrency must be at least 1, got {concurrency}")
    return math.ceil(round(max(0.0, calls) / concurrency, _ROUNDING_DIGITS))


def calls_per_s(demand: Demand, *, drain_s: float) -> float:
    """Judge calls a second to keep up with arrivals and clear the backlog in ``drain_s``."""
    jobs_per_s = max(0.0, demand.arrival_per_s) + max(0, demand.backlog_jobs or 0) / drain_s
    return jobs_per_s * max(0.0, demand.calls_per_job)


def share(demands: Mapping[str, float], total: float | None) -> dict[str, float | None]:
    """Split ``total`` between queues in proportion to their demands.

    Args:
        demands: What each queue asks for, in any unit.
        total: What there is to share (None: unlimited, every share is None).

    Returns:
        Each queue's share; equal shares when nobody asks for anything.
    """
    if total is None:
        return dict.fromkeys(demands)
    asked = sum(max(0.0, demand) for demand in demands.values())
    if asked <= 0:
        return {queue: total / len(demands) for queue in demands}
    return {queue: total * max(0.0, demand) / asked for queue, demand in demands.items()}


def caps_in_flight(
    demands: Mapping[str, Demand], limit: RateLimit, *, drain_s: float,
) -> dict[str, float | None]:
    """Each queue's most useful calls in flight under one model's rate limit.

    Args:
        demands: The queues judged by the model.
        limit: The model's fleet-wide limits.
        drain_s: Backlog drain time, in seconds (backlogs count in the demand shared).

    Returns:
        Calls in flight per queue; None where nothing limits or the latency is unknown.
    """
    wanted = {queue: calls_per_s(demand, drain_s=drain_s) for queue, demand in demands.items()}
    rpm, tpm = limit.requests_per_minute, limit.tokens_per_minute
    by_requests = share(wanted, None if rpm is None else rpm / 60.0)
    metered = {queue: demand for queue, demand in demands.items() if demand.tokens_per_call}
    by_tokens = share({queue: wanted[queue] * (demand.tokens_per_call or 0.0)
                       for queue, demand in metered.items()},
                      None if tpm is None else tpm / 60.0)
    caps: dict[str, float | None] = {}
    for queue, demand in demands.items():
        token_share, tokens = by_tokens.get(queue), demand.tokens_per_call
        allowed = [rate for rate in (
            by_requests[queue],
            token_share / tokens if token_share is not None and tokens else None,
        ) if rate is not None]
        caps[queue] = (min(allowed) * demand.latency_s
                       if allowed and demand.latency_s is not None else None)
    return caps


def recommend(
    demand: Demand, *, concurrency: int, cap_calls: float | None, drain_s: float,
) -> Recommendation:
    """Worker processes for one queue.

    Args:
        demand: The queue's arrivals, backlog and judge latency.
        concurrency: Judge calls one worker process keeps in flight.
        cap_calls: The most calls in flight the rate limit leaves the queue (None: no limit).
        drain_s: Time to clear the current backlog in, in seconds.

    Returns:
        The recommendation; without a measured latency there is none.
    """
    if demand.latency_s is None:
        if demand.backlog_jobs == 0 and demand.arrival_per_s <= 0:
            return Recommendation(0, 0, calls_in_flight=0.0, cap_calls_in_flight=cap_calls)
        # Nothing to size with, but work nobody drains needs someone to start.
        waiting = bool(demand.backlog_jobs) or demand.arrival_per_s > 0
        return Recommendation(None, 1 if waiting else None, cap_calls_in_flight=cap_calls,
                              reason=NO_LATENCY + ("; start 1 worker to measure it"
                                                   if waiting else ""))
    steady = calls_in_flight(jobs_per_s=demand.arrival_per_s,
                             calls_per_job=demand.calls_per_job, latency_s=demand.latency_s)
    draining = calls_per_s(demand, drain_s=drain_s) * demand.latency_s
    limit = math.inf if cap_calls is None else cap_calls
    return Recommendation(
        workers=workers_for(min(steady, limit), concurrency=concurrency),
        drain_workers=workers_for(min(draining, limit), concurrency=concurrency),
        calls_in_flight=steady, cap_calls_in_flight=cap_calls, rate_limited=draining > limit,
    )


def recommend_fleet(
    demands: Mapping[str, Demand], *, models: Mapping[str, str],
    limits: Mapping[str, RateLimit], concurrency: int, drain_s: float,
) -> dict[str, Recommendation]:
    """Recommendations for every queue, each model's rate limit shared by its queues.

    Args:
        demands: Each queue's demand.
        models: Each queue's judge model.
        limits: Each model's limits (a model missing here has none).
        concurrency: Judge calls one worker process keeps in flight.
        drain_s: Time to clear each backlog in, in seconds.

    Returns:
        A recommendation per queue.
    """
    caps: dict[str, float | None] = {}
    for model in set(models.values()):
        mine = {queue: demand for queue, demand in demands.items() if models[queue] == model}
        caps.update(caps_in_flight(mine, limits.get(model, RateLimit()), drain_s=drain_s))
    return {queue: recommend(demand, concurrency=concurrency, cap_calls=caps.get(queue),
                             drain_s=drain_s) for queue, demand in demands.items()}
