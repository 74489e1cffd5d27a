"""The ingest service over real Redis: auth, limits, per-record errors, 503, probes."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from openapi_spec_validator import validate
from starlette.testclient import TestClient

from producers.ingest import create_app
from producers.runtime import ProducerRuntime
from tests.producers.builders import producer_settings, queued_ids, record

TOKEN = "tok-ingest-1"
AUTH = {"Authorization": f"Bearer {TOKEN}"}

MakeClient = Callable[..., TestClient]


@pytest.fixture
def make_client(redis_url: str, tmp_path: Path) -> Iterator[MakeClient]:
    runtimes: list[ProducerRuntime] = []

    def make(*, broker_url: str | None = redis_url, config: str = "",
             metrics: list[str] | None = None, **settings: Any) -> TestClient:
        path = None
        if config:
            path = tmp_path / "sampling.yaml"
            path.write_text(config)
        runtime = ProducerRuntime(producer_settings(broker_url, tmp_path, **settings),
                                  sampling_config=path)
        runtimes.append(runtime)
        app = create_app(runtime, tokens=[TOKEN, "tok-ingest-2"],
                         metrics=metrics if metrics is not None or config else ["rag_qa"])
        return TestClient(app)

    yield make
    for runtime in runtimes:
        runtime.close()


def post(client: TestClient, body: Any, *, headers: dict[str, str] | None = None) -> Any:
    return client.post("/v1/samples", content=json.dumps(body),
                       headers={"Content-Type": "application/json",
                                **(AUTH if headers is None else headers)})


@pytest.mark.parametrize(("headers", "status"), [
    ({}, 401), ({"Authorization": "Basic abc"}, 401), ({"Authorization": "Bearer"}, 401),
    ({"Authorization": "Bearer wrong"}, 403), (AUTH, 202),
    ({"Authorization": "Bearer tok-ingest-2"}, 202),
])
def test_auth(make_client: MakeClient, headers: dict[str, str], status: int) -> None:
    response = post(make_client(), record(1), headers=headers)
    assert response.status_code == status, response.text
    if status == 401:
        assert response.headers["WWW-Authenticate"].startswith("Bearer")
        assert "detail" in response.json()


def test_a_batch_with_bad_records_accepts_the_good_ones(
    make_client: MakeClient, redis_client: redis.Redis,
) -> None:
    batch = {"samples": [
        record(0), {"id": "no-output", "input": "q", "context": ["c"]},
        record(2, context=["fine", "x" * 70_000]), {"input": "no id"}, record(4),
    ]}
    response = post(make_client(), batch)
    assert response.status_code == 422
    report = response.json()
    assert (report["received"], report["accepted"], report["rejected"]) == (5, 2, 3)
    assert "the other 2 were accepted" in report["detail"]
    assert report["jobs"] == {"rag_qa": 2}
    rejections = {r["index"]: r for r in report["rejections"]}
    assert rejections[1]["id"] == "no-output" and rejections[1]["field"] == "output"
    assert rejections[2]["field"] == "context[1]"
    assert rejections[2]["message"] == ("samples[2], id 'req-00002', field 'context[1]': "
                                        "70,000 characters, over the limit of 65,536")
    assert rejections[3]["field"] == "id" and rejections[3]["id"] is None
    assert queued_ids(redis_client, "rag_qa") == ["req-00000", "req-00004"]


def test_nothing_valid_is_422(make_client: MakeClient) -> None:
    client = make_client()
    response = post(client, [{"id": "a", "context": "x"}, {"id": ""}])
    assert response.status_code == 422
    assert response.json()["rejected"] == 2 and response.json()["detail"]
    single = post(client, {"id": "b", "output": 5})
    assert single.status_code == 422
    assert single.json()["rejections"][0]["message"].startswith("sample, id 'b', field 'output'")


@pytest.mark.parametrize(("body", "status", "detail"), [
    (b"{not json", 400, "not valid JSON"),
    (b'{"samples": []}', 422, "empty"),
    (json.dumps([record(n) for n in range(6)]).encode(), 413, "over the limit of 5"),
])
def test_bad_bodies(make_client: MakeClient, body: bytes, status: int, detail: str) -> None:
    response = make_client(ingest_max_batch=5).post(
        "/v1/samples", content=body, headers={**AUTH, "Content-Type": "application/json"})
    assert response.status_code == status and detail in response.json()["detail"]


def test_request_size_limit(make_client: MakeClient) -> None:
    client = make_client(ingest_max_request_bytes=2000)
    big = json.dumps(record(1, input="x" * 3000)).encode()
    response = client.post("/v1/samples", content=big,
                           headers={**AUTH, "Content-Type": "application/json"})
    assert response.status_code == 413
    assert "over the limit of 2,000 bytes" in response.json()["detail"]
    # Without Content-Length (chunked), the body is cut off at the limit as it streams.
    chunked = client.post("/v1/samples", content=iter([big[:1500], big[1500:]]),
                          headers={**AUTH, "Content-Type": "application/json"})
    assert chunked.status_code == 413
    assert post(client, record(2)).status_code == 202


def test_not_json_is_415(make_client: MakeClient) -> None:
    response = make_client().post("/v1/samples", content=b"id=1",
                                  headers={**AUTH, "Content-Type": "text/plain"})
    assert response.status_code == 415


def test_broker_down_is_503_and_nothing_is_accepted(make_client: MakeClient) -> None:
    client = make_client(broker_url="redis://127.0.0.1:1/0")
    response = post(client, [record(1), record(2)])
    assert response.status_code == 503
    assert response.headers["Retry-After"] == "5"
    assert "send it again" in response.json()["detail"]
    assert client.get("/readyz").status_code == 503
    assert client.get("/healthz").json() == {"status": "ok"}


def test_resending_a_batch_adds_nothing(make_client: MakeClient,
                                        redis_client: redis.Redis) -> None:
    client = make_client()
    batch = [record(n) for n in range(4)]
    assert post(client, batch).json()["accepted"] == 4
    again = post(client, batch).json()
    assert (again["accepted"], again["duplicates"]) == (0, 4)
    assert len(queued_ids(redis_client, "rag_qa")) == 4


def test_rates_filters_and_shedding_from_the_config(
    make_client: MakeClient, redis_client: redis.Redis,
) -> None:
    client = make_client(config="""
segments: {by: [app]}
metrics:
  rag_qa: {rate: 0.5, max_queue_depth: 50}
  context_precision: {rate: 1.0, where: {app: support-bot}}
""")
    report = post(client, [record(n) for n in range(300)]).json()
    assert report["received"] == 300
    assert report["jobs"]["context_precision"] == 100  # one app in three
    assert report["jobs"]["rag_qa"] == 50  # the limit; the rest shed and counted
    assert len(queued_ids(redis_client, "rag_qa")) == 50
    metrics = client.get("/metrics").text
    assert 'evalfleet_producer_shed_total{metric="rag_qa",policy="drop_new",segment="app=' \
        in metrics
    assert 'evalfleet_producer_records_total{outcome="accepted",source="ingest"}' in metrics


def test_config_changes_apply_without_a_restart(
    make_client: MakeClient, tmp_path: Path, redis_client: redis.Redis,
) -> None:
    client = make_client(config="metrics: {rag_qa: {rate: 0.0}}")
    assert post(client, record(1)).json()["sampled_out"] == 1
    config = tmp_path / "sampling.yaml"
    config.write_text("metrics: {rag_qa: {rate: 1.0}}")
    stat = config.stat()
    os.utime(config, ns=(stat.st_atime_ns, stat.st_mtime_ns + 5_000_000_000))
    time.sleep(1.1)  # the file is looked at no more than once a second
    assert post(client, record(2)).json()["accepted"] == 1


def test_probes_metrics_and_spec(make_client: MakeClient) -> None:
    client = make_client()
    assert client.get("/healthz").status_code == 200
    assert client.get("/readyz").json() == {"status": "ready"}
    assert client.get("/metrics").headers["content-type"].startswith("text/plain")
    spec = client.get("/openapi.json").json()
    validate(spec)
