"""The review page: the part of ``evalfleet ui`` that writes.

A reviewer signs in with their own token (``evalfleet review add-reviewer``), kept in a
cookie; the page's read-only token (``EVALFLEET_UI_TOKEN``) never posts. Every form
carries a signed token bound to the reviewer's session (:mod:`evalfleet.web.csrf`).

The flow, each step a POST answered by a redirect: take the next item (leased to the
reviewer), label each of the metric's scores on its own scale or skip it or give it
up, then see the judge's scores and reasoning beside the labels (hidden until then,
so they do not anchor the reviewer) and take the next one. One script file
(``/static/review.js``, allowed on these pages only) adds the keyboard: number keys,
y/n and x (cannot say) choose, Enter submits, s skips, g gives up, ? shows the keys.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import parse_qsl, quote, unquote

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from starlette.routing import Route

from evalfleet.core.errors import InvalidDataset, InvalidSample, UnknownMetric
from evalfleet.core.metric import Metric, MetricRegistry
from evalfleet.core.scales import ScoreScale, score_scales
from evalfleet.dataset.selection import parse_labels
from evalfleet.review.guide import Anchor, InvalidGuide, load_guide
from evalfleet.review.label import read_label
from evalfleet.review.pending import label_studio_task, pending_record
from evalfleet.store.queries.review_queue import LabelValue, ReviewItem, ReviewQueue
from evalfleet.web.csrf import check_token, issue_token
from evalfleet.web.session import session_view
from evalfleet.web.trajectory import trajectory_view

#: The agreement view: its default and longest look-back in days.
AGREEMENT_DAYS = 30
MAX_AGREEMENT_DAYS = 366

#: Longest attribute key the agreement view splits by.
MAX_KEY_CHARS = 64

#: The cookie that carries a reviewer's token.
REVIEWER_COOKIE = "evalfleet_reviewer"

#: The cookie that carries the segment to label first (``/review?segment=app=bot``).
SEGMENT_COOKIE = "evalfleet_review_segment"

#: Longest segment text the review page keeps, in characters.
MAX_SEGMENT_CHARS = 1024

#: Largest form body read, in bytes (a comment and a few scores).
MAX_FORM_BYTES = 64 * 1024

#: Steps a 0..1 score is offered in on the page.
CONTINUOUS_STEPS = 5

#: The form value that means "cannot say".
CANNOT_SAY = "null"

#: Most items one ``/review/pending`` answer lists or leases.
MAX_PENDING = 1000

#: A tool's lease through ``POST /review/pending/lease``: default and longest, in seconds.
TOOL_LEASE_S = 8 * 3600
MAX_TOOL_LEASE_S = 7 * 86400

#: Renders a template with a status code and context.
Render = Callable[..., HTMLResponse]


@dataclass(frozen=True)
class ReviewOptions:
    """How the review page works."""

    secret: bytes
    """Signs form tokens; the same on every replica."""
    lease_s: float
    """How long a taken item stays with its reviewer."""


@dataclass(frozen=True)
class Choice:
    """One value a score can be given on the page."""

    key: str
    """The key that picks it."""
    value: str
    """The form value."""
    label: str


def score_choices(metric: Metric) -> list[tuple[str, str, list[Choice]]]:
    """Each of ``metric``'s scores, its kind and the values offered for it.

    Returns:
        ``(score, kind, choices)`` per score in the metric file's order: yes/no (y, n)
        for a binary score, each rubric value (its own digit) for an ordinal one, and
        :data:`CONTINUOUS_STEPS` even steps over the range (1, 2, ...) for a continuous
        one; each ends with x, cannot say.
    """
    scales = score_scales(metric)
    scores: list[tuple[str, str, list[Choice]]] = []
    for name in metric.spec.scores:
        scale = scales[name]
        scores.append((name, scale.kind, [*_values(scale), Choice("x", CANNOT_SAY,
                                                                   "cannot say")]))
    return scores


def _values(scale: ScoreScale) -> list[Choice]:
    if scale.kind == "binary":
        return [Choice("y", "true", "yes"), Choice("n", "false", "no")]
    if scale.kind == "ordinal":
        return [Choice(f"{v:g}", f"{v:g}", f"{v:g}") for v in scale.categories]
    step = (scale.high - scale.low) / (CONTINUOUS_STEPS - 1)
    values = [scale.low + i * step for i in range(CONTINUOUS_STEPS)]
    return [Choice(str(i + 1), f"{v:g}", f"{v:g}") for i, v in enumerate(values)]


def parse_value(text: str, *, kind: str) -> Any:
    """A form value as the label it stands for (None: cannot say).

    Raises:
        ValueError: When the text is not a value of the kind.
    """
    if text == CANNOT_SAY:
        return None
    if kind == "binary":
        if text not in ("true", "false"):
            raise ValueError("expected yes or no")
        return text == "true"
    return int(text) if kind == "ordinal" else float(text)


def show_value(value: Any, *, none: str) -> str:
    """A label or judge value as the page shows it: yes/no, a short number, or ``none``."""
    if value is None:
        return none
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int | float):
        return f"{value:g}"
    return str(value)


class ReviewPages:
    """The review routes over a queue and the metrics."""

    def __init__(self, *, queue: ReviewQueue, registry: MetricRegistry,
                 options: ReviewOptions, render: Render) -> None:
        self._queue = queue
        self._registry = registry
        self._options = options
        self._render = render

    def routes(self) -> list[Route]:
        """The review page's routes, under ``/review``."""
        return [
            Route("/review", self.home, methods=["GET"]),
            Route("/review/agreement", self.agreement, methods=["GET"]),
            Route("/review/login", self.login, methods=["POST"]),
            Route("/review/logout", self.logout, methods=["POST"]),
            Route("/review/take", self.take, methods=["POST"]),
            Route("/review/items/{item_id:int}", self.item, methods=["GET"]),
            Route("/review/items/{item_id:int}/label", self.label, methods=["POST"]),
            Route("/review/items/{item_id:int}/skip", self.skip, methods=["POST"]),
            Route("/review/items/{item_id:int}/release", self.release, methods=["POST"]),
            Route("/review/pending", self.pending, methods=["GET"]),
            Route("/review/pending/lease", self.lease, methods=["POST"]),
        ]

    # --- pages

    async def home(self, request: Request) -> Response:
        """The review home; ``?segment=app=bot,...`` (an alert page's link) makes the
        items of that segment come first until ``?segment=`` clears it (a cookie keeps it
        between items)."""
        asked = request.query_params.get("segment")
        text = asked if asked is not None else _segment_cookie(request)
        segment, problem = review_segment(text)
        if problem is not None:
            return self._message(request, problem, status_code=400)
        reviewer = await self._reviewer(request)
        if reviewer is None:
            response = self._page(request, "review_login.html", csrf=self._csrf(None))
        else:
            counts = await run_in_threadpool(self._queue.counts, now=datetime.now(UTC))
            response = self._page(request, "review_home.html", reviewer=reviewer,
                                  counts=counts, segment=segment,
                                  empty=request.query_params.get("empty") == "1",
                                  csrf=self._csrf(request))
        if asked is not None and segment:
            # Quoted: a segment's "=" and "," are not cookie characters.
            response.set_cookie(SEGMENT_COOKIE, quote(text), httponly=True, samesite="strict",
                                secure=request.url.scheme == "https", path="/review")
        elif asked is not None:
            response.delete_cookie(SEGMENT_COOKIE, path="/review")
        return response

    async def agreement(self, request: Request) -> Response:
        """The judge's live agreement with reviewers: ``review status``'s figures over the
        items queued in the last ``?days=`` (30 by default), and per value of the sample
        attribute ``?segment_by=`` where the labels allow; read-only."""
        reviewer = await self._reviewer(request)
        if reviewer is None:
            return RedirectResponse("/review", status_code=303)
        text = request.query_params.get("days", str(AGREEMENT_DAYS))
        days = int(text) if text.isdigit() and 0 < int(text) <= MAX_AGREEMENT_DAYS else None
        if days is None:
            return self._message(request, f"days must be a whole number from 1 to "
                                 f"{MAX_AGREEMENT_DAYS}", status_code=400)
        segment_by = request.query_params.get("segment_by", "")[:MAX_KEY_CHARS] or None
        figures = await run_in_threadpool(self._figures, days, segment_by)
        return self._page(request, "review_agreement.html", reviewer=reviewer, days=days,
                          segment_by=segment_by, figures=figures, csrf=self._csrf(request))

    def _figures(self, days: int, segment_by: str | None) -> list[Any]:
        # numpy: loaded on this page only
        from evalfleet.core.live_agreement import LIVE_RESAMPLES, live_agreement, segment_agreement

        since = datetime.now(UTC) - timedelta(days=days)
        figures = live_agreement(self._queue.iter_items(since=since),
                                 self._queue.iter_labels(since=since), registry=self._registry,
                                 n_resamples=LIVE_RESAMPLES)
        if segment_by:
            figures += segment_agreement(
                self._queue.iter_items(since=since), self._queue.iter_labels(since=since),
                registry=self._registry, key=segment_by, n_resamples=LIVE_RESAMPLES)
        return figures

    async def item(self, request: Request) -> Response:
        reviewer = await self._reviewer(request)
        if reviewer is None:
            return RedirectResponse("/review", status_code=303)
        item_id = request.path_params["item_id"]
        item = await run_in_threadpool(self._queue.item, item_id)
        if item is None:
            return self._message(request, "No such item.", status_code=404)
        given = await run_in_threadpool(self._queue.labels_of, item_id=item_id,
                                        reviewer=reviewer)
        if given:
            return self._item_page(request, item, reviewer=reviewer, given=given)
        if item.lease_owner != reviewer or item.lease_expires_at is None or \
                item.lease_expires_at <= datetime.now(UTC):
            return self._message(request, "This item is not yours to label (its lease "
                                 "ended or someone else holds it).", status_code=409)
        return self._item_page(request, item, reviewer=reviewer, given=None)

    async def pending(self, request: Request) -> Response:
        """Items waiting for labels that nobody holds, as JSON (``?format=label-studio``:
        Label Studio tasks), for a labelling tool; a reviewer's token as a bearer header
        (or the page's cookie). ``?metric=``, ``?limit=`` (at most 1000), ``?after=``."""
        return await self._tool_answer(request, cookie=True, fetch=lambda _, q: (
            self._queue.pending(now=datetime.now(UTC), metric=q.metric, limit=q.limit,
                                after=q.after)))

    async def lease(self, request: Request) -> Response:
        """Lease up to ``?limit=`` items to the tool's reviewer for ``?lease_s=`` seconds
        (8 hours by default) and list them as ``GET /review/pending`` does. A bearer
        token only: a browser never sends one on its own, so no form token is needed,
        and the page's cookie is not accepted here."""
        return await self._tool_answer(request, cookie=False, fetch=lambda reviewer, q: (
            self._queue.take_many(reviewer=reviewer, now=datetime.now(UTC),
                                  lease_s=q.lease_s, limit=q.limit, metric=q.metric)))

    async def _tool_answer(self, request: Request, *, cookie: bool,
                           fetch: Callable[[str, _PendingQuery], list[ReviewItem]]
                           ) -> Response:
        reviewer = await self._tool_reviewer(request, cookie=cookie)
        if reviewer is None:
            return _json_error("a reviewer's token is needed (Authorization: Bearer ...)",
                               status_code=401)
        query = _pending_query(request)
        if isinstance(query, str):
            return _json_error(query, status_code=400)
        items = await run_in_threadpool(fetch, reviewer, query)
        return JSONResponse(self._pending_body(items, query.label_studio))

    def _pending_body(self, items: list[ReviewItem], label_studio: bool) -> Any:
        def scores(item: ReviewItem) -> list[str]:
            metric = self._metric(item)
            return list(metric.spec.scores) if metric else []

        if label_studio:
            return [label_studio_task(item, scores=scores(item)) for item in items]
        return {"items": [pending_record(item, scores=scores(item)) for item in items]}

    async def _tool_reviewer(self, request: Request, *, cookie: bool) -> str | None:
        header = request.headers.get("authorization", "")
        token = header[7:].strip() if header.lower().startswith("bearer ") else None
        if token:
            return await run_in_threadpool(self._queue.reviewer_for, token)
        return await self._reviewer(request) if cookie else None

    # --- actions

    async def login(self, request: Request) -> Response:
        form = await _form(request)
        if not self._check(request, form, session=False):
            return self._forbidden(request, "The form expired or was not this page's.")
        token = form.get("token", "")
        name = await run_in_threadpool(self._queue.reviewer_for, token) if token else None
        if name is None:
            return self._forbidden(request, "Unknown reviewer token.")
        response = RedirectResponse("/review", status_code=303)
        response.set_cookie(REVIEWER_COOKIE, token, httponly=True, samesite="strict",
                            secure=request.url.scheme == "https", path="/review")
        return response

    async def logout(self, request: Request) -> Response:
        form = await _form(request)
        if not self._check(request, form):
            return self._forbidden(request, "The form expired or was not this page's.")
        response = RedirectResponse("/review", status_code=303)
        response.delete_cookie(REVIEWER_COOKIE, path="/review")
        return response

    async def take(self, request: Request) -> Response:
        reviewer, refusal = await self._poster(request)
        if reviewer is None:
            return refusal
        return await self._take_next(request, reviewer)

    async def skip(self, request: Request) -> Response:
        reviewer, refusal = await self._poster(request)
        if reviewer is None:
            return refusal
        await run_in_threadpool(self._queue.skip, item_id=request.path_params["item_id"],
                                reviewer=reviewer, now=datetime.now(UTC))
        return await self._take_next(request, reviewer)

    async def release(self, request: Request) -> Response:
        reviewer, refusal = await self._poster(request)
        if reviewer is None:
            return refusal
        await run_in_threadpool(self._queue.release, item_id=request.path_params["item_id"],
                                reviewer=reviewer)
        return RedirectResponse("/review", status_code=303)

    async def label(self, request: Request) -> Response:
        reviewer, refusal, form = await self._poster_form(request)
        if reviewer is None:
            return refusal
        item_id = request.path_params["item_id"]
        item = await run_in_threadpool(self._queue.item, item_id)
        if item is None:
            return self._message(request, "No such item.", status_code=404)
        metric = self._metric(item)
        labels, problems = _labels_of(form, metric=metric, item=item)
        if problems:
            return self._item_page(request, item, reviewer=reviewer, given=None,
                                   problems=problems, status_code=400)
        comment = form.get("comment", "").strip()[:10_000] or None
        done = await run_in_threadpool(
            self._queue.label, item_id=item_id, reviewer=reviewer, labels=labels,
            comment=comment, source="page", now=datetime.now(UTC))
        if done is None:
            return self._message(request, "This item is no longer yours (its lease ended); "
                                 "nothing was saved.", status_code=409)
        return RedirectResponse(f"/review/items/{item_id}", status_code=303)

    # --- helpers

    async def _take_next(self, request: Request, reviewer: str) -> Response:
        segment, _ = review_segment(_segment_cookie(request))
        item = await run_in_threadpool(self._queue.take, reviewer=reviewer,
                                       now=datetime.now(UTC), lease_s=self._options.lease_s,
                                       segment=segment)
        if item is None:
            return RedirectResponse("/review?empty=1", status_code=303)
        return RedirectResponse(f"/review/items/{item.id}", status_code=303)

    async def _reviewer(self, request: Request) -> str | None:
        token = request.cookies.get(REVIEWER_COOKIE)
        if not token:
            return None
        return await run_in_threadpool(self._queue.reviewer_for, token)

    async def _poster(self, request: Request) -> tuple[str | None, Response]:
        reviewer, refusal, _ = await self._poster_form(request)
        return reviewer, refusal

    async def _poster_form(self, request: Request) -> tuple[str | None, Response,
                                                            dict[str, str]]:
        """The reviewer behind a POST, or the refusal: a reader without a reviewer
        token, or a form without this session's signed token."""
        form = await _form(request)
        reviewer = await self._reviewer(request)
        if reviewer is None:
            return None, self._forbidden(request, "Only reviewers can change the queue: "
                                         "sign in with your reviewer token."), form
        if not self._check(request, form):
            return None, self._forbidden(request, "The form expired or was not this "
                                         "page's (missing or bad CSRF token)."), form
        return reviewer, HTMLResponse(""), form

    def _check(self, request: Request, form: dict[str, str], *, session: bool = True) -> bool:
        return check_token(form.get("csrf"), secret=self._options.secret,
                           binding=_binding(request if session else None), now_s=time.time())

    def _csrf(self, request: Request | None) -> str:
        return issue_token(secret=self._options.secret, binding=_binding(request),
                           now_s=time.time())

    def _metric(self, item: ReviewItem) -> Metric | None:
        try:
            return self._registry.get(item.metric)
        except UnknownMetric:
            return None

    def _item_page(self, request: Request, item: ReviewItem, *, reviewer: str,
                   given: dict[str, Any] | None, problems: list[str] | None = None,
                   status_code: int = 200) -> HTMLResponse:
        metric = self._metric(item)
        scores = score_choices(metric) if metric else []
        reveal = [(name, show_value(given.get(name), none="cannot say"),
                   show_value(item.judge_raw_scores.get(name), none="-"))
                  for name, _, _ in scores] if given else []
        guide, guide_problem = _guide_of(metric)
        sample = item.sample or {}
        return self._page(
            request, "review_item.html", status_code=status_code, item=item,
            reviewer=reviewer, given=given, problems=problems or [], scores=scores,
            reveal=reveal, sample=sample, csrf=self._csrf(request),
            trajectory=trajectory_view(sample.get("trajectory")),
            session=session_view(sample.get("session")),
            description=metric.spec.description if metric else "", guide=guide,
            guide_problem=guide_problem)

    def _message(self, request: Request, text: str, *, status_code: int) -> HTMLResponse:
        return self._page(request, "review_message.html", status_code=status_code,
                          text=text, csrf=self._csrf(request))

    def _forbidden(self, request: Request, text: str) -> HTMLResponse:
        return self._page(request, "review_message.html", status_code=403, text=text,
                          csrf=None)

    def _page(self, request: Request, name: str, *, status_code: int = 200,
              **context: Any) -> HTMLResponse:
        return self._render(name, status_code=status_code, page="review", **context)


def review_segment(text: str) -> tuple[dict[str, str], str | None]:
    """The segment to label first, from its printed form (``app=bot,prompt_version=v12``;
    empty or ``(all)``: none).

    Returns:
        The segment's labels, and what is wrong with ``text`` (None when nothing is).
    """
    text = text.strip()
    if text in ("", "(all)"):
        return {}, None
    if len(text) > MAX_SEGMENT_CHARS:
        return {}, f"segment: at most {MAX_SEGMENT_CHARS} characters"
    try:
        return parse_labels(text.split(",")), None
    except InvalidDataset as exc:
        return {}, f"segment {exc}"


def _segment_cookie(request: Request) -> str:
    return unquote(request.cookies.get(SEGMENT_COOKIE, ""))


def _guide_of(metric: Metric | None) -> tuple[dict[str, tuple[Anchor, ...]], str | None]:
    """What each score's values mean, or why the guide could not be read (the page goes on)."""
    if metric is None:
        return {}, None
    try:
        return load_guide(metric), None
    except InvalidGuide as exc:
        return {}, str(exc)


def _labels_of(form: dict[str, str], *, metric: Metric | None,
               item: ReviewItem) -> tuple[dict[str, LabelValue], list[str]]:
    if metric is None:
        return {}, [f"metric {item.metric!r} is not loaded here"]
    labels: dict[str, LabelValue] = {}
    problems: list[str] = []
    for name, kind, _ in score_choices(metric):
        text = form.get(f"score.{name}")
        if text is None:
            problems.append(f"{name}: give a value (x: cannot say)")
            continue
        try:
            labels[name] = read_label(parse_value(text, kind=kind), metric=metric, score=name,
                                      record="form", sample_id=item.sample_id, field=name)
        except (ValueError, InvalidSample) as exc:
            problems.append(f"{name}: {exc}")
    return labels, problems


@dataclass(frozen=True)
class _PendingQuery:
    metric: str | None
    limit: int
    after: int
    lease_s: float
    label_studio: bool


def _pending_query(request: Request) -> _PendingQuery | str:
    """The pending slice's query parameters, or what is wrong with them."""
    params = request.query_params

    def whole(name: str, default: int, low: int, high: int) -> int | None:
        text = params.get(name, str(default))
        return int(text) if text.isdigit() and low <= int(text) <= high else None

    limit = whole("limit", 100, 1, MAX_PENDING)
    after = whole("after", 0, 0, 2 ** 63 - 1)
    lease_s = whole("lease_s", TOOL_LEASE_S, 60, MAX_TOOL_LEASE_S)
    output = params.get("format", "json")
    metric = params.get("metric") or None
    if limit is None:
        return f"limit must be a whole number from 1 to {MAX_PENDING}"
    if after is None:
        return "after must be an item id"
    if lease_s is None:
        return f"lease_s must be a whole number of seconds from 60 to {MAX_TOOL_LEASE_S}"
    if output not in ("json", "label-studio"):
        return "format must be json or label-studio"
    if metric is not None and len(metric) > 64:
        return "metric must be at most 64 characters"
    return _PendingQuery(metric=metric, limit=limit, after=after, lease_s=float(lease_s),
                         label_studio=output == "label-studio")


def _json_error(text: str, *, status_code: int) -> JSONResponse:
    return JSONResponse({"error": text}, status_code=status_code)


def _binding(request: Request | None) -> str:
    """What a form token is bound to: the reviewer's session, or the sign-in form."""
    token = request.cookies.get(REVIEWER_COOKIE) if request is not None else None
    if not token:
        return "sign-in"
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


async def _form(request: Request) -> dict[str, str]:
    """An URL-encoded form body (at most :data:`MAX_FORM_BYTES`; the first of repeated keys)."""
    body = b""
    async for chunk in request.stream():
        body += chunk
        if len(body) > MAX_FORM_BYTES:
            return {}
    form: dict[str, str] = {}
    for key, value in parse_qsl(body.decode("utf-8", "replace"), keep_blank_values=True):
        form.setdefault(key, value)
    return form
