"""The Redis transport: a consumed message is at all times in its queue or in ``unacked``."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator

import pytest
import redis
from kombu import Connection, Consumer, Exchange, Message, Producer, Queue

from workers.app import REDIS_TRANSPORT

BODY = {"samples": [], "options": {}, "text": "{x} {{ y }} <score>5</score>"}


@pytest.fixture
def client(redis_url: str) -> Iterator[redis.Redis]:
    with redis.Redis.from_url(redis_url) as client:
        yield client


def _connection(redis_url: str, **options: object) -> Connection:
    return Connection(redis_url, transport=REDIS_TRANSPORT, transport_options=options)


def _publish(redis_url: str, queue: Queue, body: object = BODY) -> None:
    with Connection(redis_url) as connection:  # kombu's own transport publishes
        Producer(connection).publish(body, exchange=queue.exchange,
                                     routing_key=queue.routing_key, declare=[queue],
                                     serializer="json")


def _queue(name: str) -> Queue:
    return Queue(name, Exchange(name, type="direct"), routing_key=name)


def _consume_one(connection: Connection, queues: list[Queue]) -> Message:
    received: list[Message] = []
    with Consumer(connection, queues, callbacks=[lambda _body, m: received.append(m)],
                  accept=["json"]):
        connection.drain_events(timeout=5)
    (message,) = received
    return message


def test_a_delivered_message_is_held_in_redis_until_acknowledged(
    redis_url: str, client: redis.Redis,
) -> None:
    queue = _queue("eval.held")
    _publish(redis_url, queue)
    with _connection(redis_url) as connection:
        message = _consume_one(connection, [queue])
        assert message.decode() == BODY
        assert client.llen("eval.held") == 0
        assert client.hexists("unacked", message.delivery_tag)
        assert client.zscore("unacked_index", message.delivery_tag) is not None
        message.ack()
        assert client.hlen("unacked") == 0 and client.zcard("unacked_index") == 0


def test_a_consumer_that_dies_after_the_pop_loses_nothing(
    redis_url: str, client: redis.Redis,
) -> None:
    queue = _queue("eval.dies")
    _publish(redis_url, queue)
    with _connection(redis_url) as connection:
        message = _consume_one(connection, [queue])
        # The worker dies here: no ack, no restore at shutdown; only Redis remembers it.
        connection.default_channel.qos._delivered.clear()
    assert client.llen("eval.dies") == 0 and client.hlen("unacked") == 1

    with _connection(redis_url, visibility_timeout=0) as sweeper:
        sweeper.default_channel.qos.restore_visible(num=100, interval=1)
    assert client.hlen("unacked") == 0
    (restored,) = client.lrange("eval.dies", 0, -1)
    payload = json.loads(restored)
    assert payload["properties"]["delivery_tag"] == message.delivery_tag
    # Spliced in as received: empty lists stay lists, sample text stays verbatim.
    with _connection(redis_url) as connection:
        again = _consume_one(connection, [queue])
        assert again.decode() == BODY
        again.ack()


def test_waiting_takes_nothing_off_the_queue(redis_url: str, client: redis.Redis) -> None:
    """A worker with no free thread leaves the wait's reply unread; the job stays queued."""
    queue = _queue("eval.wait")
    _publish(redis_url, queue)
    with _connection(redis_url) as connection:
        channel = connection.default_channel
        with Consumer(connection, [queue], accept=["json"]):
            connection.transport.cycle._register_BRPOP(channel)  # sends the wait
            sock = channel.client.connection._sock
            sock.settimeout(5)
            assert sock.recv(1, socket.MSG_PEEK)  # the reply arrived, unread
            assert client.llen("eval.wait") == 1 and client.hlen("unacked") == 0
            channel.client.connection.disconnect()  # e.g. Redis restarts, worker killed
    assert client.llen("eval.wait") == 1 and client.hlen("unacked") == 0


def test_a_consumer_of_several_queues_reaches_each(redis_url: str) -> None:
    empty, busy = _queue("eval.empty"), _queue("eval.busy")
    _publish(redis_url, busy, {"n": 1})
    with Connection(redis_url) as connection:
        connection.default_channel.queue_declare(queue="eval.empty")
    with _connection(redis_url) as connection:
        message = _consume_one(connection, [empty, busy])
        assert message.decode() == {"n": 1}
        message.ack()


def test_a_message_without_a_delivery_tag_is_recorded_by_the_consumer(
    redis_url: str, client: redis.Redis,
) -> None:
    queue = _queue("eval.untagged")
    with Connection(redis_url) as connection:
        connection.default_channel.queue_declare(queue="eval.untagged")
        message = connection.default_channel.prepare_message(json.dumps({"n": 2}),
                                                             content_type="application/json")
    message["properties"]["delivery_info"] = {"exchange": "eval.untagged",
                                              "routing_key": "eval.untagged"}
    message["properties"]["delivery_tag"] = 7  # not a string: the script leaves it alone
    client.lpush("eval.untagged", json.dumps(message))
    with _connection(redis_url) as connection:
        received = _consume_one(connection, [queue])
        assert received.decode() == {"n": 2}
        assert client.hlen("unacked") == 1  # recorded by kombu's QoS instead
        received.ack()
    assert client.hlen("unacked") == 0


def _publish_many(redis_url: str, queue: Queue, bodies: list[object]) -> None:
    with Connection(redis_url) as connection:
        producer = Producer(connection)
        for body in bodies:
            producer.publish(body, exchange=queue.exchange, routing_key=queue.routing_key,
                             declare=[queue], serializer="json")


def _drain(connection: Connection, queues: list[Queue], *, count: int,
           deadline_s: float) -> list[object]:
    """Consume and acknowledge up to ``count`` messages within ``deadline_s``."""
    bodies: list[object] = []

    def take(body: object, message: Message) -> None:
        bodies.append(body)
        message.ack()

    deadline = time.monotonic() + deadline_s
    with Consumer(connection, queues, callbacks=[take], accept=["json"]):
        while len(bodies) < count and time.monotonic() < deadline:
            try:
                connection.drain_events(timeout=0.5)
            except TimeoutError:
                continue
    return bodies


@pytest.mark.parametrize("order", ["empty first", "busy first"])
def test_a_consumer_of_two_queues_drains_the_busy_one_without_waiting_on_the_empty_one(
    redis_url: str, client: redis.Redis, order: str,
) -> None:
    empty, busy = _queue("eval.idle"), _queue("eval.backlog")
    with Connection(redis_url) as connection:
        connection.default_channel.queue_declare(queue="eval.idle")
    _publish_many(redis_url, busy, [{"n": n} for n in range(60)])
    queues = [empty, busy] if order == "empty first" else [busy, empty]
    with _connection(redis_url) as connection:
        # A wait on the empty queue per message (one second each) needs 60 s.
        bodies = _drain(connection, queues, count=60, deadline_s=20)
    assert len(bodies) == 60
    assert client.llen("eval.backlog") == 0 and client.hlen("unacked") == 0


def test_a_consumer_of_three_queues_with_work_takes_from_each_in_turn(
    redis_url: str, client: redis.Redis,
) -> None:
    names = ["eval.one", "eval.two", "eval.three"]
    for name in names:
        _publish_many(redis_url, _queue(name), [{"queue": name, "n": n} for n in range(5)])
    with _connection(redis_url) as connection:
        bodies = _drain(connection, [_queue(name) for name in names], count=15, deadline_s=20)
    served = [body["queue"] for body in bodies]  # type: ignore[index]
    assert len(served) == 15
    # Round robin: every three messages in a row come from the three queues.
    for start in range(0, 15, 3):
        assert sorted(served[start:start + 3]) == sorted(names), served
    assert client.hlen("unacked") == 0


def test_one_wait_delivers_what_waits_up_to_the_free_slots(
    redis_url: str, client: redis.Redis,
) -> None:
    queue = _queue("eval.many")
    _publish_many(redis_url, queue, [{"n": n} for n in range(10)])
    received: list[Message] = []
    with _connection(redis_url) as connection, Consumer(
            connection, [queue], callbacks=[lambda _body, m: received.append(m)],
            accept=["json"], prefetch_count=3):
        connection.drain_events(timeout=5)  # one wait's answer
        assert [m.decode()["n"] for m in received] == [0, 1, 2]
        assert client.llen("eval.many") == 7 and client.hlen("unacked") == 3
        for message in received:
            message.ack()
        connection.drain_events(timeout=5)
        assert [m.decode()["n"] for m in received[3:]] == [3, 4, 5]
        for message in received[3:]:
            message.ack()
    assert client.hlen("unacked") == 0 and client.llen("eval.many") == 4
