"""Job messages written by orjson read as kombu's own JSON wrote them."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from kombu.serialization import dumps as kombu_dumps
from kombu.serialization import loads as kombu_loads
from kombu.serialization import registry
from kombu.utils import json as kombu_json

from evalfleet.broker import serializer
from evalfleet.core.message import encode_batch, new_job
from evalfleet.core.sample import parse_sample

serializer.register()

#: JSON values as job bodies hold them: text (any code point but lone surrogates),
#: 64-bit integers, finite floats, booleans, null, lists and objects.
VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1)
    | st.floats(allow_nan=False, allow_infinity=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=20)


def read(body: bytes | str, content_type: str = "application/json") -> Any:
    """What a consumer reads: kombu's decoder for the message's content type."""
    return kombu_loads(body, content_type, "utf-8", accept={"application/json"})


@given(VALUES)
def test_any_json_value_reads_back_as_kombus_own_encoding_of_it(value: Any) -> None:
    content_type, _, _ = kombu_dumps(value, serializer=serializer.JOB_JSON)
    assert content_type == "application/json"
    assert read(serializer.dumps(value)) == read(kombu_json.dumps(value)) == value


def test_a_celery_body_of_a_batch_of_jobs_reads_back_whole() -> None:
    jobs = [new_job("rag_qa", parse_sample({
        "id": f"s-{n}", "input": "Où est la gare ? 🚉", "output": "À droite.\n\t\"quoted\"",
        "context": ["ctx \u2028 line separator", "é" * 300]})) for n in range(16)]
    embed = {"callbacks": None, "errbacks": None, "chain": None, "chord": None}
    body: tuple[Any, ...] = ([encode_batch(jobs)], {}, embed)
    assert read(serializer.dumps(body)) == json.loads(json.dumps(body))


@pytest.mark.parametrize("value", [
    {"lone surrogate": "a\ud800b"},
    {"too big": 2**70},
    {"when": datetime(2026, 11, 26, 12, 0, tzinfo=UTC)},
    {"amount": Decimal("1.25")},
])
def test_what_orjson_would_write_otherwise_goes_to_kombus_encoder(value: Any) -> None:
    assert serializer.dumps(value) == kombu_json.dumps(value).encode()
    assert read(serializer.dumps(value)) == value


def test_registering_leaves_the_content_type_named_json_for_replies() -> None:
    serializer.register()
    assert registry.type_to_name["application/json"] == "json"
    assert registry.name_to_type[serializer.JOB_JSON] == "application/json"
