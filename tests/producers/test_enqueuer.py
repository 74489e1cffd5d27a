"""Publishing: one by one and in Redis pipelines, delays, and a down broker."""

from __future__ import annotations

import base64
import json
import time
from datetime import datetime
from pathlib import Path

import pytest
import redis

from evalfleet.core.errors import BrokerUnavailable, InvalidMetricSpec
from evalfleet.core.message import decode_job, new_job
from evalfleet.core.settings import Settings
from producers.enqueuer import Enqueuer
from tests.producers.builders import producer_settings, queued, sample


def test_send_many_publishes_every_job_in_order(psettings: Settings,
                                                redis_client: redis.Redis) -> None:
    enqueuer = Enqueuer(psettings, batch_size=7)
    jobs = [new_job("rag_qa", sample(n)) for n in range(50)]
    enqueuer.send_many([*jobs, new_job("bbh_match", sample(99))])
    enqueuer.close()
    messages = queued(redis_client, "rag_qa")
    assert [decode_job(job).sample for job, _ in messages] == [j.sample for j in jobs]
    assert all(headers["task"] == "evalfleet.evaluate" for _, headers in messages)
    assert all(headers["eta"] is None for _, headers in messages)
    assert len(queued(redis_client, "bbh_match")) == 1


def test_a_check_metrics_messages_carry_the_check_batch_size(psettings: Settings,
                                                              redis_client: redis.Redis) -> None:
    settings = psettings.model_copy(update={"batch_size": 16, "check_batch_size": 64})
    enqueuer = Enqueuer(settings, check_metrics={"bbh_match"})
    enqueuer.send_many([new_job(metric, sample(n)) for n in range(100)
                        for metric in ("rag_qa", "bbh_match")])
    enqueuer.close()
    assert message_sizes(redis_client, "rag_qa") == [16] * 6 + [4]
    assert message_sizes(redis_client, "bbh_match") == [64, 36]
    assert [job["sample"]["id"] for job, _ in queued(redis_client, "bbh_match")] == [
        sample(n).id for n in range(100)]


def test_every_enqueuer_sizes_a_configured_check_metrics_messages(
        psettings: Settings, redis_client: redis.Redis, tmp_path: Path) -> None:
    # The beat, dead-letter replay, calibration, demo and chaos build their Enqueuer
    # from the settings alone: the metric files say which metrics are checks.
    metrics_dir = tmp_path / "metrics"
    metrics_dir.mkdir()
    (metrics_dir / "contract.yaml").write_text(
        "name: contract\nkind: check\nchecks:\n  valid_json: {check: json_valid}\n")
    settings = psettings.model_copy(update={"batch_size": 16, "check_batch_size": 64,
                                            "metrics_dir": metrics_dir})
    enqueuer = Enqueuer(settings)
    enqueuer.send_many([new_job(metric, sample(n)) for n in range(70)
                        for metric in ("rag_qa", "contract")])
    enqueuer.close()
    assert message_sizes(redis_client, "contract") == [64, 6]
    assert message_sizes(redis_client, "rag_qa") == [16] * 4 + [6]


def test_an_enqueuer_refuses_an_invalid_metrics_dir(psettings: Settings,
                                                    tmp_path: Path) -> None:
    settings = psettings.model_copy(update={"metrics_dir": tmp_path / "absent"})
    with pytest.raises(InvalidMetricSpec, match="metrics directory does not exist"):
        Enqueuer(settings)


def message_sizes(client: redis.Redis, metric: str) -> list[int]:
    """The jobs of each message waiting in ``eval.<metric>``, oldest first."""
    bodies = [json.loads(base64.b64decode(json.loads(raw)["body"]))
              for raw in reversed(client.lrange(f"eval.{metric}", 0, -1))]
    return [len(args[0]["jobs"]) for args, _, _ in bodies]


def test_delays_per_metric_become_an_eta(psettings: Settings, redis_client: redis.Redis) -> None:
    enqueuer = Enqueuer(psettings)
    before = time.time()
    enqueuer.send_many([new_job("rag_qa", sample(1)), new_job("bbh_match", sample(2))],
                       delays_s={"rag_qa": 30})
    enqueuer.send(new_job("context_precision", sample(3)), delay_s=5)
    enqueuer.close()
    (_, headers), = queued(redis_client, "rag_qa")
    assert datetime.fromisoformat(headers["eta"]).timestamp() == pytest.approx(before + 30, abs=2)
    assert queued(redis_client, "bbh_match")[0][1]["eta"] is None
    assert queued(redis_client, "context_precision")[0][1]["eta"] is not None


def test_a_down_broker_is_broker_unavailable_quickly(tmp_path: Path) -> None:
    enqueuer = Enqueuer(producer_settings("redis://127.0.0.1:1/0", tmp_path))
    started = time.monotonic()
    with pytest.raises(BrokerUnavailable, match="cannot publish"):
        enqueuer.send_many([new_job("rag_qa", sample(1))])
    with pytest.raises(BrokerUnavailable):
        enqueuer.send(new_job("rag_qa", sample(1)))
    with pytest.raises(BrokerUnavailable, match="unreachable"):
        enqueuer.ping()
    assert time.monotonic() - started < 10
    enqueuer.close()


def test_ping(psettings: Settings) -> None:
    enqueuer = Enqueuer(psettings)
    enqueuer.ping()
    enqueuer.close()
