"""Datasets from production: selections copied out of the store, exported for people,
for fine-tuning the judge or the agent and for ``evalfleet calibrate``."""

from __future__ import annotations

from evalfleet.dataset.export import (
    agent_chat_records,
    csv_row_to_json,
    csv_rows,
    finetune_records,
    gold_records,
    jsonl_records,
    session_chat_records,
)
from evalfleet.dataset.target import verdict_text

__all__ = [
    "agent_chat_records",
    "csv_row_to_json",
    "csv_rows",
    "finetune_records",
    "gold_records",
    "jsonl_records",
    "session_chat_records",
    "verdict_text",
]
