"""A judge cascade on simulated traffic: share settled cheaply, agreement, cost per 1,000.

Setup: for each built-in metric, ``--labels`` random review items and ``--traffic``
production samples (distinct synthetic samples rendered with the metric's own prompt).
Two tiers, both played by the judge simulator's reply code (the same function the
simulator's HTTP server answers with) asked for log-probabilities: a small judge wrong on
``--small-error`` of prompts (20%: right on 80%) whose log-probabilities are honest, then
a large judge wrong on ``--large-error``. People's labels are the simulator's default
verdict (what a judge with no error answers). Each reply is parsed and its confidence
read by the worker's code (``workers/verdicts/confidence.py``); the thresholds are fitted
on the labelled items (``evalfleet/calibration/cascade.py``, target ``--target``, delta
``--delta`` per tier) and applied to the traffic: the small tier's verdict is kept when its
confidence reaches its threshold, else the large tier's (marked low-confidence when below
the large tier's threshold). A second run plays an overconfident small judge (0.95 to 1
whatever it knows).

Costs are at list prices per million tokens (input, cached input, output), US dollars:
``nano-judge`` as OpenAI's gpt-4.1-nano (0.10, 0.025, 0.40) and ``large-judge`` as gpt-4.1
(2.00, 0.50, 8.00), tokens counted as the simulator does (four characters a token, no
cache hits counted). The cascade's cost counts every small call, every escalated large
call, and the shadow calls of the review slice (each random item judged by every tier) at
``--review-rate`` of traffic.

    python -m bench.judge_cascade --traffic 4000 --labels 1000

Prints one row per metric and small judge, and the setup.
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from dataclasses import dataclass

from evalfleet.calibration.cascade import (
    Guarantee,
    LabelledItem,
    TierJudgement,
    fit_cascade,
    item_agrees,
)
from evalfleet.core.cascade import settles
from evalfleet.core.metric import Metric, MetricRegistry, load_registry
from evalfleet.core.price import ModelPrice, Price, cost_usd
from evalfleet.core.sample import Sample, parse_sample
from evalfleet.core.scales import score_kinds
from evalfleet.judgesim import Fault, Prompt, build_reply, simulated_verdict
from evalfleet.judgesim.quality import JudgeProfile
from workers.judge.logprobs import read_logprobs
from workers.renderer import render_messages
from workers.verdicts import Verdict, parse_verdict
from workers.verdicts.confidence import logprob_confidences, verdict_confidence
from workers.verdicts.schema import response_format_for

PRICES = {
    "nano-judge": ModelPrice(input=0.10, cached_input=0.025, output=0.40),
    "large-judge": ModelPrice(input=2.00, cached_input=0.50, output=8.00),
}
TIERS = ("nano-judge", "large-judge")
TOP_LOGPROBS = 5


@dataclass(frozen=True, slots=True)
class Judged:
    """One tier's verdict on one sample, with its confidence and cost."""

    judgement: TierJudgement | None
    cost_usd: float


@dataclass(frozen=True, slots=True)
class Case:
    """One sample: people's scores and each tier's verdict."""

    labels: dict[str, float | None]
    tiers: tuple[Judged, ...]


def synthetic_sample(index: int) -> Sample:
    """A distinct sample every built-in metric can judge."""
    return parse_sample({
        "id": f"b-{index}", "input": f"Question {index}: which plan suits a team of {index % 40}?",
        "output": f"The plan for {index % 7 + 1} seats, billed monthly (answer {index}).",
        "context": [f"Plan {index % 7 + 1} covers up to {index % 50} seats.",
                    f"Annual billing saves {index % 20}%."],
        "reference": f"Plan {index % 7 + 1}.",
        "fields": {"product_title": f"Desk lamp {index}", "base_price": "40.00",
                   "final_price": f"{30 + index % 9}.00",
                   "product_opinion_summary": "Bright, sturdy, a short cable."},
    })


def judge_once(metric: Metric, sample: Sample, *, model: str, profile: JudgeProfile,
               price: Price) -> Judged:
    """One tier's call, parsed, its confidence read and its cost priced."""
    messages = [dict(m) for m in render_messages(metric, sample)]
    response_format = response_format_for(metric, supported="json_schema")
    reply = build_reply(Prompt.from_messages(messages), model=model, fault=Fault.none(),
                        response_format=response_format, profile=profile,
                        top_logprobs=TOP_LOGPROBS)
    cost = cost_usd(price, prompt_tokens=reply.usage.prompt_tokens,
                    completion_tokens=reply.usage.completion_tokens) or 0.0
    parsed = parse_verdict(reply.content, metric=metric, sample=sample,
                           finish_reason=reply.finish_reason)
    if not isinstance(parsed, Verdict):
        return Judged(None, cost)
    confidences = logprob_confidences(reply.content, read_logprobs(reply.logprobs),
                                      metric=metric, verdict=parsed)
    return Judged(TierJudgement(parsed.scores, verdict_confidence(confidences)), cost)


def people(metric: Metric, sample: Sample) -> dict[str, float | None]:
    """People's scores: the simulator's verdict with no error, normalised as stored."""
    messages = [dict(m) for m in render_messages(metric, sample)]
    truth = simulated_verdict(messages, response_format=response_format_for(
        metric, supported="json_schema"))
    parsed = parse_verdict(_as_reply(metric, truth), metric=metric, sample=sample)
    assert isinstance(parsed, Verdict), parsed
    return dict(parsed.scores)


def _as_reply(metric: Metric, verdict: dict[str, object]) -> str:
    if metric.spec.output.format == "score_tag":
        return f"Score- <score>{verdict['score']}</score>"
    return json.dumps(verdict)


def cases(metric: Metric, *, start: int, count: int, profiles: dict[str, JudgeProfile],
          prices: dict[str, Price]) -> list[Case]:
    built = []
    for index in range(start, start + count):
        sample = synthetic_sample(index)
        built.append(Case(people(metric, sample), tuple(
            judge_once(metric, sample, model=model, profile=profiles[model], price=prices[model])
            for model in TIERS)))
    return built


def run(registry: MetricRegistry, metric_name: str, *, args: argparse.Namespace,
        small: JudgeProfile, label: str) -> dict[str, object]:
    metric = registry.get(metric_name)
    kinds = score_kinds(metric)
    profiles = {"nano-judge": small, "large-judge": JudgeProfile(error_rate=args.large_error)}
    prices = {model: price.resolved(batch_multiplier=0.5) for model, price in PRICES.items()}
    guarantee = Guarantee(target=args.target, delta=args.delta, tolerance=args.tolerance)
    labelled = cases(metric, start=0, count=args.labels, profiles=profiles, prices=prices)
    fit = fit_cascade([LabelledItem(case.labels, tuple(j.judgement for j in case.tiers))
                       for case in labelled], kinds=kinds, guarantee=guarantee)
    small_t, large_t = fit.thresholds
    traffic = cases(metric, start=1_000_000, count=args.traffic, profiles=profiles,
                    prices=prices)
    settled_small = accepted = agreeing = agreeing_small = low = 0
    cascade_usd = large_usd = 0.0
    for case in traffic:
        first, last = case.tiers
        large_usd += last.cost_usd
        cascade_usd += first.cost_usd + args.review_rate * last.cost_usd
        confidence = first.judgement.confidence if first.judgement else None
        if settles(confidence, small_t):
            settled_small += 1
            kept = first.judgement
            agreeing_small += bool(kept and item_agrees(kept, case.labels, kinds=kinds,
                                                        tolerance=guarantee.tolerance))
        else:
            cascade_usd += last.cost_usd * (1 - args.review_rate)
            kept = last.judgement
            if not settles(kept.confidence if kept else None, large_t):
                low += 1
                continue
        accepted += 1
        agreeing += bool(kept and item_agrees(kept, case.labels, kinds=kinds,
                                              tolerance=guarantee.tolerance))
    n = len(traffic)
    return {
        "metric": metric_name, "small": label,
        "t_small": "-" if small_t is None else f"{small_t:.3f}",
        "t_large": "-" if large_t is None else f"{large_t:.3f}",
        "bound": fit.tiers[0].guaranteed_agreement,
        "settled_small": settled_small / n, "agreement": agreeing / accepted if accepted else 0.0,
        "agreement_small": f"{agreeing_small / settled_small:.1%}" if settled_small else "-",
        "low_conf": low / n,
        "usd_cascade": 1000 * cascade_usd / n, "usd_large": 1000 * large_usd / n,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--traffic", type=int, default=4000, help="Production samples.")
    parser.add_argument("--labels", type=int, default=1000, help="Labelled random items.")
    parser.add_argument("--small-error", type=float, default=0.2)
    parser.add_argument("--large-error", type=float, default=0.05)
    parser.add_argument("--target", type=float, default=0.85)
    parser.add_argument("--delta", type=float, default=0.05, help="Per tier.")
    parser.add_argument("--tolerance", type=float, default=0.1)
    parser.add_argument("--review-rate", type=float, default=0.01)
    parser.add_argument("--metric", action="append", help="Default: the four built-in ones.")
    args = parser.parse_args()
    registry = load_registry()
    metrics = args.metric or ["context_precision", "bbh_match", "rec_faithfulness", "rag_qa"]
    started = time.perf_counter()
    print(f"setup: traffic {args.traffic}, labels {args.labels}, small judge wrong on "
          f"{args.small_error:.0%}, large on {args.large_error:.0%}, target agreement "
          f"{args.target:.0%}, delta {args.delta:g} per tier (both tiers hold with "
          f">= {1 - 2 * args.delta:.0%}), tolerance {args.tolerance:g}, review rate "
          f"{args.review_rate:.0%}; python {platform.python_version()}")
    print("| metric | small judge | threshold small / large | bound small | settled small "
          "| agreement settled small | agreement accepted | low-conf | $/1k cascade "
          "| $/1k large alone | saving |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for name in metrics:
        for label, small in (
            ("honest", JudgeProfile(error_rate=args.small_error)),
            ("overconfident", JudgeProfile(error_rate=args.small_error,
                                           logprobs="overconfident")),
        ):
            row = run(registry, name, args=args, small=small, label=label)
            bound = row["bound"]
            print(f"| {row['metric']} | {row['small']} | {row['t_small']} / {row['t_large']} "
                  f"| {'-' if bound is None else f'{bound:.3f}'} "
                  f"| {row['settled_small']:.1%} | {row['agreement_small']} "
                  f"| {row['agreement']:.1%} "
                  f"| {row['low_conf']:.1%} | {row['usd_cascade']:.4f} "
                  f"| {row['usd_large']:.4f} "
                  f"| {1 - row['usd_cascade'] / row['usd_large']:.0%} |")  # type: ignore[operator]
    print(f"({time.perf_counter() - started:.0f} s)")


if __name__ == "__main__":
    main()
