"""Producers: read traffic, sample, redact, enqueue.

Three sources share one pipeline (:mod:`producers.pipeline`): JSONL files and
stdin (``evalfleet produce``, ``--follow`` to tail a log), the HTTP ingest service
(``evalfleet ingest``, :mod:`producers.ingest`), and this SDK for applications::

    from producers import submit
    submit({"id": "req-1", "input": "question", "output": "answer"}, metrics=["rag_qa"])
"""

from __future__ import annotations

from producers.sdk import (
    SubmitOutcome,
    SubmitStats,
    Submitter,
    configure,
    flush,
    shutdown,
    stats,
    submit,
)

__all__ = [
    "SubmitOutcome",
    "SubmitStats",
    "Submitter",
    "configure",
    "flush",
    "shutdown",
    "stats",
    "submit",
]
