"""The books of a chaos run and the guarantees checked on them. Pure: plain data in, words out.

A :class:`Ledger` holds, per sample, what the database and the judge simulator
counted; :func:`broken_guarantees` names every guarantee the run broke:

- every accepted sample holds exactly one verdict or exactly one dead letter, and
  nothing else was settled;
- no verdict key is stored twice;
- once a verdict is stored its prompt never reaches the judge again (the watcher
  noted each sample's calls when it first saw the verdict);
- judge answers that did not become the stored verdict (:func:`extra_calls`) stay
  within the scenario's :class:`Allowance`;
- after the disturbance ended no sample got a second 200 reply.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import ClassVar


@dataclass(frozen=True)
class Allowance:
    """Judge answers a scenario's disturbance may waste, and why."""

    total: int
    """Most extra judge calls over the whole run."""
    per_sample: int
    """Most extra judge calls for one sample."""
    reason: str
    """Why the disturbance can waste that many, in one sentence."""
    explained: frozenset[str] | None = None
    """The only samples that may have any extra call; None: any sample."""


@dataclass(frozen=True)
class Ledger:
    """What a run left behind, per sample id."""

    accepted: frozenset[str]
    """Samples the broker accepted."""
    verdicts: Mapping[str, int]
    """Verdict rows per sample."""
    dead_letters: Mapping[str, int]
    """Dead letters per sample."""
    answered: Mapping[str, int]
    """200 replies of the judge per sample (replies to a client that left are not)."""
    calls: Mapping[str, int]
    """Judge requests per sample, whatever their answer."""
    calls_when_stored: Mapping[str, int]
    """Judge requests per sample when its verdict was first seen stored."""
    duplicate_keys: int = 0
    """Verdict keys stored more than once."""
    answered_at_end: Mapping[str, int] | None = field(default=None)
    """200 replies per sample when the disturbance ended; None: it lasted the whole run."""


def extra_calls(ledger: Ledger) -> dict[str, int]:
    """Per sample, the 200 replies that did not become its stored verdict (only those > 0)."""
    extra = {}
    for sample_id, answered in ledger.answered.items():
        wasted = answered - (1 if ledger.verdicts.get(sample_id) else 0)
        if wasted > 0:
            extra[sample_id] = wasted
    return extra


def broken_guarantees(ledger: Ledger, allowance: Allowance) -> list[str]:
    """Every guarantee ``ledger`` breaks, one sentence each; empty when all hold."""
    return [*_settlement(ledger), *_judge_calls(ledger, allowance)]


def _settlement(ledger: Ledger) -> Iterator[str]:
    for sample_id in sorted(ledger.accepted):
        verdicts = ledger.verdicts.get(sample_id, 0)
        letters = ledger.dead_letters.get(sample_id, 0)
        if verdicts + letters != 1:
            yield (f"{sample_id}: {verdicts} verdict(s) and {letters} dead letter(s), want "
                   "exactly one of them")
    settled = {sample for sample, n in [*ledger.verdicts.items(), *ledger.dead_letters.items()]
               if n}
    for sample_id in sorted(settled - ledger.accepted):
        yield f"{sample_id}: settled but never accepted"
    if ledger.duplicate_keys:
        yield f"{ledger.duplicate_keys} verdict key(s) stored more than once"


def _judge_calls(ledger: Ledger, allowance: Allowance) -> Iterator[str]:
    for sample_id, then in sorted(ledger.calls_when_stored.items()):
        now = ledger.calls.get(sample_id, 0)
        if now != then:
            yield (f"{sample_id}: judged again after its verdict was stored ({then} calls "
                   f"then, {now} at the end)")
    for sample_id, count in sorted(ledger.verdicts.items()):
        if count and not ledger.answered.get(sample_id):
            yield f"{sample_id}: a verdict without a 200 reply (are the counters right?)"
    extra = extra_calls(ledger)
    if sum(extra.values()) > allowance.total:
        yield (f"{sum(extra.values())} extra judge calls, allowed {allowance.total} "
               f"({allowance.reason})")
    for sample_id, count in sorted(extra.items()):
        if count > allowance.per_sample:
            yield f"{sample_id}: {count} extra judge calls, allowed {allowance.per_sample}"
        if allowance.explained is not None and sample_id not in allowance.explained:
            yield f"{sample_id}: {count} extra judge call(s) the disturbance cannot explain"
    if ledger.answered_at_end is not None:
        for sample_id, count in sorted(ledger.answered.items()):
            after = count - ledger.answered_at_end.get(sample_id, 0)
            if after > 1:
                yield f"{sample_id}: {after} 200 replies after the disturbance ended"


@dataclass(frozen=True)
class Figures:
    """What one run printed."""

    scenario: str
    jobs_in: int
    """Samples accepted by the broker."""
    verdicts: int
    dead_letters: int
    duplicates: int
    """Verdict keys stored more than once (must be 0)."""
    extra_judge_calls: int
    """200 replies that did not become the stored verdict."""
    allowed_extra: int
    """The scenario's bound on ``extra_judge_calls``."""
    judge_requests: int
    """Every request the judge saw (429, 500 and timeouts included)."""
    drain_s: float
    """From the workers' start until every sample was settled and the broker empty."""

    HEADER: ClassVar[str] = (
        f"{'scenario':<16} {'jobs in':>7} {'verdicts':>8} {'dead letters':>12} "
        f"{'duplicates':>10} {'extra judge calls':>17} {'judge requests':>14} "
        f"{'time to drain':>13}")

    def row(self) -> str:
        """One line of the table under :attr:`HEADER`."""
        extra = f"{self.extra_judge_calls} (<= {self.allowed_extra})"
        return (f"{self.scenario:<16} {self.jobs_in:>7} {self.verdicts:>8} "
                f"{self.dead_letters:>12} {self.duplicates:>10} {extra:>17} "
                f"{self.judge_requests:>14} {self.drain_s:>12.1f}s")


@dataclass(frozen=True)
class RunResult:
    """The figures of a run and every broken guarantee, in words."""

    figures: Figures
    allowance: Allowance
    violations: tuple[str, ...]
    notes: tuple[str, ...] = ()
    """What the scenario did, with times, for the report."""
