"""The review page in a real browser (Debian's chromium, Selenium), keyboard only.

A store on the embedded SQLite with rag_qa verdicts, every one in the random review
slice, some with markup in their text; the page behind a read-only token, two reviewers.
Screenshots go under ``test-artifacts/screenshots/review-*.png``.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest
from selenium import webdriver
from selenium.common.exceptions import WebDriverException
from selenium.webdriver.common.action_chains import ActionChains
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

from evalfleet.cli.ui import build_ui_app
from evalfleet.core.review_slice import MetricSlice, ReviewSlice
from evalfleet.core.settings import Settings
from evalfleet.store import VerdictKey, VerdictRecord, migrate, open_store
from evalfleet.store.queries.review_queue import ReviewQueue
from testkit.served import Served
from tests.web.conftest import shot

pytestmark = pytest.mark.browser

#: The page's read-only token.
READ_ONLY = "read-only-token-123"

#: Markup in sample text that would run or show if it were not escaped.
HOSTILE = '<script>window.__pwned = 1</script><img src=x onerror="window.__pwned = 2"><b>bold</b>'

#: Items in the queue.
ITEMS = 14

#: How long to wait for a page after a key, in seconds.
WAIT_S = 10


@dataclass
class ReviewSite:
    served: Served
    queue: ReviewQueue
    tokens: dict[str, str]
    reasons: dict[str, str]
    """Each sample's judge reasoning."""


def verdict(n: int, now: datetime) -> VerdictRecord:
    score = [0.25, 0.5, 0.75, 1.0][n % 4]
    sample_id = f"req-{n:02d}"
    return VerdictRecord(
        key=VerdictKey(sample_id, "rag_qa", "v1", "judgesim"), status="ok", error_class=None,
        error=None, reason=f"JUDGE-REASON-{n:02d}: the answer follows the context {HOSTILE}",
        scores={"faithfulness": score, "context_relevance": 1.0, "answer_relevance": 0.5,
                "semantic_similarity": None},
        raw_scores={"faithfulness": score, "context_relevance": 1.0, "answer_relevance": 0.5,
                    "semantic_similarity": None},
        raw_output="{}", attempts=1, latency_ms=5, prompt_tokens=None, completion_tokens=None,
        attributes={"app": "support-bot"}, sample_ts=now,
        created_at=now + timedelta(seconds=n),
        sample={"input": f"Question {n}? {HOSTILE if n % 3 == 0 else ''}",
                "output": f"Answer {n}. {HOSTILE}", "context": [f"Chunk {n} {HOSTILE}"],
                "reference": None, "fields": {}})


@contextmanager
def served_review(folder: Path, verdicts: list[VerdictRecord], *,
                  reviewers: tuple[str, ...]) -> Iterator[ReviewSite]:
    """The page over an embedded store holding ``verdicts``, each in the review slice
    of its metric, with a reviewer token for each of ``reviewers``."""
    url = f"sqlite:///{folder / 'evalfleet.db'}"
    metrics = {v.key.metric for v in verdicts}
    worker = open_store(url, review=ReviewSlice({m: MetricSlice(rate=1.0) for m in metrics}))
    migrate(worker.engine)
    worker.save(verdicts=verdicts, owner="worker")
    worker.close()
    settings = Settings(database_url=url, ui_token=READ_ONLY, review_secret="s" * 32,
                        review_lease_s=600, data_dir=folder)
    served = Served(build_ui_app(settings, token=READ_ONLY))
    store = open_store(url)
    queue = ReviewQueue(store)
    now = min(v.sample_ts for v in verdicts)
    tokens = {name: queue.add_reviewer(name, now=now) for name in reviewers}
    try:
        yield ReviewSite(served=served, queue=queue, tokens=tokens,
                         reasons={v.key.sample_id: str(v.reason) for v in verdicts})
    finally:
        served.stop()
        store.close()


@pytest.fixture(scope="module")
def review_site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ReviewSite]:
    now = datetime.now(UTC) - timedelta(minutes=5)
    with served_review(tmp_path_factory.mktemp("review"),
                       [verdict(n, now) for n in range(ITEMS)],
                       reviewers=("ann", "bob")) as site:
        yield site


def keys(browser: webdriver.Chrome, text: str) -> None:
    """Type ``text`` into whatever has the focus, as a person would."""
    ActionChains(browser).send_keys(text).perform()


def press_and_wait(browser: webdriver.Chrome, text: str) -> None:
    """Type ``text`` and wait until the page it submits has replaced this one and its
    keys are live (the page's script has run)."""
    before = page_id(browser)
    keys(browser, text)
    WebDriverWait(browser, WAIT_S, ignored_exceptions=(WebDriverException,)).until(
        lambda b: page_id(b) != before)
    keys_live(browser)


def page_id(browser: webdriver.Chrome) -> float:
    """When the document shown was started: a new page, a new value."""
    return float(browser.execute_script("return performance.timeOrigin"))


def keys_live(browser: webdriver.Chrome) -> None:
    """Wait until the review script has set up the page's keys."""
    WebDriverWait(browser, WAIT_S, ignored_exceptions=(WebDriverException,)).until(
        lambda b: b.execute_script(
            "return document.documentElement.getAttribute('data-keys') === 'on'"))


def server_ms(browser: webdriver.Chrome) -> float:
    """The app's own time for the page now shown (its Server-Timing header)."""
    timings = browser.execute_script(
        "return performance.getEntriesByType('navigation')[0].serverTiming"
        ".map(function (t) { return t.duration; })")
    return float(timings[0])


def sign_in(browser: webdriver.Chrome, site: ReviewSite, name: str) -> None:
    browser.delete_all_cookies()
    browser.get(f"{site.served.url}/?token={READ_ONLY}")
    browser.get(site.served.url + "/review")
    keys_live(browser)
    assert browser.find_element(By.ID, "token") == browser.switch_to.active_element
    press_and_wait(browser, site.tokens[name] + "\n")
    assert browser.find_element(By.ID, "reviewer").text == name


def nothing_ran(browser: webdriver.Chrome) -> None:
    """Sample text ran nothing and showed no markup; the page's own script is the only one."""
    assert browser.execute_script("return window.__pwned === undefined")
    assert browser.execute_script("return document.images.length") == 0
    sources = browser.execute_script(
        "return Array.prototype.map.call(document.scripts, function (s) { return s.src; })")
    assert [src.rsplit("/", 2)[-2:] for src in sources] == [["static", "review.js"]]
    assert not browser.find_elements(By.CSS_SELECTOR, "main b")


def test_a_reviewer_labels_ten_items_by_keyboard_alone(browser: webdriver.Chrome,
                                                       review_site: ReviewSite) -> None:
    site = review_site
    sign_in(browser, site, "ann")
    shot(browser, "review-home")
    press_and_wait(browser, "\n")
    labelled: list[str] = []
    skipped: list[str] = []
    times: list[float] = []
    started = time.perf_counter()
    while len(labelled) < 10:
        sample_id = browser.find_element(By.ID, "sample-id").text
        times.append(server_ms(browser))
        page = browser.page_source
        # The judge's score and reasoning are not on the page until the label is given.
        assert not browser.find_elements(By.ID, "reveal")
        assert site.reasons[sample_id][:15] not in page
        nothing_ran(browser)
        assert HOSTILE in browser.find_element(By.ID, "sample-output").text
        if len(labelled) == 2 and not skipped:
            skipped.append(sample_id)
            press_and_wait(browser, "s")
            continue
        if not labelled:
            keys(browser, "?")
            assert browser.find_element(By.ID, "help").is_displayed()
            shot(browser, "review-item-help")
            keys(browser, "?")
            assert not browser.find_element(By.ID, "help").is_displayed()
        # faithfulness 0.75 (key 4), context_relevance 1 (5), answer_relevance cannot say,
        # semantic_similarity 0.5 (3); a comment, then Enter.
        if labelled:
            keys(browser, "45x3")
        else:
            # What the values mean is on the page; Enter with one score of four given
            # names the three left and stays, on the first of them.
            assert "supported by the context" in \
                browser.find_element(By.ID, "guide-faithfulness").text
            assert not browser.find_element(By.ID, "missing").is_displayed()
            keys(browser, "4\n")
            WebDriverWait(browser, WAIT_S, ignored_exceptions=(WebDriverException,)).until(
                lambda b: b.find_element(By.ID, "missing").is_displayed())
            assert browser.find_element(By.ID, "missing").text.startswith(
                "Not labelled yet: context_relevance, answer_relevance, semantic_similarity")
            assert browser.find_element(By.ID, "sample-id").text == sample_id
            current = browser.find_element(By.CSS_SELECTOR, "fieldset.score.current")
            assert current.get_attribute("data-score") == "context_relevance"
            shot(browser, "review-item-missing")
            keys(browser, "5x3")
        if len(labelled) == 0:
            keys(browser, "c")
            keys(browser, "looks fine <i>really</i>")
            keys(browser, "\ue00c")  # Escape leaves the comment
            shot(browser, "review-item")
        press_and_wait(browser, "\n")
        reveal = browser.find_element(By.ID, "reveal")
        times.append(server_ms(browser))
        rows = {row.find_elements(By.TAG_NAME, "td")[0].text:
                (row.find_element(By.CLASS_NAME, "yours").text,
                 row.find_element(By.CLASS_NAME, "judge").text)
                for row in reveal.find_elements(By.TAG_NAME, "tr")[1:]}
        judged = site.queue.find_item(sample_id=sample_id, metric="rag_qa")
        assert judged is not None
        assert rows == {
            "faithfulness": ("0.75", f"{judged.judge_raw_scores['faithfulness']:g}"),
            "context_relevance": ("1", "1"), "answer_relevance": ("cannot say", "0.5"),
            "semantic_similarity": ("0.5", "-")}
        assert browser.find_element(By.ID, "judge-reason").text == site.reasons[sample_id]
        nothing_ran(browser)
        if not labelled:
            shot(browser, "review-reveal")
        labelled.append(sample_id)
        press_and_wait(browser, "\n")
    elapsed_s = time.perf_counter() - started
    print(f"\nreview page: {len(labelled)} items labelled and 1 skipped in {elapsed_s:.1f} s "
          f"({60 * len(labelled) / elapsed_s:.0f} items/min by keyboard); server time per "
          f"page: median {sorted(times)[len(times) // 2]:.1f} ms, max {max(times):.1f} ms")
    labels = [lab for lab in site.queue.iter_labels() if lab.reviewer == "ann"]
    assert sorted({lab.sample_id for lab in labels}) == sorted(labelled)
    assert len(labels) == 40 and {lab.source for lab in labels} == {"page"}
    assert next(lab.comment for lab in labels if lab.sample_id == labelled[0]) == \
        "looks fine <i>really</i>"
    skip = site.queue.find_item(sample_id=skipped[0], metric="rag_qa")
    assert skip is not None and skip.skips == 1 and skip.labels_given == 0

    # Ann gives up the next item; Bob, signing in, takes that very item.
    given_up = browser.find_element(By.ID, "sample-id").text
    press_and_wait(browser, "g")
    assert browser.current_url.endswith("/review")
    sign_in(browser, site, "bob")
    press_and_wait(browser, "\n")
    # The oldest open item for Bob is the one Ann skipped; he skips it too and is handed
    # the one Ann gave up.
    assert browser.find_element(By.ID, "sample-id").text == skipped[0]
    press_and_wait(browser, "s")
    assert browser.find_element(By.ID, "sample-id").text == given_up
    item = site.queue.find_item(sample_id=given_up, metric="rag_qa")
    assert item is not None and item.lease_owner == "bob"


def test_a_read_only_token_cannot_post(browser: webdriver.Chrome,
                                       review_site: ReviewSite) -> None:
    site = review_site
    browser.delete_all_cookies()
    browser.get(f"{site.served.url}/?token={READ_ONLY}")
    browser.get(site.served.url + "/review")
    # The sign-in form's own signed token, aimed at taking an item: refused.
    browser.execute_script(
        "var f = document.getElementById('login-form'); f.action = '/review/take'; f.submit();")
    WebDriverWait(browser, WAIT_S, ignored_exceptions=(WebDriverException,)).until(
        lambda b: b.find_elements(By.ID, "message"))
    assert "Only reviewers" in browser.find_element(By.ID, "message").text
    response = httpx.post(site.served.url + "/review/take", timeout=10,
                          headers={"Authorization": f"Bearer {READ_ONLY}"})
    assert response.status_code == 403


def test_a_forged_form_without_its_csrf_token_is_refused(browser: webdriver.Chrome,
                                                         review_site: ReviewSite) -> None:
    site = review_site
    sign_in(browser, site, "ann")
    press_and_wait(browser, "\n")
    sample_id = browser.find_element(By.ID, "sample-id").text
    keys(browser, "1111")
    browser.execute_script(
        "var f = document.getElementById('label-form');"
        "f.querySelector('input[name=csrf]').remove(); f.submit();")
    WebDriverWait(browser, WAIT_S, ignored_exceptions=(WebDriverException,)).until(
        lambda b: b.find_elements(By.ID, "message"))
    assert "CSRF" in browser.find_element(By.ID, "message").text
    item = site.queue.find_item(sample_id=sample_id, metric="rag_qa")
    assert item is not None and not site.queue.labels_of(item_id=item.id, reviewer="ann")
    # Another session's token is no better: Bob's form token does not sign Ann's post.
    cookies = {"evalfleet_reviewer": site.tokens["ann"]}
    bob_page = httpx.get(site.served.url + "/review", timeout=10,
                         cookies={"evalfleet_reviewer": site.tokens["bob"]}).text
    bob_csrf = bob_page.split('name="csrf" value="', 1)[1].split('"', 1)[0]
    forged = httpx.post(site.served.url + "/review/take", data={"csrf": bob_csrf},
                        cookies=cookies, timeout=10)
    assert forged.status_code == 403


def test_only_the_review_pages_allow_a_script(review_site: ReviewSite) -> None:
    url = review_site.served.url
    auth = {"Authorization": f"Bearer {READ_ONLY}"}
    review = httpx.get(url + "/review", timeout=10)
    assert "script-src 'self'" in review.headers["content-security-policy"]
    assert "'unsafe-inline'" not in review.headers["content-security-policy"]
    for path in ("/", "/dead-letters"):
        other = httpx.get(url + path, headers=auth, timeout=10)
        assert other.status_code == 200
        assert "script-src" not in other.headers["content-security-policy"]
        assert "<script" not in other.text
    # Without a token of any kind, only the sign-in form and the static files are open.
    assert httpx.get(url + "/", timeout=10).status_code == 401
    assert httpx.get(url + "/static/review.js", timeout=10).status_code == 200
