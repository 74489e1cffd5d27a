"""Producers: read traffic, sample, redact, enqueue.

Three sources share one pipeline (:mod:`producers.pipeline`): JSONL files and
stdin (``evalfleet produce``, ``--follow`` to tail a log), the HTTP ingest service
(``evalfleet ingest``, :mod:`producers.ingest`), and the in-process SDK for
applications (:mod:`evalfleet.sdk`).
"""
