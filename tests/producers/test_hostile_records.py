"""Hostile records through every producer edge: each is rejected naming its record and
field, the good records around it are published, nothing else happens."""

from __future__ import annotations

import json
import threading
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import redis
import uvicorn
from click.testing import CliRunner
from starlette.testclient import TestClient

from evalfleet.cli import main
from evalfleet.core.errors import InvalidSample
from evalfleet.core.settings import Settings
from evalfleet.judgesim import RunningSim
from evalfleet.sdk import Submitter
from evalfleet.store import VerdictStore
from producers.follow import follow
from producers.ingest import create_app
from producers.offsets import OffsetStore
from producers.runtime import ProducerRuntime
from producers.tail import Tail
from tests.helpers import WorkerProcess, wait_until
from tests.producers.builders import queued_ids, record
from tests.producers.hostile import Hostile, hostile_records

HOSTILE = hostile_records(0)


def good(n: int) -> str:
    return json.dumps(record(n, id=f"good-{n:03d}"))


def interleaved() -> tuple[list[str], list[str]]:
    """Lines alternating good and hostile records, and the good ids."""
    lines, ids = [], []
    for n, hostile in enumerate(HOSTILE):
        lines += [good(n), hostile.text]
        ids.append(f"good-{n:03d}")
    lines.append(good(len(HOSTILE)))
    ids.append(f"good-{len(HOSTILE):03d}")
    return lines, ids


def assert_named(hostile: Hostile, *, message: str, record_name: str,
                 field: str | None) -> None:
    assert record_name in message, (hostile.name, message)
    if hostile.field is None:
        assert field is None, (hostile.name, field)
    else:
        assert field is not None and field.startswith(hostile.field), (hostile.name, field)


def test_produce_rejects_each_and_publishes_the_rest(
    psettings: Settings, redis_client: redis.Redis, tmp_path: Path,
) -> None:
    lines, ids = interleaved()
    path = tmp_path / "in.jsonl"
    path.write_bytes(("\n".join(lines) + "\n").encode())
    result = CliRunner().invoke(main, ["produce", str(path), "--metric", "rag_qa",
                                       "--sample-rate", "1"],
                                env=psettings.as_environment())
    assert "Traceback" not in result.output
    assert sorted(queued_ids(redis_client, "rag_qa")) == ids
    for n, hostile in enumerate(HOSTILE):
        line_no = 2 * n + 2
        mentions = [text for text in result.output.splitlines() if f"line {line_no}," in text
                    or f"line {line_no}:" in text]
        assert mentions, (hostile.name, result.output[-2000:])
        if hostile.field is not None:
            assert f"field '{hostile.field}" in mentions[0], (hostile.name, mentions[0])


def test_ingest_rejects_each_by_index_and_accepts_the_rest(
    psettings: Settings, redis_client: redis.Redis,
) -> None:
    lines, ids = interleaved()
    runtime = ProducerRuntime(psettings)
    try:
        client = TestClient(create_app(runtime, tokens=None, metrics=["rag_qa"]))
        body = '{"samples": [' + ",".join(lines) + "]}"
        response = client.post("/v1/samples", content=body.encode(),
                               headers={"Content-Type": "application/json"})
    finally:
        runtime.close()
    assert response.status_code == 422, response.text[:500]
    report = response.json()
    assert (report["accepted"], report["rejected"]) == (len(ids), len(HOSTILE))
    by_index = {item["index"]: item for item in report["rejections"]}
    for n, hostile in enumerate(HOSTILE):
        item = by_index[2 * n + 1]
        assert_named(hostile, message=item["message"], record_name=f"samples[{2 * n + 1}]",
                     field=item["field"])
    assert sorted(queued_ids(redis_client, "rag_qa")) == ids


def test_sdk_rejects_each_and_publishes_the_rest(
    psettings: Settings, redis_client: redis.Redis,
) -> None:
    submitter = Submitter(psettings, metrics=["rag_qa"])
    ids = []
    for n, hostile in enumerate(HOSTILE):
        submitter.submit(json.loads(good(n)))
        ids.append(f"good-{n:03d}")
        assert submitter.submit(hostile.value) in ("queued", "rejected"), hostile.name
    assert submitter.flush(timeout_s=30)
    stats = submitter.stats()
    submitter.close()
    assert stats.rejected == len(HOSTILE) and stats.accepted == len(ids)
    assert sorted(queued_ids(redis_client, "rag_qa")) == ids


def test_follow_moves_past_every_hostile_line(
    psettings: Settings, redis_client: redis.Redis, tmp_path: Path,
) -> None:
    lines, ids = interleaved()
    lines.insert(-1, '{"id": "huge", "input": "' + "x" * 3_000_000 + '"}')
    log, offsets = tmp_path / "app.log", tmp_path / "offsets.json"
    log.write_bytes(("\n".join(lines) + "\n").encode())
    runtime = ProducerRuntime(psettings)
    store = OffsetStore(offsets)
    tail = Tail(log, start=store.load(), max_line_bytes=2_000_000)
    errors: list[InvalidSample] = []
    stop = threading.Event()
    thread = threading.Thread(target=follow, kwargs={
        "tail": tail, "pipeline": runtime.pipeline(metrics=["rag_qa"], rate=1.0,
                                                   source="follow"),
        "offsets": store, "batch_size": 4, "stop": stop, "on_error": errors.append,
        "poll_interval_s": 0.02})
    thread.start()
    try:
        wait_until(lambda: saved_line(store) == len(lines), timeout_s=30,
                   what="the saved position at the last line")
    finally:
        stop.set()
        thread.join(timeout=30)
        tail.close()
        runtime.close()
    assert sorted(queued_ids(redis_client, "rag_qa")) == ids
    assert len(errors) == len(HOSTILE) + 1
    assert {error.record for error in errors} == {
        *(f"app.log line {2 * n + 2}" for n in range(len(HOSTILE))),
        f"app.log line {len(lines) - 1}"}
    assert any("too long to read" in str(error) for error in errors)


def saved_line(store: OffsetStore) -> int:
    position = store.load()
    return position.line if position is not None else 0


@pytest.fixture
def ingest_url(psettings: Settings) -> Iterator[str]:
    settings = psettings.model_copy(update={"ingest_max_request_bytes": 1024})
    runtime = ProducerRuntime(settings)
    config = uvicorn.Config(create_app(runtime, tokens=None, metrics=["rag_qa"]),
                            host="127.0.0.1", port=0, log_level="warning")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    wait_until(lambda: server.started, timeout_s=20, what="the ingest server")
    port = server.servers[0].sockets[0].getsockname()[1]
    yield f"http://127.0.0.1:{port}/v1/samples"
    server.should_exit = True
    thread.join(timeout=20)
    runtime.close()


def test_a_urllib_client_sees_413_for_a_large_body(ingest_url: str) -> None:
    body = json.dumps({"samples": [record(n) for n in range(20_000)]}).encode()  # 4 MB
    request = urllib.request.Request(ingest_url, data=body, method="POST",
                                     headers={"Content-Type": "application/json"})
    with pytest.raises(urllib.error.HTTPError) as raised:
        urllib.request.urlopen(request, timeout=20)
    assert raised.value.code == 413
    assert "over the limit" in raised.value.read().decode()


def test_the_good_records_around_hostile_ones_become_verdicts(
    settings: Settings, sim: RunningSim, store: VerdictStore, tmp_path: Path,
    start_worker: Callable[..., WorkerProcess],
) -> None:
    lines, ids = interleaved()
    path = tmp_path / "in.jsonl"
    path.write_bytes(("\n".join(lines) + "\n").encode())
    result = CliRunner().invoke(main, ["produce", str(path), "--metric", "rag_qa",
                                       "--sample-rate", "1"], env=settings.as_environment())
    assert f"jobs enqueued: rag_qa {len(ids)}" in result.output, result.output[-1000:]
    start_worker(settings, queues=["rag_qa"])
    wait_until(lambda: store.counts().verdicts == len(ids), timeout_s=60,
               what="a verdict per good record")
    assert sorted(verdict.key.sample_id for verdict in store.iter_verdicts()) == ids
    assert store.counts().dead_letters == 0
    assert sim.stats()["requests"] == len(ids)


def test_a_sample_object_built_in_the_application_is_checked_too(
    psettings: Settings, redis_client: redis.Redis,
) -> None:
    from evalfleet.core.sample import Sample

    submitter = Submitter(psettings, metrics=["rag_qa"])
    built = Sample.model_construct(**{**json.loads(good(0)), "input": "nul\x00"})
    submitter.submit(built)
    submitter.submit(json.loads(good(1)))
    assert submitter.flush(timeout_s=30)
    stats = submitter.stats()
    submitter.close()
    assert (stats.rejected, stats.accepted) == (1, 1)
    assert queued_ids(redis_client, "rag_qa") == ["good-001"]


def test_a_file_line_over_the_limit_is_rejected_by_number_and_the_rest_go_on(
    psettings: Settings, redis_client: redis.Redis, tmp_path: Path,
) -> None:
    from producers.pipeline import run_lines
    from producers.source import read_lines

    path = tmp_path / "in.jsonl"
    path.write_bytes(f"{good(0)}\n".encode() + b'{"id": "' + b"x" * 50_000 + b'"}\n'
                     + b"y" * 30_000 + f"\n{good(1)}\n".encode())
    runtime = ProducerRuntime(psettings)
    errors: list[InvalidSample] = []
    try:
        stats = run_lines(read_lines(str(path), max_line_bytes=10_000),
                          pipeline=runtime.pipeline(metrics=["rag_qa"], rate=1.0,
                                                    source="file"),
                          batch_size=10, on_error=errors.append)
    finally:
        runtime.close()
    assert [(error.record, "too long to read" in error.reason) for error in errors] == [
        ("line 2", True), ("line 3", True)]
    assert (stats.lines, stats.rejected) == (4, 2)
    assert sorted(queued_ids(redis_client, "rag_qa")) == ["good-000", "good-001"]


BODIES = {
    "deep single object": b'{"id": "d", "fields": {"x": ' + b"[" * 5_000 + b"]" * 5_000 + b"}}",
    "deep bare array": b"[" * 100_000,
    "deep object chain": b'{"a":' * 50_000,
    "not utf-8": b'{"id": "\xff\xfe"}',
    "surrogate key": b'{"id": "x", "attributes": {"\\ud800": "v"}}',
    "surrogate id in a batch": b'[{"id": "\\udfff"}, {"id": "ok"}]',
    "huge number": b'{"id": "x", "fields": {"n": ' + b"9" * 5_000 + b"}}",
    "nan": b'{"id": "x", "fields": {"n": NaN}}',
    "nul everywhere": b'{"id": "\\u0000", "\\u0000": "\\u0000"}',
    "escaped quotes unclosed": b'{"id": "' + b'\\"' * 100_000 + b"\\",
    "samples not a list": b'{"samples": {"id": "x"}}',
    "empty": b"",
}


@pytest.mark.parametrize("body", list(BODIES.values()), ids=list(BODIES))
def test_ingest_answers_every_hostile_body_without_a_500(psettings: Settings,
                                                          body: bytes) -> None:
    runtime = ProducerRuntime(psettings)
    try:
        client = TestClient(create_app(runtime, tokens=None, metrics=["rag_qa"]),
                            raise_server_exceptions=False)
        response = client.post("/v1/samples", content=body,
                               headers={"Content-Type": "application/json"})
    finally:
        runtime.close()
    assert response.status_code in (202, 400, 413, 422), response.text[:300]
    assert "detail" in response.json() or "received" in response.json()
