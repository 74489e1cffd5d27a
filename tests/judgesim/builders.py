"""Prompt and reply builders for the reply tests: rendered metric prompts, bare user
messages, and the simulator's answer to them."""

from __future__ import annotations

import hashlib
import json
import re
from functools import cache
from typing import Any

from evalfleet.core.metric import MetricRegistry, load_registry
from evalfleet.core.sample import parse_sample
from evalfleet.judgesim import Fault, Prompt, build_reply
from workers.renderer import render_messages

Messages = list[dict[str, Any]]

JSON_SCHEMA = {"type": "json_schema", "json_schema": {"name": "verdict", "schema": {}}}
JSON_OBJECT = {"type": "json_object"}
SCORE_LINE = re.compile(r"Score- <score>([1-5])</score>\Z")


@cache
def registry() -> MetricRegistry:
    return load_registry()


def rendered(metric: str, **sample: Any) -> Messages:
    """The messages a built-in metric sends for a sample (defaults filled in)."""
    record = {
        "id": "s-1", "input": "What is the capital of France?", "output": "Paris.",
        "context": ["Paris is the capital of France."], "reference": "Paris",
        "fields": {"product_title": "Mug", "base_price": "10", "final_price": "8",
                   "product_opinion_summary": "Sturdy.", "query": "a mug"},
        **sample,
    }
    return [dict(m) for m in render_messages(registry().get(metric), parse_sample(record))]


def user(text: str, system: str | None = None) -> Messages:
    messages = [{"role": "system", "content": system}] if system is not None else []
    return [*messages, {"role": "user", "content": text}]


def digest_slot(messages: Messages, slot: int) -> int:
    digest = hashlib.sha256("".join(m["content"] for m in messages).encode()).digest()
    return int.from_bytes(digest[2 * slot: 2 * slot + 2], "big")


def reply(messages: Messages, *, response_format: Any = None, fault: Fault | None = None,
          max_tokens: int | None = None) -> tuple[str, str]:
    result = build_reply(Prompt.from_messages(messages), model="judge", max_tokens=max_tokens,
                         response_format=response_format, fault=fault or Fault.none())
    return result.content, result.finish_reason


def fenced_json(content: str) -> Any:
    match = re.search(r"```json\n(.*)\n```\Z", content, re.S)
    assert match, content
    return json.loads(match.group(1))
