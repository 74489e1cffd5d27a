"""Small builders for producer tests: samples, policies, settings, runtimes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from evalfleet.core.sample import Sample, parse_sample
from evalfleet.core.settings import Settings
from producers.policy import Fallbacks, Policy, default_policy, parse_policy
from tests.helpers import queued as queued  # re-exported for the producer tests
from tests.helpers import queued_ids as queued_ids

APPS = ("support-bot", "hr-assistant", "docs-search")


def record(n: int = 0, **overrides: Any) -> dict[str, Any]:
    """A valid sample record (dict) that every built-in metric but rec_faithfulness accepts."""
    data: dict[str, Any] = {
        "id": f"req-{n:05d}", "input": f"How long is the return window for order #{1000 + n}?",
        "output": "30 days.", "context": ["Returns are accepted within 30 days."],
        "reference": "30 days", "attributes": {"app": APPS[n % 3], "route": "/chat"},
    }
    data.update(overrides)
    return data


def sample(n: int = 0, **overrides: Any) -> Sample:
    """A valid Sample."""
    return parse_sample(record(n, **overrides))


def line(data: Any) -> bytes:
    """One JSONL line."""
    return json.dumps(data).encode() + b"\n"


def policy(text: str = "", **fallbacks: Any) -> Policy:
    """A policy from YAML text (the defaults when empty)."""
    base = Fallbacks(**fallbacks)
    if not text:
        return default_policy(base)
    return parse_policy(text, source="test.yaml", fallbacks=base)


def producer_settings(redis_url: str | None, tmp_path: Path, **overrides: Any) -> Settings:
    """Settings for a producer against ``redis_url`` (None: the embedded broker)."""
    return Settings(broker_url=redis_url, data_dir=tmp_path / "data", **overrides)


