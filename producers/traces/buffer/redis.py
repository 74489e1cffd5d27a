"""The trace buffer in Redis, shared by every ingest replica.

Keys (``evalfleet:otlp:`` prefix): ``spans:<trace>`` a list of the trace's spans as
JSON, ``meta:<trace>`` a hash (first arrival, span count and bytes, whether its root ended,
whether it is an agent's),
``due`` a sorted set of trace ids by the time each is due, and ``done:<trace>`` an
expiring mark of a produced trace. Each operation is one Lua script, so replicas adding
spans and claiming traces at once never see half of another's step, and a trace is in
``due`` from its first span until it is finished: an ingest killed at any point leaves
every accepted span to the next sweep (with Redis persistence, as a production broker
has). The scripts name their keys themselves, so the buffer needs one Redis (or a
primary with replicas), not a Redis Cluster.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import redis

from producers.traces.buffer.base import (
    CLAIM_LEASE_S,
    Added,
    ClaimedTrace,
    Timing,
    TraceBuffer,
)
from producers.traces.scripts import ScriptRunner
from producers.traces.span import Span, SpanRejection
from producers.traces.steps import has_agent_marks

#: Prefix of every key of the buffer.
KEY_PREFIX = "evalfleet:otlp:"

#: Seconds a buffered trace's keys live without a sweep (a fleet stopped that long).
_KEY_TTL_S = 7 * 24 * 3600

# ARGV: prefix, now, quiet, max_wait, max_spans, max_open, ttl, max_bytes,
# agent_max_wait, then per trace: trace id, root ended (0/1), an agent's (0/1), span
# count, spans... Returns {-1} when full, else
# {late, trace id, spans over the limit, ...}: the spans from the first that does not
# fit are rejected.
_ADD = """
local p, now, quiet, max_wait = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local max_spans, max_open, ttl = tonumber(ARGV[5]), tonumber(ARGV[6]), tonumber(ARGV[7])
local max_bytes, agent_wait = tonumber(ARGV[8]), tonumber(ARGV[9])
local due = p .. 'due'
local traces, i, new = {}, 10, 0
while i <= #ARGV do
  local tid, root, agent, n = ARGV[i], ARGV[i + 1], ARGV[i + 2], tonumber(ARGV[i + 3])
  local done = redis.call('EXISTS', p .. 'done:' .. tid) == 1
  local known = redis.call('EXISTS', p .. 'meta:' .. tid) == 1
  if not done and not known then new = new + 1 end
  table.insert(traces, {tid, root, n, i + 4, done, agent})
  i = i + 4 + n
end
if new > 0 and redis.call('ZCARD', due) + new > max_open then return {-1} end
local out, late = {}, 0
for _, t in ipairs(traces) do
  local tid, root, n, first, done, agent = t[1], t[2], t[3], t[4], t[5], t[6]
  if done then
    late = late + n
  else
    local meta, spans = p .. 'meta:' .. tid, p .. 'spans:' .. tid
    local count = tonumber(redis.call('HGET', meta, 'count') or '0')
    local size = tonumber(redis.call('HGET', meta, 'bytes') or '0')
    local keep = 0
    while keep < n and count + keep < max_spans and size + #ARGV[first + keep] <= max_bytes do
      size = size + #ARGV[first + keep]
      redis.call('RPUSH', spans, ARGV[first + keep])
      keep = keep + 1
    end
    redis.call('HSETNX', meta, 'first', now)
    redis.call('HINCRBY', meta, 'count', keep)
    redis.call('HSET', meta, 'bytes', size)
    if root == '1' then redis.call('HSET', meta, 'root', 1) end
    if agent == '1' then redis.call('HSET', meta, 'agent', 1) end
    local wait = max_wait
    if redis.call('HGET', meta, 'agent') then wait = agent_wait end
    local deadline = tonumber(redis.call('HGET', meta, 'first')) + wait
    if redis.call('HGET', meta, 'root') then deadline = math.min(deadline, now + quiet) end
    redis.call('ZADD', due, deadline, tid)
    redis.call('EXPIRE', meta, ttl)
    redis.call('EXPIRE', spans, ttl)
    if keep < n then table.insert(out, tid); table.insert(out, n - keep) end
  end
end
table.insert(out, 1, late)
return out
"""

# ARGV: prefix, now, lease, limit. Returns {trace id, JSON array of its spans, ...}: one
# string per trace, so the client parses one reply element and decodes once per trace.
_CLAIM = """
local p, now, lease = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local ids = redis.call('ZRANGEBYSCORE', p .. 'due', '-inf', now, 'LIMIT', 0, tonumber(ARGV[4]))
local out = {}
for _, tid in ipairs(ids) do
  redis.call('ZADD', p .. 'due', now + lease, tid)
  table.insert(out, tid)
  local spans = redis.call('LRANGE', p .. 'spans:' .. tid, 0, -1)
  table.insert(out, '[' .. table.concat(spans, ',') .. ']')
end
return out
"""

# ARGV: prefix, done ttl, then per trace: trace id, spans claimed. Returns late spans.
_FINISH = """
local p, ttl, late = ARGV[1], tonumber(ARGV[2]), 0
for i = 3, #ARGV, 2 do
  local tid = ARGV[i]
  late = late + math.max(0, redis.call('LLEN', p .. 'spans:' .. tid) - tonumber(ARGV[i + 1]))
  redis.call('DEL', p .. 'spans:' .. tid, p .. 'meta:' .. tid)
  redis.call('ZREM', p .. 'due', tid)
  redis.call('SET', p .. 'done:' .. tid, 1, 'EX', ttl)
end
return late
"""


class RedisTraceBuffer(TraceBuffer):
    """Spans per trace in Redis; see the module docstring for the keys."""

    def __init__(self, client: redis.Redis, *, timing: Timing) -> None:
        """Buffer in ``client``'s database.

        Args:
            client: The shared Redis.
            timing: When traces are due, and how much is kept.
        """
        self._scripts = ScriptRunner(client, what="trace buffer")
        self._timing = timing
        self._add = self._scripts.register(_ADD)
        self._claim = self._scripts.register(_CLAIM)
        self._finish = self._scripts.register(_FINISH)

    def add(self, spans: Sequence[Span], *, now_s: float) -> Added:
        """See :meth:`TraceBuffer.add`."""
        if not spans:
            return Added()
        by_trace: dict[str, list[Span]] = {}
        for span in spans:
            by_trace.setdefault(span.trace_id, []).append(span)
        timing = self._timing
        args: list[Any] = [KEY_PREFIX, now_s, timing.quiet_s, timing.max_wait_s,
                           timing.max_spans_per_trace, timing.max_open_traces, _KEY_TTL_S,
                           timing.max_trace_bytes, timing.agent_max_wait_s]
        for trace_id, members in by_trace.items():
            root = any(span.is_root for span in members)
            agent = any(has_agent_marks(span.attributes) for span in members)
            args.extend([trace_id, "1" if root else "0", "1" if agent else "0", len(members)])
            args.extend(span.to_json() for span in members)
        result = self._scripts.run(self._add, args)
        if result[0] == -1:
            raise timing.full()
        return Added(rejections=_over_limit(result[1:], by_trace, timing), late=int(result[0]))

    def claim_due(self, *, now_s: float, limit: int) -> list[ClaimedTrace]:
        """See :meth:`TraceBuffer.claim_due`."""
        result = self._scripts.run(self._claim, [KEY_PREFIX, now_s, CLAIM_LEASE_S, limit])
        return [ClaimedTrace(trace_id=result[n].decode(),
                             spans=Span.list_from_json(result[n + 1]))
                for n in range(0, len(result), 2)]

    def finish(self, traces: Sequence[ClaimedTrace]) -> int:
        """See :meth:`TraceBuffer.finish`."""
        if not traces:
            return 0
        args: list[Any] = [KEY_PREFIX, int(self._timing.done_ttl_s)]
        for trace in traces:
            args.extend([trace.trace_id, len(trace.spans)])
        return int(self._scripts.run(self._finish, args))

    def open_traces(self) -> int:
        """See :meth:`TraceBuffer.open_traces`."""
        return self._scripts.count(KEY_PREFIX + "due")


def _over_limit(pairs: list[Any], by_trace: dict[str, list[Span]],
                timing: Timing) -> list[SpanRejection]:
    return [timing.over_limit(span) for n in range(0, len(pairs), 2)
            for span in by_trace[pairs[n].decode()][-int(pairs[n + 1]):]]
