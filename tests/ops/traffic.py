"""Samples whose faithfulness the judge simulator is told to give (a directive in the input)."""

from __future__ import annotations

import json
import random
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any


def traffic(app: str, *, count: int, start: datetime, minutes: float, mean: float,
            seed: int, spread: float = 0.05) -> list[dict[str, Any]]:
    """``count`` samples of ``app`` spread over ``minutes`` from ``start``, scores near ``mean``."""
    rng = random.Random(seed)
    step = timedelta(minutes=minutes / count)
    samples = []
    for n in range(count):
        score = min(1.0, max(0.0, rng.gauss(mean, spread)))
        samples.append({
            "id": f"{app}-{seed}-{n}", "timestamp": (start + n * step).isoformat(),
            "input": f"Question {n} [[judge-sim faithfulness={score:.3f}]]",
            "output": f"Answer {n}", "context": ["Some retrieved text."],
            "attributes": {"app": app, "prompt_version": "v12"},
        })
    return samples


def write_jsonl(path: Path, samples: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(sample) + "\n" for sample in samples))
    return path
