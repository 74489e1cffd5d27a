"""``evalfleet judge-sim``: the OpenAI-compatible judge simulator."""

from __future__ import annotations

import click


@click.command("judge-sim")
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", type=int, default=8400, show_default=True, help="0 picks a free port.")
@click.option("--latency", type=click.Choice(["fixed", "uniform", "lognormal"]), default=None,
              help="Latency distribution (default fixed).")
@click.option("--latency-ms", type=float, default=None, help="Fixed latency.")
@click.option("--latency-min-ms", type=float, default=None, help="Uniform: lower bound.")
@click.option("--latency-max-ms", type=float, default=None, help="Uniform: upper bound.")
@click.option("--latency-median-ms", type=float, default=None, help="Lognormal: median.")
@click.option("--latency-p99-ms", type=float, default=None, help="Lognormal: 99th percentile.")
@click.option("--rate-limit-rate", type=float, default=None, help="Share answered 429.")
@click.option("--retry-after-s", type=float, default=None, help="Retry-After sent with a 429.")
@click.option("--server-error-rate", type=float, default=None, help="Share answered 500.")
@click.option("--hang-rate", type=float, default=None, help="Share that hang.")
@click.option("--hang-s", type=float, default=None, help="How long a hang lasts.")
@click.option("--malformed-rate", type=float, default=None, help="Share with broken JSON.")
@click.option("--truncated-rate", type=float, default=None, help="Share cut off (length).")
@click.option("--rpm-limit", type=int, default=None, help="Requests per minute before 429s.")
@click.option("--batch-turnaround-s", type=float, default=None,
              help="Seconds from a batch's creation to its end (default 1).")
@click.option("--batch-line-error-rate", type=float, default=None,
              help="Share of batch lines answered 500 in the error file.")
@click.option("--batch-expire-done-share", type=float, default=None,
              help="Batches expire with only this share of lines done.")
@click.option("--batch-enqueued-token-limit", type=int, default=None,
              help="Prompt tokens a model may have in open batches.")
@click.option("--seed", type=int, default=None, help="Seed of the fault and latency draws.")
def judge_sim(host: str, port: int, **options: object) -> None:
    """Run the judge simulator: an OpenAI-compatible judge with faults on demand.

    Also serves the Batch API (/v1/files, /v1/batches). Runtime changes:
    PUT /_sim/config; counters: GET /_sim/stats.
    """
    from evalfleet.judgesim import InvalidSimConfig, run_judge_sim

    try:
        run_judge_sim(host=host, port=port, **options)
    except InvalidSimConfig as exc:
        raise click.UsageError(str(exc)) from None
