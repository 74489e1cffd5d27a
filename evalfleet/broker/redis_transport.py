"""kombu's Redis transport with a consume that never holds a job outside Redis.

kombu pops a message with ``BRPOP`` and only then, from the client and on another
connection, records it as unacknowledged. Between the two the job exists only in a
socket buffer or in the worker's memory: a Redis restart, a dropped connection or a
worker killed in that gap loses it for good. The gap is wide, not a race of
microseconds: a busy worker (``worker_disable_prefetch``) leaves a popped reply
unread until a task thread frees up. A chaos run that killed Redis mid-run lost a
two-job message in about one run of four.

Here the blocking command only waits: ``BLMOVE q q RIGHT RIGHT`` returns the oldest
message and leaves the list as it was. A Lua script then pops and records the message
as unacknowledged in one atomic step, so from Redis's point of view every message is
at all times either in its queue or in ``unacked`` (from where kombu's visibility
timeout brings it back). Publishing, acks, restores and the timeout sweep are
kombu's own. Needs Redis 6.2 or newer (``BLMOVE``).

``BLMOVE`` waits on one list, so a worker on several queues first looks at all of
them in one round trip (``LLEN``s in a pipeline, nothing taken) and waits on the first
of its cycle that has work, which answers at once; the pop then starts from that queue,
and the queue served goes to the back of the cycle, so queues with work take turns.
Only when every queue is empty does the wait block, on each queue in turn; a message
arriving in another queue is then seen when the wait ends (``brpop_timeout``, one
second). Waiting on the first queue alone, as before, served a busy queue one message
a second while an empty one came first: 1,600 jobs that one queue drained in 6 s had
not drained after 90 s.

Once a wait answers, the consumer goes on popping (each message popped and held by the
same script) while the worker has a free slot, up to :data:`MAX_POPPED_PER_WAIT`: a
worker whose jobs take a millisecond (checks scored by code) otherwise paid a wait, a
poll and a re-registration of the socket for every message.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from queue import Empty
from time import monotonic, time
from typing import Any

from kombu.transport import redis as kombu_redis
from kombu.transport import virtual
from kombu.utils.encoding import bytes_to_str
from kombu.utils.json import loads

#: Pops the first message of the queue keys and records it as unacknowledged in the
#: same form kombu's QoS does (``[message, exchange, routing_key]`` under its tag, the
#: tag indexed by time). The message is spliced in as received, never re-encoded
#: (Lua's cjson would turn an empty list into an object). KEYS: unacked hash, unacked
#: index, queue keys in order; ARGV: the time. Returns {key, message, recorded (0/1)}
#: or false when every queue is empty.
POP_AND_HOLD = """
for i = 3, #KEYS do
    local payload = redis.call('RPOP', KEYS[i])
    if payload then
        local ok, message = pcall(cjson.decode, payload)
        local properties = ok and type(message) == 'table' and message['properties']
        local tag = type(properties) == 'table' and properties['delivery_tag']
        local info = type(properties) == 'table' and properties['delivery_info']
        if type(tag) ~= 'string' or type(info) ~= 'table' then
            return {KEYS[i], payload, 0}
        end
        redis.call('ZADD', KEYS[2], ARGV[1], tag)
        redis.call('HSET', KEYS[1], tag, '[' .. payload .. ',' ..
            cjson.encode(info['exchange']) .. ',' .. cjson.encode(info['routing_key']) .. ']')
        return {KEYS[i], payload, 1}
    end
end
return false
"""


#: Most messages delivered on one wait's answer (the event loop runs between waits).
MAX_POPPED_PER_WAIT = 16


class QoS(kombu_redis.QoS):
    """kombu's QoS, minus the client-side record of a message the pop already recorded."""

    def append(self, message: Any, delivery_tag: str) -> None:
        """Track ``message`` as delivered; record it in Redis unless the pop did."""
        if delivery_tag in self.channel.held_tags:
            self.channel.held_tags.discard(delivery_tag)
            virtual.QoS.append(self, message, delivery_tag)
        else:
            super().append(message, delivery_tag)


class Channel(kombu_redis.Channel):
    """A Redis channel whose consume waits with ``BLMOVE`` and pops with :data:`POP_AND_HOLD`."""

    QoS = QoS

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if self.global_keyprefix:
            raise ValueError("the evalfleet Redis transport does not support global_keyprefix")
        #: Delivery tags the pop recorded in Redis, until the QoS sees them.
        self.held_tags: set[str] = set()
        self._waited_on: list[str] = []
        self._pop_script: Any = None
        self._pool_client: Any = None

    @contextmanager
    def conn_or_acquire(self, client: Any = None) -> Iterator[Any]:
        """kombu's, with one client for the channel's pool instead of a new one each call.

        kombu builds a client for every ack and every pop, and building one (its table of
        response callbacks) costs more than the command it sends: 0.3 ms on the shared
        test machine, two or three times a message. A redis-py client is thread-safe
        (each command takes a connection from the pool), so one serves every thread; a
        new one is made when kombu replaces the pool (after a lost connection).
        """
        if client:
            yield client
            return
        pool = self.pool
        if self._pool_client is None or self._pool_client.connection_pool is not pool:
            self._pool_client = self._create_client()
        yield self._pool_client

    def _brpop_start(self, timeout: float | None = None) -> None:
        if timeout is None:
            timeout = self.brpop_timeout
        queues = self._queue_cycle.consume(len(self.active_queues))
        if not queues:
            return
        self._waited_on = self._ready_first(list(queues))
        self._in_poll = self.client.connection
        self._brpop_sent_at = monotonic()  # type: ignore[assignment]  # kombu: None until sent
        # Wait on the first queue with work (it answers at once), else on the first of
        # the cycle; the pop looks at all of them, and a wait that times out moves its
        # queue to the back (see _brpop_read), so an idle worker waits on each in turn.
        key = self._waited_on[0]
        self.client.connection.send_command("BLMOVE", key, key, "RIGHT", "RIGHT", timeout or 0)

    def _ready_first(self, queues: list[str]) -> list[str]:
        """``queues`` from the first that holds a message (cycle order otherwise kept)."""
        if len(queues) < 2:
            return queues
        keys = [[self._q_for_pri(queue, priority) for priority in self.priority_steps]
                for queue in queues]
        with self.conn_or_acquire() as client:
            pipe = client.pipeline(transaction=False)
            for key in (key for per_queue in keys for key in per_queue):
                pipe.llen(key)
            lengths = iter(pipe.execute())
        for index, per_queue in enumerate(keys):
            if sum(next(lengths) for _ in per_queue):
                return queues[index:] + queues[:index]
        return queues

    def _brpop_read(self, **options: Any) -> bool:
        try:
            try:
                self.client.parse_response(self.client.connection, "BLMOVE", **options)
            except self.connection_errors:
                # Disconnect so the next poll reconnects; nothing was taken off a queue.
                self.client.connection.disconnect()
                raise
            if self._closing:
                raise Empty()
            popped = self._pop_and_hold(self._waited_on)
            if popped is None:
                self._queue_cycle.rotate(self._waited_on[0])
                raise Empty()
            queue, message = popped
            self._queue_cycle.rotate(queue)
            self.connection._deliver(message, queue)
            self._pop_more()
            return True
        finally:
            self._in_poll = None  # type: ignore[assignment]  # kombu: a connection or None
            self._flush_brpop_reauth()

    def _pop_more(self) -> None:
        """Deliver messages still waiting while the worker has a free slot, each popped
        and held as the first was, without a wait of its own: a wait and a poll a message
        cost as much as the pop. A connection error is left to the next wait to meet."""
        for _ in range(MAX_POPPED_PER_WAIT - 1):
            if self._closing or not self.qos.can_consume():
                return
            try:
                popped = self._pop_and_hold(list(self._queue_cycle.consume(
                    len(self.active_queues))))
            except self.connection_errors:
                return
            if popped is None:
                return
            queue, message = popped
            self._queue_cycle.rotate(queue)
            self.connection._deliver(message, queue)

    def _pop_and_hold(self, queues: list[str]) -> tuple[str, dict[str, Any]] | None:
        """Pop the first waiting message of ``queues`` (priority first), held as unacked."""
        keys = {self._q_for_pri(queue, priority): queue
                for priority in self.priority_steps for queue in queues}
        with self.conn_or_acquire() as client:
            if self._pop_script is None:
                self._pop_script = client.register_script(POP_AND_HOLD)
            reply = self._pop_script(
                keys=[self.unacked_key, self.unacked_index_key, *keys], args=[time()],
                client=client)
        if not reply:
            return None
        key, payload, recorded = reply
        message = loads(bytes_to_str(payload))
        if recorded:
            self.held_tags.add(message["properties"]["delivery_tag"])
        return keys[bytes_to_str(key)], message


class Transport(kombu_redis.Transport):
    """kombu's Redis transport with :class:`Channel`."""

    Channel = Channel
