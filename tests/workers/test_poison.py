"""Poison messages through a real worker, Postgres and Redis: a job the database
cannot hold becomes one dead letter, the jobs beside it become verdicts, and no job
is judged twice however often its message comes round."""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from typing import Any

from evalfleet.core.message import Job, new_job
from evalfleet.core.sample import parse_sample
from evalfleet.core.settings import Settings
from evalfleet.judgesim import RunningSim
from evalfleet.store import VerdictStore
from evalfleet.store.storable import decode_original
from producers.enqueuer import Enqueuer
from tests.brokers import broker_idle
from tests.helpers import WorkerProcess, wait_until
from tests.workers.verdicts.test_hostile_replies import SHAPES


def sample(sample_id: str, **changes: Any) -> dict[str, Any]:
    data = {"id": sample_id, "input": "How long is the return window?", "output": "30 days.",
            "context": ["Returns are accepted within 30 days."], "reference": "30 days",
            "attributes": {"app": "support-bot"}}
    return {**data, **changes}


def jobs() -> list[Job]:
    samples = [
        sample("good-1"),
        sample("bad\x00id"),  # the verdict's key: no verdict row can hold it
        sample("good-2", attributes={"app": "nul\x00here"}),  # escaped when stored
        sample("good-3", fields={"base_price": float("inf")}),
    ]
    return [new_job("rag_qa", parse_sample(data)) for data in samples]


def settled(store: VerdictStore) -> int:
    counts = store.counts()
    return counts.verdicts + counts.dead_letters


def test_an_unstorable_job_is_one_dead_letter_and_its_neighbours_are_stored(
    settings: Settings, sim: RunningSim, store: VerdictStore,
    start_worker: Callable[..., WorkerProcess],
) -> None:
    batch = jobs()
    worker = start_worker(settings.model_copy(update={"batch_size": 16}), queues=["rag_qa"])
    enqueuer = Enqueuer(settings)
    try:
        enqueuer.send_many(batch)
        wait_until(lambda: settled(store) == 4 and broker_idle(settings, worker),
                   timeout_s=60, what="three verdicts and one dead letter")
        enqueuer.send_many(batch)  # the same message again, as a redelivery would
        wait_until(lambda: broker_idle(settings, worker), timeout_s=60, what="an idle queue")
    finally:
        enqueuer.close()
    verdicts = {verdict.key.sample_id: verdict for verdict in store.iter_verdicts()}
    assert sorted(verdicts) == ["good-1", "good-2", "good-3"]
    assert all(verdict.status == "ok" for verdict in verdicts.values())
    assert verdicts["good-2"].attributes == {"app": "nul\\u0000here"}
    (letter,) = store.iter_dead_letters()
    assert letter.error_class == "unstorable"
    assert "sample_id" in letter.error
    assert letter.sample_id == "bad\\u0000id"
    original = letter.payload["unstorable_original"]
    assert decode_original(original["base64"])["sample"]["id"] == "bad\x00id"
    assert base64.b64decode(original["base64"])  # plain base64
    assert json.loads(json.dumps(letter.payload))["sample"]["id"] == "bad\\u0000id"
    # One judge call per job, across both deliveries.
    assert sim.stats()["requests"] == len(batch)
    log = worker.log_path.read_text(errors="replace")
    assert "Traceback" not in log and "internal_error" not in log


def test_hostile_replies_each_end_as_a_verdict_and_the_worker_stays_up(
    settings: Settings, sim: RunningSim, store: VerdictStore,
    start_worker: Callable[..., WorkerProcess],
) -> None:
    valid = json.dumps({"faithfulness": 0.5, "context_relevance": 0.5,
                        "answer_relevance": 0.5, "semantic_similarity": 0.5,
                        "evaluation_status": "success"})
    replies = {**SHAPES, "valid with nul": valid[:-1] + ', "note": "a\\u0000b\x00"}',
               "five megabytes": "x" * 5_000_000}
    sim.script([{"match": f"case {name}", "replies": [{"content": content}],
                 "then": "repeat_last"} for name, content in replies.items()])
    worker = start_worker(settings, queues=["rag_qa"])
    enqueuer = Enqueuer(settings)
    try:
        enqueuer.send_many([new_job("rag_qa", parse_sample(sample(f"r-{n}", input=f"case {name}")))
                            for n, name in enumerate(replies)])
    finally:
        enqueuer.close()
    wait_until(lambda: store.counts().verdicts == len(replies) and broker_idle(settings, worker),
               timeout_s=120, what="a verdict per reply")
    assert worker.process.poll() is None
    assert store.counts().dead_letters == 0
    by_input = {verdict.key.sample_id: verdict for verdict in store.iter_verdicts()}
    nul = by_input[f"r-{list(replies).index('valid with nul')}"]
    assert nul.status == "ok" and "\\u0000" in (nul.raw_output or "")
    big = by_input[f"r-{list(replies).index('five megabytes')}"]
    assert (big.status, big.error_class) == ("failed", "truncated")
