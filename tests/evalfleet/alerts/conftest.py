"""Fixtures of the alert tests: an HTTP receiver, rules files, engines on the test database."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from evalfleet.alerts import AlertEngine, open_alert_engine
from evalfleet.core.settings import Settings
from evalfleet.store import SqlStore, migrate, open_store
from tests.evalfleet.alerts.receiver import Receiver


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    """A real HTTP receiver on a free port."""
    server = Receiver()
    yield server
    server.stop()


def write_rules(path: Path, *rules: dict[str, Any], **document: Any) -> Path:
    """A rules file with these rules (rules default to rag_qa faithfulness, tested with
    the fixed-sample tests most alert tests are about: ``test: sequential`` to change)."""
    base = {"metric": "rag_qa", "score": "faithfulness", "test": "fixed"}
    document["rules"] = [{**base, **rule} for rule in rules]
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    return path


@pytest.fixture(params=["postgres"])
def alert_database(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """The database alert engines run on: Postgres; tests that also run on the embedded
    SQLite store say so with ``@pytest.mark.parametrize("alert_database", [...],
    indirect=True)``."""
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'alerts.db'}"
        store = open_store(url)
        migrate(store.engine)
        store.close()
        return url
    return str(request.getfixturevalue("database_url"))


#: Both backends, for ``indirect`` parametrisation of ``alert_database``.
BOTH_DATABASES = ["postgres", "sqlite"]


@pytest.fixture
def alert_store(alert_database: str) -> Iterator[SqlStore]:
    """A store on the alert engines' database, as ``alerts show`` and the page read it."""
    store = open_store(alert_database, pool_size=1)
    yield store
    store.close()


@pytest.fixture
def open_engine(alert_database: str, receiver: Receiver,
                tmp_path: Path) -> Iterator[Callable[..., AlertEngine]]:
    """Open alert engines on the test database that notify ``receiver`` as Alertmanager."""
    database_url = alert_database
    engines: list[AlertEngine] = []

    def open_one(*rules: dict[str, Any], **overrides: Any) -> AlertEngine:
        document = overrides.pop("document", {})
        path = write_rules(tmp_path / f"rules-{len(engines)}.yaml", *rules, **document)
        settings = Settings(
            database_url=database_url, alert_rules_file=path, alertmanager_url=receiver.url,
            alert_retry_base_s=0.01, alert_retry_max_s=0.05, **overrides,
        )
        engine = open_alert_engine(settings)
        engines.append(engine)
        return engine

    yield open_one
    for engine in engines:
        engine.close()
