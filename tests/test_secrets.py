"""No credential of any URL setting appears anywhere: repr, logs of a failing worker
and a failing command, stored errors, Redis keys, metrics."""

from __future__ import annotations

import socket
from collections.abc import Callable
from urllib.parse import urlsplit, urlunsplit

import httpx
import redis
from click.testing import CliRunner

from evalfleet.cli import main
from evalfleet.core.log import scrub
from evalfleet.core.message import new_job
from evalfleet.core.sample import parse_sample
from evalfleet.core.settings import Settings
from evalfleet.judgesim import RunningSim
from evalfleet.store import VerdictStore
from producers.enqueuer import Enqueuer
from tests.helpers import WorkerProcess, wait_until

SECRETS = {name: f"Pw-{name}-7731" for name in Settings.url_fields()}


def with_password(url: str, password: str, *, user: str = "u") -> str:
    parts = urlsplit(url)
    host = parts.netloc.rsplit("@", 1)[-1]
    return urlunsplit(parts._replace(netloc=f"{user}:{password}@{host}"))


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def leaked(text: str) -> list[str]:
    return [name for name, secret in SECRETS.items() if secret in text]


def test_every_url_setting_is_masked_in_repr_and_listed_for_scrubbing() -> None:
    urls = {name: with_password("http://h:1/x", secret) for name, secret in SECRETS.items()}
    settings = Settings(**urls)  # type: ignore[arg-type]
    assert leaked(repr(settings)) == [] and leaked(str(settings)) == []
    assert set(SECRETS.values()) <= set(settings.secret_values())
    assert leaked(scrub(" ".join(urls.values()), [])) == []


def test_a_token_in_a_query_string_is_a_secret() -> None:
    settings = Settings(openai_base_url="https://judge/v1?api_key=Qk-991&region=eu")
    assert "Qk-991" not in repr(settings) and "Qk-991" in settings.secret_values()


def test_a_failing_worker_leaks_no_credential(
    settings: Settings, sim: RunningSim, store: VerdictStore, redis_url: str,
    start_worker: Callable[..., WorkerProcess],
) -> None:
    metrics_port = free_port()
    # Postgres trusts local connections, Redis 6 takes any password for a user without
    # one and the simulator ignores credentials, so everything works with a password in
    # its URL; then the judge fails every call, and the jobs end as dead letters.
    hostile = settings.model_copy(update={
        "database_url": with_password(settings.store.database_url or "", SECRETS["database_url"],
                                      user="postgres"),
        "openai_base_url": with_password(sim.base_url, SECRETS["openai_base_url"]),
        "shared_redis_url": with_password(redis_url, SECRETS["shared_redis_url"], user=""),
        "alertmanager_url": with_password("http://127.0.0.1:9/", SECRETS["alertmanager_url"]),
        "judge_probe_url": with_password(sim.base_url + "/models",
                                         SECRETS["judge_probe_url"]),
        "judge_rpm": 1000.0, "max_attempts": 2, "metrics_port": metrics_port,
    })
    sim.script([{"match": "", "replies": [{"status": 503}], "then": "repeat_last"}])
    worker = start_worker(hostile, queues=["rag_qa"])
    enqueuer = Enqueuer(settings)
    try:
        enqueuer.send_many([new_job("rag_qa", parse_sample({"id": f"s-{n}", "input": "q",
                                                            "output": "a", "context": ["c"]}))
                            for n in range(3)])
    finally:
        enqueuer.close()
    wait_until(lambda: store.counts().dead_letters == 3, timeout_s=90, what="three dead letters")
    scraped = httpx.get(f"http://127.0.0.1:{metrics_port}/metrics", timeout=5).text
    worker.stop()
    log = worker.log_path.read_text(errors="replace")
    assert "503" in log  # it did fail, and said so
    assert leaked(log) == []
    assert leaked(scraped) == []
    stored = " ".join(f"{letter.error} {letter.history} {letter.payload}"
                      for letter in store.iter_dead_letters())
    stored += " ".join(f"{v.error} {v.raw_output}" for v in store.iter_verdicts())
    assert leaked(stored) == []
    keys = b" ".join(redis.Redis.from_url(redis_url).keys("*")).decode(errors="replace")
    assert leaked(keys) == []


def test_a_failing_command_leaks_no_credential(settings: Settings) -> None:
    broken = settings.model_copy(update={
        "broker_url": with_password(f"redis://127.0.0.1:{free_port()}/0",
                                    SECRETS["broker_url"], user=""),
        "database_url": with_password(f"postgresql://127.0.0.1:{free_port()}/x",
                                      SECRETS["database_url"]),
    })
    for command in (["status"], ["export"], ["dead-letters", "list"]):
        result = CliRunner().invoke(main, command, env=broken.as_environment())
        assert result.exit_code != 0, command
        assert leaked(result.output) == [], (command, result.output[-500:])
        assert leaked(str(result.exception or "")) == [], command
