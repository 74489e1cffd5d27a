"""From admitted samples to published jobs: deduplicate, apply backpressure, publish.

For one batch: drop the (metric, sample id) pairs published within the
deduplication window, shed what the queues have no room for (by the metric's
policy), publish the rest in one batch, mark them, and report each job's fate. A final
session version shed still goes in, as a job that only marks the idle version's verdict
final (``Job.finalise_only``): it calls no judge, and without it that version would
never count.
Marking comes after publishing, so a crash in between can repeat a job (judged
once by the workers) but never lose one. If publishing fails,
:class:`BrokerUnavailable` propagates: nothing of the batch counts as accepted,
and the caller publishes it again or answers 503.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal, Protocol

from evalfleet.broker.depth import CachedQueueDepth
from evalfleet.core.errors import RetryLater
from evalfleet.core.message import Job, new_job, queue_for
from evalfleet.core.sample import Sample
from evalfleet.core.settings import ShadowJudge
from producers import telemetry
from producers.backpressure import keeps, rate_factor
from producers.budget import BudgetGate
from producers.dedupe import Deduper, dedupe_key
from producers.policy import Policy
from producers.sampler import id_fraction
from producers.screen import Admitted
from producers.selector import Pick

logger = logging.getLogger(__name__)

JobStatus = Literal["enqueued", "shed", "duplicate"]


class Publisher(Protocol):
    """Publishes jobs (:class:`producers.enqueuer.Enqueuer` is one)."""

    def send_many(self, jobs: Sequence[Job], *,
                  delays_s: Mapping[str, float] | None = None) -> None:
        """Publish ``jobs``; raise BrokerUnavailable when the broker is unreachable."""


@dataclass(frozen=True, slots=True)
class JobFate:
    """What became of one picked (sample, metric)."""

    metric: str
    """The metric."""
    status: JobStatus
    """``enqueued``, ``shed`` (queue over its limit) or ``duplicate`` (in the window)."""


class Dispatcher:
    """Deduplicates, sheds and publishes batches of admitted samples. Thread-safe."""

    def __init__(self, *, publisher: Publisher, deduper: Deduper,
                 depth: CachedQueueDepth, budget: BudgetGate | None = None,
                 shadows: Mapping[str, ShadowJudge] | None = None) -> None:
        """Wire the parts.

        Args:
            publisher: Where jobs go.
            deduper: The deduplication window.
            depth: Queue depths for backpressure.
            budget: Daily budgets lowering rates (None: no budgets).
            shadows: Per metric, a shadow judge that judges a share of its jobs too.
        """
        self._publisher = publisher
        self._deduper = deduper
        self._depth = depth
        self._budget = budget
        self._shadows = dict(shadows or {})

    def dispatch(self, batch: Sequence[Admitted], *, policy: Policy) -> list[list[JobFate]]:
        """Publish the jobs of ``batch``.

        Args:
            batch: Admitted, redacted samples.
            policy: The policy in effect (queue limits, shedding policy).

        Returns:
            For each sample, the fate of each picked metric.

        Raises:
            BrokerUnavailable: When the broker (or the shared deduplication store) cannot
                be reached; no job of the batch counts as published.
        """
        pairs = [(n, pick) for n, admitted in enumerate(batch) for pick in admitted.picks]
        keys = [dedupe_key(pick.metric, batch[n].sample.id,
                           final_session=_final_session(batch[n].sample))
                for n, pick in pairs]
        repeats = self._deduper.seen(keys)
        fates: list[list[JobFate]] = [[] for _ in batch]
        jobs: list[Job] = []
        published: list[str] = []
        in_batch: set[str] = set()
        added: Counter[str] = Counter()
        for (n, pick), key, repeat in zip(pairs, keys, repeats, strict=True):
            admitted = batch[n]
            if repeat or key in in_batch:
                fates[n].append(JobFate(pick.metric, "duplicate"))
                telemetry.DUPLICATES.labels(pick.metric).inc()
                continue
            in_batch.add(key)
            if not self._has_room(pick, admitted, policy=policy, added=added[pick.metric]):
                fates[n].append(JobFate(pick.metric, "shed"))
                if _final_session(admitted.sample):
                    # Its judging is shed, but not its mark: without it the idle version
                    # judged before would never count. It calls no judge.
                    jobs.append(new_job(pick.metric, admitted.sample, finalise_only=True))
                    published.append(key)
                    added[pick.metric] += 1
                continue
            fates[n].append(JobFate(pick.metric, "enqueued"))
            jobs.append(new_job(pick.metric, admitted.sample))
            shadow = self._shadows.get(pick.metric)
            if shadow is not None and shadows(admitted.sample.id, share=shadow.share):
                jobs.append(new_job(pick.metric, admitted.sample, purpose="shadow",
                                    judge_model=shadow.model))
                added[pick.metric] += 1
            published.append(key)
            added[pick.metric] += 1
        self._publisher.send_many(jobs, delays_s=_delays(batch))
        self._mark(published)
        for metric, count in added.items():
            self._depth.add(queue_for(metric), count)
            telemetry.JOBS.labels(metric).inc(count)
        return fates

    def _has_room(self, pick: Pick, admitted: Admitted, *, policy: Policy, added: int) -> bool:
        rule = policy.rule_for(pick.metric)
        queue = queue_for(pick.metric)
        depth = self._depth.depth(queue)
        if depth is not None:
            telemetry.QUEUE_DEPTH.labels(queue).set(depth + added)
        projected = None if depth is None else depth + added
        factor = rate_factor(depth=projected, max_depth=rule.max_queue_depth,
                             policy=rule.shed_policy)
        spend_factor = self._budget.factor(pick.metric) if self._budget else 1.0
        key = admitted.sampling_key or admitted.sample.id
        if keeps(pick, sampling_key=key, factor=factor * spend_factor):
            return True
        # Counted under the reason that shed it: the queue limit, or the daily budget.
        reason = (rule.shed_policy if not keeps(pick, sampling_key=key, factor=factor)
                  else "budget")
        telemetry.SHED.labels(pick.metric, telemetry.segment_label(admitted.segment),
                              reason).inc()
        return False

    def _mark(self, keys: list[str]) -> None:
        try:
            self._deduper.mark(keys)
        except RetryLater as exc:
            # The jobs are published; unmarked, a later copy may go in again, and the
            # workers judge it once.
            logger.warning("published, but not marked for deduplication: %s", exc)


def shadows(sample_id: str, *, share: float) -> bool:
    """Whether a shadow judge with ``share`` judges this sample too.

    By a hash of the id apart from the sampling hash, so a shadow's share is a share of
    the sampled traffic, not the same ids the sampling rate keeps.
    """
    return id_fraction(f"shadow:{sample_id}") < share


def _delays(batch: Sequence[Admitted]) -> dict[str, float]:
    return {pick.metric: pick.delay_s for admitted in batch for pick in admitted.picks
            if pick.delay_s > 0}


def _final_session(sample: Sample) -> bool:
    """True when the sample is a final session version (its id may repeat the idle
    version's, sent again to be marked final)."""
    return sample.session is not None and sample.session.final
