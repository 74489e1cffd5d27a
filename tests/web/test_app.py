"""The web page over a store with hostile samples: escaped, scriptless, token-guarded."""

from __future__ import annotations

import html
import json
import re
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import select, update

from evalfleet.alerts import open_alert_engine
from evalfleet.cli.ui import build_ui_app, is_loopback
from evalfleet.core.durations import format_moment
from evalfleet.core.estimator import LAM_MEANING
from evalfleet.core.settings import Settings
from evalfleet.core.simulator import SIMULATOR_NAME
from evalfleet.store import DeadLetter, VerdictKey, migrate, open_store
from evalfleet.store.schema import alert_states
from evalfleet.web.app import _environment
from tests.evalfleet.alerts import stream
from tests.evalfleet.alerts.conftest import BOTH_DATABASES, write_rules
from tests.evalfleet.alerts.notifier.test_evidence import plant_worst
from tests.evalfleet.alerts.test_engine import DROP_RULE, MINUTE, T0, history, run
from tests.evalfleet.store.test_sql import record

MARKUP = '<script>alert(1)</script><img src=x onerror="alert(2)"> javascript:alert(3)'


@pytest.fixture
def site(alert_database: str, tmp_path: Path, serve: Callable[..., Any]) -> Any:
    """A fired rule with hostile worst samples and a dead letter, and its page."""
    rules = write_rules(tmp_path / "rules.yaml", DROP_RULE)
    settings = Settings(database_url=alert_database, alert_rules_file=rules,
                        openai_api_key="sk-secret-123", data_dir=tmp_path)
    engine = open_alert_engine(settings, deliver=False)
    drop = stream.steady(start=T0, minutes=20, per_minute=20, mean=0.70, seed=2,
                         attributes={"app": "support-bot"})
    stream.write(engine.store.engine, history(T0) + drop)
    plant_worst(alert_database)
    run(engine, T0 - 5 * MINUTE, 16)
    engine.close()
    store = open_store(alert_database)
    store.save(dead_letters=[DeadLetter(
        sample_id=MARKUP, metric="rag_qa", error_class="judge_rejected",
        error="HTTP 400 with key sk-secret-123 " + MARKUP, attempts=1,
        payload={"sample": {"output": MARKUP}}, created_at=T0)], owner="t")
    store.close()
    return serve(build_ui_app(settings, token=None))


def get(site: Any, path: str, **kwargs: Any) -> httpx.Response:
    return httpx.get(site.url + path, timeout=10, **kwargs)


@pytest.mark.parametrize("alert_database", BOTH_DATABASES, indirect=True)
def test_pages_escape_hostile_text_and_allow_no_script(site: Any) -> None:
    overview = get(site, "/")
    assert overview.status_code == 200
    assert 'class="row-firing"' in overview.text and "app=support-bot" in overview.text
    alert = get(site, "/alerts/faithfulness_drop", params={"segment": "app=support-bot"})
    assert alert.status_code == 200
    assert "&lt;!channel&gt;" in alert.text and "<!channel>" not in alert.text
    # 'label this segment' links to the review page with the segment to take first.
    assert '<a href="/review?segment=app%3Dsupport-bot" id="label-segment">' in alert.text
    verdict_ids = re.findall(r'href="/verdicts/(\d+)"', alert.text)
    assert len(verdict_ids) >= 3
    for response in (overview, alert, get(site, f"/verdicts/{verdict_ids[0]}"),
                     get(site, "/dead-letters"), get(site, "/health"),
                     get(site, "/rules/faithfulness_drop/trend",
                         params={"segment": "app=support-bot", "range": "1h"})):
        assert response.status_code == 200, response.text[:500]
        csp = response.headers["content-security-policy"]
        assert "default-src 'none'" in csp and "script-src" not in csp
        assert response.headers["x-content-type-options"] == "nosniff"
        body = response.text
        assert "<script" not in body.lower() and "<img" not in body.lower()
        assert 'href="javascript' not in body and "onerror=\"" not in body
        assert "sk-secret-123" not in body
    letters = get(site, "/dead-letters").text
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in letters and "***" in letters


@pytest.mark.parametrize("alert_database", ["sqlite"], indirect=True)
def test_unknown_things_are_404(site: Any) -> None:
    assert get(site, "/alerts/nope").status_code == 404
    assert get(site, "/alerts/faithfulness_drop", params={"segment": "route=/x"}).status_code \
        == 404
    assert get(site, "/verdicts/999999").status_code == 404
    assert get(site, "/nothing").status_code == 404


def test_a_token_guards_the_page(tmp_path: Path, serve: Callable[..., Any]) -> None:
    settings = Settings(database_url=f"sqlite:///{tmp_path / 'ui.db'}", data_dir=tmp_path)
    store = open_store(settings.resolved_database_url())
    migrate(store.engine)
    store.close()
    site = serve(build_ui_app(settings, token="t0ken"))
    assert get(site, "/").status_code == 401
    assert get(site, "/", headers={"authorization": "Bearer wrong"}).status_code == 401
    assert get(site, "/", headers={"authorization": "Bearer t0ken"}).status_code == 200
    with httpx.Client(base_url=site.url, timeout=10, follow_redirects=True) as client:
        first = client.get("/health", params={"token": "t0ken"})  # follows the redirect
        assert first.status_code == 200 and "token" not in str(first.url)
        assert client.get("/").status_code == 200  # the cookie carries it now


@pytest.mark.parametrize("host,loopback", [("127.0.0.1", True), ("::1", True),
                                           ("localhost", True), ("0.0.0.0", False),
                                           ("10.0.0.5", False), ("example.com", False)])
def test_loopback(host: str, loopback: bool) -> None:
    assert is_loopback(host) is loopback


def test_the_ui_refuses_to_listen_beyond_loopback_without_a_token(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from evalfleet.cli import main

    env = {"EVALFLEET_DATA_DIR": str(tmp_path)}
    result = CliRunner().invoke(main, ["ui", "--host", "0.0.0.0"], env=env)
    assert result.exit_code == 2 and "EVALFLEET_UI_TOKEN" in result.output


def test_the_ui_token_is_a_secret() -> None:
    settings = Settings(ui_token="tok-secret-9")
    assert "tok-secret-9" not in repr(settings) + str(settings)
    assert "tok-secret-9" in settings.secret_values()


def test_an_alert_page_during_judge_drift_says_so_escaped(site: Any, alert_database: str) -> None:
    suspicion = {"rules": [{"rule": "rag_qa_judge_drift", "score": "faithfulness",
                            "since": "2026-11-21T11:00:00Z"}],
                 "identities": [{"reported_model": MARKUP, "fingerprint": "fp_1",
                                 "verdicts": 3, "first_at": "t"},
                                {"reported_model": "m", "fingerprint": "fp_2",
                                 "verdicts": 4, "first_at": "t"}]}
    store = open_store(alert_database)
    with store.engine.begin() as conn:  # type: ignore[attr-defined]
        for key, finding in conn.execute(select(alert_states.c.segment_key,
                                                alert_states.c.finding)).all():
            conn.execute(update(alert_states).where(alert_states.c.segment_key == key)
                         .values(finding={**finding, "judge_drift": suspicion}))
    store.close()
    page = get(site, "/alerts/faithfulness_drop", params={"segment": "app=support-bot"}).text
    assert "judge drift suspected: rag_qa_judge_drift (faithfulness) firing since" in page
    assert "fp_2" in page and "&lt;script&gt;" in page and "<script" not in page


@pytest.mark.parametrize("backend", ["postgres", "sqlite"])
def test_a_store_without_schema_says_to_migrate(backend: str, request: pytest.FixtureRequest,
                                                tmp_path: Path,
                                                serve: Callable[..., Any]) -> None:
    if backend == "postgres":
        # The test database, read through a schema that holds no tables.
        url = request.getfixturevalue("database_url") + "?options=-csearch_path%3Dnowhere"
    else:
        (tmp_path / "empty.db").touch()  # a file with no schema (ui refuses a missing one)
        url = f"sqlite:///{tmp_path / 'empty.db'}"
    page = serve(build_ui_app(Settings(database_url=url, data_dir=tmp_path), token=None))
    for path in ("/", "/health"):
        response = httpx.get(page.url + path, timeout=10)
        assert response.status_code == 503, response.text[:300]
        assert "run `evalfleet migrate`" in response.text
        assert "Traceback" not in response.text and "no evalfleet schema" in response.text


@pytest.mark.parametrize("alert_database", ["sqlite"], indirect=True)
def test_alert_and_trend_pages_show_the_judges_mean_and_the_corrected_one(site: Any) -> None:
    alert = get(site, "/alerts/faithfulness_drop", params={"segment": "app=support-bot"})
    window_mean = re.search(r'id="window-mean">([0-9.]+)<', alert.text)
    judge_mean = re.search(r'id="judge-mean">([0-9.]+)<', alert.text)
    assert window_mean and judge_mean and judge_mean.group(1) == window_mean.group(1)
    # No review items in this store: no corrected mean, and the page says why.
    assert 'id="corrected-mean">not enough labels<' in alert.text
    assert "0 labels (at least 100 needed)" in alert.text and "steady" in alert.text
    # Nor can people's labels say whether the firing drop is real.
    assert 'id="judge-check-verdict">too few labels<' in alert.text
    trend = get(site, "/rules/faithfulness_drop/trend",
                params={"segment": "app=support-bot", "range": "1h"})
    assert 'id="judge-mean">0.' in trend.text and "not enough labels" in trend.text


@pytest.mark.parametrize("alert_database", ["sqlite"], indirect=True)
def test_views_between_two_evaluations_share_one_estimate(alert_database: str, tmp_path: Path,
                                                         serve: Callable[..., Any]) -> None:
    rules = write_rules(tmp_path / "rules.yaml", DROP_RULE)
    settings = Settings(database_url=alert_database, alert_rules_file=rules, data_dir=tmp_path)
    engine = open_alert_engine(settings, deliver=False)
    app = {"app": "support-bot"}
    stream.write(engine.store.engine, history(T0) + stream.steady(
        start=T0, minutes=20, per_minute=20, mean=0.70, seed=2, attributes=app))
    run(engine, T0 - 5 * MINUTE, 16)  # last evaluated at T0 + 10 minutes
    site = serve(build_ui_app(settings, token=None))

    def verdicts_behind_the_estimate() -> int:
        page = get(site, "/alerts/faithfulness_drop", params={"segment": "app=support-bot"})
        found = re.search(r"<td>(\d+) verdicts</td>", page.text)
        assert found, page.text
        return int(found.group(1))

    first = verdicts_behind_the_estimate()
    # 32 more verdicts inside the window: the page keeps the estimate it read at the
    # rule's last evaluation, and the next evaluation's window counts them.
    stream.write(engine.store.engine, stream.steady(start=T0 + MINUTE, minutes=8, per_minute=4,
                                              mean=0.7, seed=9, attributes=app))
    assert verdicts_behind_the_estimate() == first
    run(engine, T0 + 11 * MINUTE, 1)
    engine.close()
    assert verdicts_behind_the_estimate() >= first + 20


@pytest.mark.parametrize("alert_database", ["sqlite"], indirect=True)
def test_the_trend_attributes_filter_filters_the_chart(site: Any) -> None:
    """A filter picks the segment the chart shows, and the list shows what the heading says."""
    def shown(**params: str) -> tuple[str, str, str]:
        page = get(site, "/rules/faithfulness_drop/trend", params={"range": "1h", **params})
        heading = re.search(r'class="segment-name">([^<]*)<', page.text)
        selected = re.search(r"<option selected>([^<]*)</option>", page.text)
        mean = re.search(r'id="judge-mean">([0-9.]+)<', page.text)
        assert heading and selected and mean, page.text[:2000]
        return heading.group(1), selected.group(1), mean.group(1)

    everyone = shown()
    assert everyone[:2] == ("(all)", "(all)")
    filtered = shown(filter="app=support-bot")
    assert filtered == shown(segment="app=support-bot")
    assert filtered[:2] == ("app=support-bot", "app=support-bot")
    assert shown(filter="app=nobody")[:2] == ("(all)", "(all)")


@pytest.mark.parametrize("alert_database", ["sqlite"], indirect=True)
def test_fleet_health_explains_what_it_does_not_know(site: Any) -> None:
    page = get(site, "/health").text
    assert "<td>?</td>" in page and "<td>unknown</td>" in page  # the embedded broker
    assert 'id="queue-notes"' in page and "cannot count a queue's jobs" in page
    assert 'id="coverage-unknown"' in page


def test_fleet_health_durations_are_in_human_units() -> None:
    page = _environment().get_template("health.html").render(
        queues=[{"queue": "eval.rag_qa", "waiting_jobs": 3, "in_flight_jobs": 0,
                 "oldest_job_age_s": 75.0, "completed_per_s": 1.5, "lag_mean_s": 498294.9,
                 "failures": []}], coverage=[], queue_error=None, request=None)
    assert "<td>5d18h</td>" in page and "<td>1m15s</td>" in page
    assert "498294" not in page


@pytest.mark.parametrize("alert_database", ["sqlite"], indirect=True)
def test_the_alert_page_says_what_lam_is(site: Any) -> None:
    alert = get(site, "/alerts/faithfulness_drop", params={"segment": "app=support-bot"}).text
    assert 'id="lam-heading"' in alert and "lam (judge weight)" in alert
    assert LAM_MEANING in html.unescape(alert)  # the words review status prints too


@pytest.mark.parametrize("alert_database", ["sqlite"], indirect=True)
def test_overview_and_alert_pages_say_when_scores_are_simulated(
        site: Any, alert_database: str, tmp_path: Path, serve: Callable[..., Any]) -> None:
    def banner(app_site: Any) -> list[bool]:
        return ['id="simulated"' in get(app_site, path, params=params).text
                for path, params in (("/", {}), ("/alerts/faithfulness_drop",
                                                 {"segment": "app=support-bot"}))]

    assert banner(site) == [False, False]  # no verdict here says who judged it
    store = open_store(alert_database)
    store.save(verdicts=[record(VerdictKey("sim-1", "rag_qa", "v", "gpt-4o-mini"),
                                created_at=datetime.now(UTC),
                                judge_fingerprint=SIMULATOR_NAME)], owner="t")
    store.close()
    settings = Settings(database_url=alert_database, data_dir=tmp_path,
                        alert_rules_file=tmp_path / "rules.yaml")
    assert banner(serve(build_ui_app(settings, token=None))) == [True, True]


@pytest.mark.parametrize("alert_database", ["sqlite"], indirect=True)
def test_pages_write_time_as_the_terminal_does(site: Any) -> None:
    overview = get(site, "/").text
    assert re.search(r"<td>\d{4}-\d\d-\d\dT\d\d:\d\dZ</td>", overview)
    assert " UTC<" not in overview


@pytest.mark.parametrize("alert_database", ["sqlite"], indirect=True)
def test_labels_of_older_samples_move_the_alert_page_and_agree_with_review_status(
        site: Any, alert_database: str) -> None:
    """Samples taken in the alert's window but judged and queued today (as the demo's
    are): labelling them moves the open page's corrected mean, and the page and `review
    status` count the same labels."""
    from click.testing import CliRunner

    from evalfleet.cli import main
    from evalfleet.core.review_slice import MetricSlice, ReviewSlice
    from evalfleet.store.queries.review_queue import LabelValue, ReviewQueue

    def labels_on_page() -> tuple[str, str]:
        alert = get(site, "/alerts/faithfulness_drop", params={"segment": "app=support-bot"})
        labels = re.search(r'id="corrected-labels">(\d+) labels', alert.text)
        corrected = re.search(r'id="corrected-mean">([^<]+)<', alert.text)
        assert labels and corrected and 'id="label-pool">labels of random items sampled from'\
            in alert.text, alert.text
        return labels.group(1), corrected.group(1)

    now = datetime.now(UTC)
    worker = open_store(alert_database, review=ReviewSlice({"rag_qa": MetricSlice(rate=1.0)}))
    worker.save(verdicts=[record(
        VerdictKey(f"late-{n}", "rag_qa", "p1", "judge"), attributes={"app": "support-bot"},
        scores={"faithfulness": 0.7}, raw_scores={"faithfulness": 0.7},
        sample_ts=T0 + n * MINUTE / 20, created_at=now) for n in range(120)], owner="t")
    worker.close()
    store = open_store(alert_database)
    queue = ReviewQueue(store)
    items = list(queue.iter_items(metric="rag_qa"))
    assert len(items) == 120 and all(item.created_at >= now for item in items)
    assert labels_on_page() == ("0", "not enough labels")
    for item in items:
        queue.label(item_id=item.id, reviewer="ann", comment=None, source="import",
                    labels={"faithfulness": LabelValue(raw=0.5, value=0.5)}, now=now,
                    require_lease=False)
    store.close()
    labels, corrected = labels_on_page()
    assert labels == "120" and float(corrected) < 0.7
    status = CliRunner().invoke(main, ["review", "status", "--json", "--since", T0.isoformat()],
                                env={"EVALFLEET_DATABASE_URL": alert_database},
                                catch_exceptions=False)
    (in_status,) = [e for e in json.loads(status.stdout)["estimates"]
                    if e["score"] == "faithfulness"]
    assert in_status["labels"] == 120 and in_status["pool"].startswith(
        f"labels of random items sampled from {format_moment(T0)}")
def test_stored_moments_are_written_for_people_too() -> None:
    """A stored finding keeps its moments as ISO 8601 text (the judge check's pools)."""
    when = _environment().from_string("{{ moment|when }}")
    assert when.render(moment="2026-11-21T13:30:00.123456+00:00") == "2026-11-21T13:30Z"
    assert when.render(moment=datetime(2026, 11, 21, 13, 30, 5, tzinfo=UTC)) == \
        "2026-11-21T13:30Z"
    assert when.render(moment=None) == "-"
    assert when.render(moment="<b>not a time</b>") == "&lt;b&gt;not a time&lt;/b&gt;"


@pytest.mark.parametrize("alert_database", ["sqlite"], indirect=True)
def test_the_alert_page_histograms_and_worst_samples_explain_themselves(site: Any) -> None:
    alert = get(site, "/alerts/faithfulness_drop", params={"segment": "app=support-bot"}).text
    # Axis labels, one scale named for both, and each bar's count written out.
    tops = []
    for title in ("window", "baseline"):
        svg = alert.split(f'id="hist-{title}"', 1)[1].split("</svg>", 1)[0]
        assert ">faithfulness score</text>" in svg and ">0%</text>" in svg
        tops += re.findall(r'y="8" text-anchor="end">(\d+)%</text>', svg)
        counts = [int(n) for n in re.findall(r'class="count"[^>]*>(\d+)</text>', svg)]
        assert counts and all(n > 0 for n in counts)
    assert len(tops) == 2 and tops[0] == tops[1]  # one scale for both
    assert 'id="hist-scale"' in alert and "both on one scale" in alert
    assert "window 10m, minimum" in alert and "0:10:00" not in alert  # a duration for people
    # The worst samples show their retrieved context, escaped and cut.
    assert "CHUNK-1-1 &lt;script&gt;alert(1)&lt;/script&gt; &lt;!channel&gt;" in alert
    chunk = re.search(r'class="text context-chunk">(CHUNK-1-1[^<]*)<', alert)
    assert chunk and chunk.group(1).endswith("…") and len(chunk.group(1)) < 700
    assert "CHUNK-1-2" in alert
    assert "CHUNK-2-5" in alert and "CHUNK-2-6" not in alert and "2 more chunk(s)" in alert
    # The agent's run names the step its judge found wrong, linked on its verdict page.
    step = re.search(r'class="text failed-step">([^<]*)</span> <a href="(/verdicts/\d+#step-2)"',
                     alert)
    assert step and step.group(1).startswith(
        "step 2 of 2: tool call weather {&#34;city&#34;: &#34;Olso&#34;} -&gt; no such city "
        "&lt;!channel&gt;")
    verdict = get(site, step.group(2).split("#")[0]).text
    assert '<li class="step step-tool failed" id="step-2">' in verdict
    # A conversation among the worst: which, how long, its last question, linked to its
    # turns; a provisional version is no evidence until final.
    session = re.search(r'class="text session-line">([^<]*)</span> '
                        r'<a href="(/verdicts/\d+)#session">', alert)
    assert session and session.group(1).startswith(
        "conversation conv-7, 2 turn(s) (closed by final_wait); last question: And tomorrow? "
        "&lt;!channel&gt;")
    assert "provisional-0" not in alert
    turns = get(site, session.group(2)).text
    assert '<li class="turn judged" id="turn-2" value="2">' in turns
