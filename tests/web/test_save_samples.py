""""Save these samples" from the alert page: reviewers only, CSRF-signed, escaped."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
from pydantic import SecretStr

from evalfleet.alerts import open_alert_engine
from evalfleet.cli.ui import build_ui_app
from evalfleet.core.settings import Settings
from evalfleet.store import open_store
from evalfleet.store.queries.datasets import Datasets
from evalfleet.store.queries.review_queue import ReviewQueue
from tests.evalfleet.alerts import stream
from tests.evalfleet.alerts.conftest import write_rules
from tests.evalfleet.alerts.notifier.test_evidence import plant_worst
from tests.evalfleet.alerts.test_engine import DROP_RULE, MINUTE, T0, history, run

READ_ONLY = "read-only-token-123"
SEGMENT = "app=support-bot"


@pytest.fixture
def site(alert_database: str, tmp_path: Path, serve: Callable[..., Any]) -> Any:
    """A fired rule with hostile worst samples, a reviewer, and the page with a token."""
    rules = write_rules(tmp_path / "rules.yaml", DROP_RULE)
    settings = Settings(database_url=alert_database, alert_rules_file=rules,
                        data_dir=tmp_path, review_secret=SecretStr("s3cret-for-forms"))
    engine = open_alert_engine(settings, deliver=False)
    drop = stream.steady(start=T0, minutes=20, per_minute=20, mean=0.70, seed=2,
                         attributes={"app": "support-bot"})
    stream.write(engine.store.engine, history(T0) + drop)
    plant_worst(alert_database)
    run(engine, T0 - 5 * MINUTE, 16)
    engine.close()
    store = open_store(alert_database)
    served = serve(build_ui_app(settings, token=READ_ONLY))
    served.reviewer = ReviewQueue(store).add_reviewer("ann", now=datetime.now(UTC))
    served.datasets = Datasets(store)
    yield served
    store.close()


def csrf_of(html: str) -> str:
    return html.split('name="csrf" value="', 1)[1].split('"', 1)[0]


@pytest.mark.parametrize("alert_database", ["postgres"], indirect=True)
def test_a_reviewer_saves_an_alerts_worst_samples(site: Any) -> None:
    url = site.url
    alert = httpx.get(f"{url}/alerts/faithfulness_drop", params={"segment": SEGMENT},
                      headers={"Authorization": f"Bearer {READ_ONLY}"}, timeout=10)
    assert 'action="/review/save-samples"' in alert.text and 'method="get"' in alert.text
    wanted = {"rule": "faithfulness_drop", "segment": SEGMENT, "name": "drop-1", "worst": "3"}

    # Without a reviewer's token: the sign-in form, nothing saved; the read-only token and
    # a form without its CSRF token cannot post.
    assert "login-form" in httpx.get(f"{url}/review/save-samples", params=wanted,
                                     timeout=10).text
    refused = httpx.post(f"{url}/review/save-samples", data=wanted, timeout=10,
                         headers={"Authorization": f"Bearer {READ_ONLY}"},
                         cookies={"evalfleet_ui": READ_ONLY})
    assert refused.status_code == 403
    reviewer = {"evalfleet_reviewer": site.reviewer}
    forged = httpx.post(f"{url}/review/save-samples", data=wanted, cookies=reviewer,
                        timeout=10)
    assert forged.status_code == 403 and "CSRF" in forged.text
    assert site.datasets.catalog() == []

    confirm = httpx.get(f"{url}/review/save-samples", params=wanted, cookies=reviewer,
                        timeout=10)
    assert confirm.status_code == 200 and "The worst 3 samples of" in confirm.text
    form = {**wanted, "csrf": csrf_of(confirm.text)}
    saved = httpx.post(f"{url}/review/save-samples", data=form, cookies=reviewer, timeout=10)
    assert saved.status_code == 200 and "Saved as drop-1 version 1 (3 samples)" in saved.text
    items = list(site.datasets.items("drop-1"))
    assert [item.sample_id for item in items] == ["worst-1", "worst-2", "worst-0"]
    assert "saved by ann from the page" in site.datasets.versions("drop-1")[0].note
    again = httpx.post(f"{url}/review/save-samples", data=form, cookies=reviewer, timeout=10)
    assert "already holds these samples" in again.text

    # Hostile fields are refused by name, and shown escaped.
    for field, value in (("name", "<script>x</script>"), ("worst", "0"),
                         ("segment", "app=<b>x</b>"), ("rule", "<i>none</i>")):
        bad = httpx.post(f"{url}/review/save-samples", data={**form, field: value},
                         cookies=reviewer, timeout=10)
        assert bad.status_code == 400 and f"{field}:" in bad.text, (field, bad.text)
        assert "<script>" not in bad.text and "<b>x" not in bad.text and "<i>" not in bad.text
    assert [v.version for v in site.datasets.versions("drop-1")] == [1]
