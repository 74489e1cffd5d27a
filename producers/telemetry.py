"""Prometheus metrics of the producers (``evalfleet_producer_*``).

Counters only move forward and are per process; ``evalfleet ingest`` serves them
at ``/metrics``, and ``evalfleet produce`` prints the same counts in its summary.
Segment labels are capped at :data:`MAX_SEGMENT_LABELS` distinct values per
process; later segments are counted as ``other``, so a flood of new attribute
values cannot blow up Prometheus.
"""

from __future__ import annotations

import hashlib
import threading

from prometheus_client import Counter, Gauge

#: Distinct segment label values per process before the rest count as ``other``.
MAX_SEGMENT_LABELS = 500

#: Longest segment label, in characters; a longer one keeps its start and a digest.
MAX_SEGMENT_LABEL_CHARS = 128

RECORDS = Counter(
    "evalfleet_producer_records_total",
    "Sample records seen by producers, by source and outcome "
    "(accepted, sampled_out, shed, duplicate, rejected, dropped).",
    ["source", "outcome"],
)
JOBS = Counter(
    "evalfleet_producer_jobs_total",
    "Jobs published to metric queues.",
    ["metric"],
)
SHED = Counter(
    "evalfleet_producer_shed_total",
    "Jobs shed because their queue was over its limit (policy drop_new or lower_rate) "
    "or their metric near its daily budget (policy budget), by metric and segment.",
    ["metric", "segment", "policy"],
)
DUPLICATES = Counter(
    "evalfleet_producer_duplicates_total",
    "Jobs not published because the same sample id and metric was enqueued within the "
    "deduplication window.",
    ["metric"],
)
DROPPED = Counter(
    "evalfleet_producer_dropped_total",
    "Jobs the SDK dropped: buffer_full, broker_unavailable (down longer than "
    "EVALFLEET_SDK_MAX_WAIT_S) or internal_error.",
    ["metric", "reason"],
)
REDACTIONS = Counter(
    "evalfleet_producer_redactions_total",
    "PII matches redacted before publishing, by kind.",
    ["kind"],
)
SEGMENTS_CAPPED = Counter(
    "evalfleet_producer_segments_capped_total",
    "Samples of a new segment not given the segment minimum because the window's cap "
    "on new segments (segments.max_new) was reached, by metric.",
    ["metric"],
)
POLICY_RELOADS = Counter(
    "evalfleet_producer_policy_reloads_total",
    "Sampling config reloads, by result (ok, invalid: the previous config stays).",
    ["result"],
)
QUEUE_DEPTH = Gauge(
    "evalfleet_producer_queue_depth",
    "Last queue depth a producer measured for backpressure.",
    ["queue"],
)

_segments: set[str] = set()
_segments_lock = threading.Lock()


def segment_label(segment: str) -> str:
    """``segment`` (shortened, see :func:`short_label`), or ``other`` once
    :data:`MAX_SEGMENT_LABELS` others were seen."""
    segment = short_label(segment)
    with _segments_lock:
        if segment in _segments:
            return segment
        if len(_segments) < MAX_SEGMENT_LABELS:
            _segments.add(segment)
            return segment
    return "other"


def short_label(segment: str) -> str:
    """``segment`` cut to :data:`MAX_SEGMENT_LABEL_CHARS`: its start, then ``~`` and a
    digest of the whole, so two long segments stay apart."""
    if len(segment) <= MAX_SEGMENT_LABEL_CHARS:
        return segment
    digest = hashlib.sha256(segment.encode("utf-8", "replace")).hexdigest()[:12]
    return f"{segment[:MAX_SEGMENT_LABEL_CHARS - 13]}~{digest}"
OTLP_SPANS = Counter(
    "evalfleet_producer_otlp_spans_total",
    "Spans received on POST /v1/traces, by outcome: buffered, sampled_out (the trace's id "
    "hash is under no metric's rate), rejected (a bad span, named in partial_success), "
    "trace_too_large (over EVALFLEET_OTLP_MAX_SPANS_PER_TRACE), late (its trace was "
    "already produced), too_many_open_traces and buffer_unavailable (the request got 503).",
    ["outcome"],
)
OTLP_TRACES = Counter(
    "evalfleet_producer_otlp_traces_total",
    "Assembled traces, by outcome: produced (at least one sample), or why none "
    "(no_llm_span, no_question_or_answer, no_selected_span).",
    ["outcome"],
)
OTLP_METRIC_SKIPPED = Counter(
    "evalfleet_producer_otlp_metric_skipped_total",
    "Samples built from traces that a metric was not produced for because the trace "
    "lacks an input the metric reads (no retrieved context, a required field), by metric "
    "(all: the sample was refused, a field over its limit) and input.",
    ["metric", "input"],
)
OTLP_TURNS = Counter(
    "evalfleet_producer_otlp_session_turns_total",
    "Traces offered to session assembly, by outcome: kept (a turn of its session), "
    "sampled_out (its session id's hash is under every session metric's rate), "
    "no_session (no span names a session), bad_session_id (blank, over 200 characters or "
    "with control characters), too_many_open_sessions (over "
    "EVALFLEET_OTLP_MAX_OPEN_SESSIONS), too_many_turns (over "
    "EVALFLEET_OTLP_MAX_TURNS_PER_SESSION), session_too_large (over "
    "EVALFLEET_OTLP_MAX_SESSION_BYTES).",
    ["outcome"],
)
OTLP_SESSIONS = Counter(
    "evalfleet_producer_otlp_sessions_total",
    "Session versions produced, by why they were closed (idle, end, max_age, "
    "final_wait: an idle version sent again once final), and sessions forgotten after "
    "their final wait (forgotten).",
    ["outcome"],
)
OPEN_SESSIONS = Gauge(
    "evalfleet_producer_otlp_open_sessions",
    "Sessions held (open, or judged and kept for a late turn until their final wait), as "
    "last measured by this ingest's sweeper.",
)
OPEN_TRACES = Gauge(
    "evalfleet_producer_otlp_open_traces",
    "Traces being assembled, as last measured by this ingest's sweeper.",
)
