"""Response-format step-down: per process, and shared by the fleet through real Redis."""

from __future__ import annotations

import pytest
import redis

from workers.judge.formats import (
    KEY_PREFIX,
    FormatSupport,
    RedisFormatSupport,
    endpoint_digest,
    mode_of,
    shaped,
    weaker,
)

SCHEMA = {"type": "object", "properties": {"score": {"type": "number"}}}
STRICT = {"type": "json_schema", "json_schema": {"name": "m", "strict": True, "schema": SCHEMA}}


def test_weaker_steps_down_and_stops_at_text() -> None:
    assert weaker("json_schema") == "json_object_schema"
    assert weaker("json_object_schema") == "json_object"
    assert weaker("json_object") == "text"
    assert weaker("text") == "text"


@pytest.mark.parametrize(("mode", "sent"), [
    ("json_schema", STRICT),
    ("json_object_schema", {"type": "json_object", "schema": SCHEMA}),
    ("json_object", {"type": "json_object"}),
    ("text", None),
])
def test_a_request_is_shaped_down_to_the_mode_keeping_its_schema(mode: str, sent: object) -> None:
    assert shaped(STRICT, mode) == sent  # type: ignore[arg-type]
    assert mode_of(shaped(STRICT, mode)) == mode  # type: ignore[arg-type]


def test_shaping_never_raises_a_request() -> None:
    assert shaped({"type": "json_object"}, "json_schema") == {"type": "json_object"}
    assert shaped(None, "json_schema") is None


def test_a_refusal_lowers_one_model_once() -> None:
    support = FormatSupport("json_schema")
    assert support.step_down("m", refused="json_schema") == "json_object_schema"
    assert support.step_down("m", refused="json_schema") is None  # a second report: no news
    assert support.mode_for("m") == "json_object_schema"
    assert support.step_down("m", refused="json_object_schema") == "json_object"
    assert support.mode_for("other") == "json_schema"
    assert support.step_down("m", refused="json_object") == "text"
    assert support.mode_for("m") == "text"


def test_the_ceiling_is_never_exceeded() -> None:
    support = FormatSupport("json_object")
    assert support.mode_for("m") == "json_object"
    assert support.step_down("m", refused="json_schema") is None
    assert support.mode_for("m") == "json_object"


def test_the_endpoint_digest_ignores_credentials_and_scheme_case() -> None:
    plain = endpoint_digest("https://judge.example:8443/v1")
    assert endpoint_digest("https://user:secret@judge.example:8443/v1/") == plain
    assert endpoint_digest("https://judge.example:8443/v2") != plain
    assert "secret" not in plain and len(plain) == 16


def test_one_worker_s_step_down_reaches_the_fleet(redis_url: str) -> None:
    now = [0.0]
    first = RedisFormatSupport("json_schema", url=redis_url, endpoint="http://sim/v1",
                               refresh_s=10, clock=lambda: now[0])
    second = RedisFormatSupport("json_schema", url=redis_url, endpoint="http://sim/v1",
                                refresh_s=10, clock=lambda: now[0])
    elsewhere = RedisFormatSupport("json_schema", url=redis_url, endpoint="http://other/v1",
                                   refresh_s=10, clock=lambda: now[0])
    assert second.mode_for("m") == "json_schema"  # read once, cached for refresh_s
    assert first.step_down("m", refused="json_schema") == "json_object_schema"
    assert second.mode_for("m") == "json_schema"
    now[0] = 10.0
    assert second.mode_for("m") == "json_object_schema"
    assert second.step_down("m", refused="json_schema") is None
    assert elsewhere.mode_for("m") == "json_schema"  # another endpoint learns nothing
    keys = [key.decode() for key in redis.Redis.from_url(redis_url).keys(f"{KEY_PREFIX}*")]
    assert keys == [KEY_PREFIX + endpoint_digest("http://sim/v1")]


def test_the_shared_mode_is_only_ever_lowered(redis_url: str) -> None:
    client = redis.Redis.from_url(redis_url)
    support = RedisFormatSupport("json_schema", url=redis_url, endpoint=None, refresh_s=0)
    key = KEY_PREFIX + endpoint_digest(None)
    support.step_down("m", refused="json_object")  # straight to text
    stale = RedisFormatSupport("json_schema", url=redis_url, endpoint=None, refresh_s=1e9)
    assert stale.step_down("m", refused="json_schema") == "json_object_schema"  # not read yet
    assert client.hget(key, "m") == b"text"


def test_an_unreachable_redis_keeps_the_process_working() -> None:
    support = RedisFormatSupport("json_schema", url="redis://127.0.0.1:1/0", endpoint=None,
                                 refresh_s=0)
    assert support.mode_for("m") == "json_schema"
    assert support.step_down("m", refused="json_schema") == "json_object_schema"
    assert support.mode_for("m") == "json_object_schema"


@pytest.mark.parametrize("value", [b"bogus", b""])
def test_unknown_shared_values_are_ignored(redis_url: str, value: bytes) -> None:
    redis.Redis.from_url(redis_url).hset(KEY_PREFIX + endpoint_digest(None), "m", value)
    support = RedisFormatSupport("json_schema", url=redis_url, endpoint=None, refresh_s=0)
    assert support.mode_for("m") == "json_schema"
