"""The session buffer in Redis, shared by every ingest replica.

Keys (``evalfleet:otlp:session:`` prefix): ``turns:<session>`` a hash of trace id to the
turn's envelope (JSON), ``meta:<session>`` a hash (first and last turn arrival, turn
count and bytes, turns judged in the last version and why it was closed, whether it ended
or passed its maximum age), ``due`` a sorted set of session ids by the time each is due,
``firsts`` one by the time of each session's first turn (the oldest, for ``evalfleet
status``). Each operation is one Lua script, so replicas never see half of another's
step, and a session is in ``due`` from its first turn until it is forgotten: an ingest
killed at any point leaves every kept turn to the next sweep (with Redis persistence).
The trace a turn came from is finished in the trace buffer only after its turn is kept
here, so a SIGKILL in between produces the trace again and its turn is kept once (by
trace id).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

import orjson
import redis

from evalfleet.core.session import ClosedBy
from producers.traces.conversation import TurnIn
from producers.traces.scripts import ScriptRunner
from producers.traces.sessions.base import (
    SESSION_LEASE_S,
    ClaimedSession,
    SessionBuffer,
    SessionTiming,
    Shed,
)

#: Prefix of every key of the buffer.
KEY_PREFIX = "evalfleet:otlp:session:"

#: Seconds a session's keys live without a sweep (a fleet stopped that long).
_KEY_TTL_S = 7 * 24 * 3600

# The deadline of a session with turns not yet judged (SessionTiming.deadline).
_DEADLINE = """
local function deadline(meta, now, idle, max_age)
  if redis.call('HGET', meta, 'ended') then return now end
  local due = tonumber(redis.call('HGET', meta, 'last')) + idle
  if redis.call('HGET', meta, 'aged') then return due end
  return math.min(due, tonumber(redis.call('HGET', meta, 'first')) + max_age)
end
"""

# ARGV: prefix, now, idle, max_age, max_open, max_turns, max_bytes, ttl, then per turn:
# session, trace id, ends (0/1), has a body (0/1), body. Returns {session, reason, ...}
# of the turns shed.
_ADD = _DEADLINE + """
local p, now, idle, max_age = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local max_open, max_turns = tonumber(ARGV[5]), tonumber(ARGV[6])
local max_bytes, ttl = tonumber(ARGV[7]), tonumber(ARGV[8])
local due, out = p .. 'due', {}
for i = 9, #ARGV, 5 do
  local sid, tid, ends, has, body = ARGV[i], ARGV[i + 1], ARGV[i + 2], ARGV[i + 3], ARGV[i + 4]
  local meta, turns = p .. 'meta:' .. sid, p .. 'turns:' .. sid
  local known = redis.call('EXISTS', meta) == 1
  local shed = nil
  if not known and has == '1' and redis.call('ZCARD', due) >= max_open then
    shed = 'too_many_open_sessions'
  elseif has == '1' and redis.call('HEXISTS', turns, tid) == 0 then
    local count = tonumber(redis.call('HGET', meta, 'count') or '0')
    local size = tonumber(redis.call('HGET', meta, 'bytes') or '0')
    if count >= max_turns then
      shed = 'too_many_turns'
    elseif size + #body > max_bytes then
      shed = 'session_too_large'
    else
      redis.call('HSET', turns, tid, body)
      redis.call('HSET', meta, 'count', count + 1, 'bytes', size + #body, 'last', now)
      if redis.call('HSETNX', meta, 'first', now) == 1 then
        redis.call('ZADD', p .. 'firsts', now, sid)
      end
      redis.call('HSETNX', meta, 'judged', 0)
      known = true
    end
  end
  if shed then table.insert(out, sid); table.insert(out, shed) end
  if known then
    if ends == '1' then redis.call('HSET', meta, 'ended', 1) end
    local count = tonumber(redis.call('HGET', meta, 'count'))
    local ended = redis.call('HGET', meta, 'ended')
    if count > tonumber(redis.call('HGET', meta, 'judged')) or ended then
      redis.call('ZADD', due, deadline(meta, now, idle, max_age), sid)
    end
    redis.call('EXPIRE', meta, ttl)
    redis.call('EXPIRE', turns, ttl)
  end
end
return out
"""

# ARGV: prefix, now, lease, limit, max_age. Returns {forgotten, session, closed_by,
# JSON array of its turns' envelopes, ...}.
_CLAIM = """
local p, now, lease, limit = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local max_age = tonumber(ARGV[5])
local due = p .. 'due'
local ids = redis.call('ZRANGEBYSCORE', due, '-inf', now, 'LIMIT', 0, limit * 2 + 100)
local out, forgotten, claimed = {0}, 0, 0
for _, sid in ipairs(ids) do
  local meta, turns = p .. 'meta:' .. sid, p .. 'turns:' .. sid
  local count = tonumber(redis.call('HGET', meta, 'count') or '0')
  local judged = tonumber(redis.call('HGET', meta, 'judged') or '0')
  if count <= judged and redis.call('HGET', meta, 'closed') ~= 'idle' then
    redis.call('DEL', meta, turns)
    redis.call('ZREM', due, sid)
    redis.call('ZREM', p .. 'firsts', sid)
    forgotten = forgotten + 1
  elseif claimed < limit then
    claimed = claimed + 1
    local closed = 'idle'
    if redis.call('HGET', meta, 'ended') then
      closed = 'end'
    elseif count <= judged then
      closed = 'final_wait'
    elseif not redis.call('HGET', meta, 'aged')
        and now >= tonumber(redis.call('HGET', meta, 'first')) + max_age then
      closed = 'max_age'
    end
    redis.call('ZADD', due, now + lease, sid)
    table.insert(out, sid)
    table.insert(out, closed)
    table.insert(out, '[' .. table.concat(redis.call('HVALS', turns), ',') .. ']')
  end
end
out[1] = forgotten
return out
"""

# ARGV: prefix, now, idle, max_age, final, then per session: session, turns judged,
# closed_by.
_FINISH = _DEADLINE + """
local p, now, idle, max_age = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local final = tonumber(ARGV[5])
for i = 6, #ARGV, 3 do
  local sid, judged, closed = ARGV[i], tonumber(ARGV[i + 1]), ARGV[i + 2]
  local meta = p .. 'meta:' .. sid
  if redis.call('EXISTS', meta) == 1 then
    redis.call('HSET', meta, 'judged', judged, 'closed', closed)
    if closed == 'max_age' then redis.call('HSET', meta, 'aged', 1) end
    if closed == 'end' then redis.call('HDEL', meta, 'ended') end
    local at
    local count = tonumber(redis.call('HGET', meta, 'count'))
    if count > judged or redis.call('HGET', meta, 'ended') then
      at = deadline(meta, now, idle, max_age)
    else
      at = tonumber(redis.call('HGET', meta, 'last')) + final
    end
    redis.call('ZADD', p .. 'due', at, sid)
  end
end
return 0
"""


class RedisSessionBuffer(SessionBuffer):
    """Turns per session in Redis; see the module docstring for the keys."""

    def __init__(self, client: redis.Redis, *, timing: SessionTiming) -> None:
        """Buffer in ``client``'s database.

        Args:
            client: The shared Redis.
            timing: When sessions are due, and how much is kept.
        """
        self._scripts = ScriptRunner(client, what="session buffer")
        self._timing = timing
        self._add = self._scripts.register(_ADD)
        self._claim = self._scripts.register(_CLAIM)
        self._finish = self._scripts.register(_FINISH)

    def add(self, turns: Sequence[TurnIn], *, now_s: float) -> list[Shed]:
        """See :meth:`SessionBuffer.add`."""
        if not turns:
            return []
        timing = self._timing
        args: list[Any] = [KEY_PREFIX, now_s, timing.idle_s, timing.max_age_s,
                           timing.max_open_sessions, timing.max_turns_per_session,
                           timing.max_session_bytes, _KEY_TTL_S]
        for turn in turns:
            args.extend([turn.session_id, turn.trace_id, "1" if turn.ends else "0",
                         "0" if turn.body is None else "1", turn.body or ""])
        result = self._scripts.run(self._add, args)
        return [Shed(result[n].decode(), result[n + 1].decode())
                for n in range(0, len(result), 2)]

    def claim_due(self, *, now_s: float, limit: int) -> tuple[list[ClaimedSession], int]:
        """See :meth:`SessionBuffer.claim_due`."""
        result = self._scripts.run(self._claim, [KEY_PREFIX, now_s, SESSION_LEASE_S, limit,
                                         self._timing.max_age_s])
        claimed = [ClaimedSession(result[n].decode(), orjson.loads(result[n + 2]),
                                  cast(ClosedBy, result[n + 1].decode()))
                   for n in range(1, len(result), 3)]
        return claimed, int(result[0])

    def finish(self, sessions: Sequence[ClaimedSession], *, now_s: float) -> None:
        """See :meth:`SessionBuffer.finish`."""
        if not sessions:
            return
        timing = self._timing
        args: list[Any] = [KEY_PREFIX, now_s, timing.idle_s, timing.max_age_s, timing.final_s]
        for session in sessions:
            args.extend([session.session_id, len(session.envelopes), session.closed_by])
        self._scripts.run(self._finish, args)

    def open_sessions(self) -> int:
        """See :meth:`SessionBuffer.open_sessions`."""
        return self._scripts.count(KEY_PREFIX + "due")

    def oldest_first_s(self) -> float | None:
        """See :meth:`SessionBuffer.oldest_first_s`."""
        return self._scripts.lowest_score(KEY_PREFIX + "firsts")
