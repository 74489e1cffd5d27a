"""Time of redaction, sample validation and reply parsing on hostile shapes, by size.

Setup: each shape is built at 10 KB, 100 KB and 1 MB and run once in a child process
of its own (so a slow case can be stopped at ``--timeout-s`` without stopping the
others); a size is skipped once a smaller one of the same shape ran out of time. The
ratio is the time at one size over the time at the size ten times smaller: about 10
is linear, about 100 quadratic.

    python -m bench.hostile_inputs [--timeout-s 60] [--only redact]
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import platform
import subprocess
import sys
import time
from collections.abc import Callable

#: Sizes each shape is built at, in bytes (approximately).
SIZES = (10_000, 100_000, 1_000_000)


def _redact(text: str) -> Callable[[], object]:
    from evalfleet.core.sample import parse_sample
    from producers.redact import RedactionRules, Redactor, redact_sample

    redactor = Redactor(RedactionRules())
    sample = parse_sample({"id": "bench", "input": text})
    return lambda: redact_sample(sample, redactor=redactor)


def _validate(line: str) -> Callable[[], object]:
    from evalfleet.core.errors import InvalidSample
    from evalfleet.core.sample import parse_sample_line

    def run() -> object:
        try:
            return parse_sample_line(line.encode("utf-8", "surrogatepass"))
        except InvalidSample as exc:
            return exc

    return run


def _reply(text: str, metric_name: str = "rag_qa") -> Callable[[], object]:
    from evalfleet.core.metric import load_registry
    from evalfleet.core.sample import parse_sample
    from workers.verdicts import parse_verdict

    metric = load_registry().get(metric_name)
    sample = parse_sample({"id": "bench", "input": "q", "output": "a", "context": ["c"],
                           "reference": "r"})
    return lambda: parse_verdict(text, metric=metric, sample=sample, finish_reason="stop")


def _verdict(n: int) -> str:
    return json.dumps({"faithfulness": round((n % 97) / 97, 4), "context_relevance": 0.5,
                       "answer_relevance": 0.5, "semantic_similarity": 0.5,
                       "evaluation_status": "success"})


#: shape name -> (stage, builder of the case at a size in bytes)
SHAPES: dict[str, tuple[str, Callable[[int], Callable[[], object]]]] = {
    "word run (base64-like)": ("redact", lambda n: _redact("Ab0+/" * (n // 5))),
    "digit run": ("redact", lambda n: _redact("1" * n)),
    "dotted words no @": ("redact", lambda n: _redact("a." * (n // 2))),
    "many @ signs": ("redact", lambda n: _redact("a@b" * (n // 3))),
    "spaced digits": ("redact", lambda n: _redact("1 " * (n // 2))),
    "record, long text": ("validate", lambda n: _validate(json.dumps(
        {"id": "x", "input": "A" * n}))),
    "record, escaped text": ("validate", lambda n: _validate(json.dumps(
        {"id": "x", "input": "\u00e9\"\\" * (n // 12)}))),
    "record, escaped quotes, unclosed": ("validate", lambda n: _validate(
        '{"id": "x", "input": "' + '\\"' * (n // 2) + "\\")),
    "record, deep nesting": ("validate", lambda n: _validate(
        '{"id": "x", "fields": {"d": ' + "[" * (n // 2) + "]" * (n // 2) + "}}")),
    "record, many keys": ("validate", lambda n: _validate(json.dumps(
        {"id": "x", "attributes": {f"k{i}": "v" for i in range(n // 12)}}))),
    "reply [ then }": ("parse", lambda n: _reply("[" * (n // 2) + "}" * (n // 2))),
    "reply { then ]": ("parse", lambda n: _reply("{" * (n // 2) + "]" * (n // 2))),
    "reply deep objects": ("parse", lambda n: _reply('{"a":' * (n // 5) + "1"
                                                     + "}" * (n // 5))),
    "reply distinct verdicts": ("parse", lambda n: _reply(
        " ".join(_verdict(i) for i in range(n // 150)))),
    "reply many quotes": ("parse", lambda n: _reply('{"a": "' + '" ' * (n // 2))),
    "reply score tags": ("parse", lambda n: _reply(
        "Score- <score>3</score> " * (n // 24), metric_name="rec_faithfulness")),
    "reply tags, one line, quotes": ("parse", lambda n: _reply(
        '"' + "<score>4</score> x " * (n // 19), metric_name="rec_faithfulness")),
}


def _measure(shape: str, size: int) -> float:
    _, build = SHAPES[shape]
    case = build(size)
    started = time.perf_counter()
    case()
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--timeout-s", type=float, default=60.0)
    parser.add_argument("--only", choices=("redact", "validate", "parse"))
    parser.add_argument("--one", nargs=2, metavar=("SHAPE", "SIZE"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(f"{_measure(args.one[0], int(args.one[1])):.6f}")
        return
    print(f"setup: {platform.machine()}, {os.cpu_count()} cores, python "
          f"{platform.python_version()}; one child process per case, timeout "
          f"{args.timeout_s:g} s")
    print(f"{'stage':<9} {'shape':<30} " + " ".join(f"{size // 1000:>8} KB" for size in SIZES)
          + "   ratios")
    for shape, (stage, _) in SHAPES.items():
        if args.only and stage != args.only:
            continue
        times = _run_sizes(shape, timeout_s=args.timeout_s)
        cells = " ".join(f"{_seconds(t):>11}" for t in times)
        ratios = [f"{b / a:.0f}x" if a and b else "-" for a, b in itertools.pairwise(times)]
        print(f"{stage:<9} {shape:<30} {cells}   {' '.join(ratios)}", flush=True)


def _run_sizes(shape: str, *, timeout_s: float) -> list[float | None]:
    times: list[float | None] = []
    for size in SIZES:
        if times and times[-1] is None:
            times.append(None)
            continue
        try:
            done = subprocess.run(
                [sys.executable, "-m", "bench.hostile_inputs", "--one", shape, str(size)],
                capture_output=True, text=True, timeout=timeout_s, check=True)
            times.append(float(done.stdout.strip().splitlines()[-1]))
        except subprocess.TimeoutExpired:
            times.append(None)
        except subprocess.CalledProcessError as exc:
            print(f"  {shape} at {size}: failed: {exc.stderr.strip().splitlines()[-1:]}")
            times.append(None)
    return times


def _seconds(value: float | None) -> str:
    if value is None:
        return "timeout"
    return f"{value * 1000:.1f} ms" if value < 1 else f"{value:.2f} s"


if __name__ == "__main__":
    main()
