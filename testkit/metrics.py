"""Metric folders that tests and benchmarks share."""

from __future__ import annotations

from pathlib import Path

import prompts

#: The built-in metric files.
PROMPTS = Path(prompts.__file__).parent

#: The tiers :func:`cascade_metrics` gives bbh_match: ``small`` first, ``large`` behind.
CASCADE_TIERS = "  cascade:\n    - {model: small, top_logprobs: 5}\n    - {model: large}\n"


def cascade_metrics(folder: Path, tiers: str = CASCADE_TIERS) -> Path:
    """A metrics folder holding bbh_match with ``tiers`` (YAML lines of its ``judge``
    options: a ``cascade``, or a ``model``) added to its judge options."""
    folder.mkdir(parents=True, exist_ok=True)
    text = (PROMPTS / "bbh_match.yaml").read_text(encoding="utf-8")
    head, tail = text.split("  response_format: json_schema\n", 1)
    (folder / "bbh_match.yaml").write_text(
        head + "  response_format: json_schema\n" + tiers + tail, encoding="utf-8")
    return folder
