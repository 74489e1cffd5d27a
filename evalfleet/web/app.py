"""The web page's ASGI app: routes, security headers, the token check.

Pages: ``/`` (every rule and segment), ``/rules/{rule}/trend`` (a segment's mean over a
chosen range with the baseline band and alert markers), ``/alerts/{rule}?segment=``
(the tests, window against baseline distributions, the worst samples),
``/verdicts/{id}`` (a sample as judged and the judge's reply), ``/dead-letters`` and
``/health``, all read-only (GET); and the review page under ``/review``
(:mod:`evalfleet.web.review_page`), the one part that writes, for reviewers only.

Sample and judge text is hostile: Jinja escapes every value (autoescape), no value is
ever placed in a URL scheme, a script or a style, and every answer carries a
Content-Security-Policy that allows no inline style and nothing from elsewhere. Every
page but the review pages allows no script at all; the review pages allow one script
file served by the page itself (``script-src 'self'``: keyboard shortcuts), never an
inline one. Errors and dead letters are shown with the settings' secrets masked.
"""

from __future__ import annotations

import hmac
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import datetime
from importlib import resources
from typing import Any
from urllib.parse import urlencode

from jinja2 import Environment, FileSystemLoader, Undefined
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.base import BaseHTTPMiddleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from evalfleet.core.durations import format_age, format_duration, format_moment
from evalfleet.core.estimator import LAM_MEANING
from evalfleet.web.pages import PageData
from evalfleet.web.review_page import Render, ReviewPages

#: Sent with every answer: no script at all, styles only from this server.
CONTENT_SECURITY_POLICY = (
    "default-src 'none'; style-src 'self'; img-src 'self'; base-uri 'none'; "
    "form-action 'self'; frame-ancestors 'none'"
)

#: Sent with the review pages: the same, plus the page's own script file.
REVIEW_CONTENT_SECURITY_POLICY = CONTENT_SECURITY_POLICY.replace(
    "default-src 'none';", "default-src 'none'; script-src 'self';")

#: Paths the read-only token does not guard: the review pages check their reviewer's
#: token themselves, and the static files are the package's own.
_OPEN_PREFIXES = ("/review", "/static/")

#: The cookie that carries the token after ``/?token=...``.
TOKEN_COOKIE = "evalfleet_ui"

_HEADERS = {
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}


@dataclass(frozen=True)
class UiOptions:
    """How the page is served."""

    token: str | None = None
    """Asked of every request when set (cookie, ``?token=`` or a bearer header)."""
    secrets: tuple[str, ...] = field(default=())
    """Masked wherever error text is shown."""
    explain: Callable[[BaseException], str | None] | None = None
    """One sentence for a failure caused by the setup (no schema, a database that does
    not answer), shown as a page instead of a 500; None for anything else."""


def create_app(data: PageData, options: UiOptions,
               review: Callable[[Render], ReviewPages] | None = None) -> Starlette:
    """The web page over ``data``.

    Args:
        data: Where the pages read from (store, rules, queues).
        options: Token and secrets.
        review: Builds the review pages with the page's renderer (None: no review page).

    Returns:
        The Starlette application.
    """
    templates = _environment()
    pages = _Pages(data, templates)
    static = str(resources.files("evalfleet.web") / "static")
    review_routes = review(pages.render).routes() if review is not None else []
    return Starlette(
        routes=[
            *review_routes,
            Route("/", pages.overview),
            Route("/rules/{rule}/trend", pages.trend),
            Route("/alerts/{rule}", pages.alert),
            Route("/verdicts/{verdict_id:int}", pages.verdict),
            Route("/dead-letters", pages.dead_letters),
            Route("/health", pages.health),
            Mount("/static", StaticFiles(directory=static), name="static"),
        ],
        middleware=[Middleware(_Guard, token=options.token, explain=options.explain,
                               render=pages.render)],
        exception_handlers={404: pages.not_found},
    )


def _when(moment: datetime | str | None) -> str:
    """A moment for people; a stored finding keeps its moments as ISO 8601 text."""
    if not moment:
        return "-"
    if isinstance(moment, datetime):
        return format_moment(moment)
    try:
        return format_moment(datetime.fromisoformat(moment))
    except ValueError:
        return moment


def _environment() -> Environment:
    folder = str(resources.files("evalfleet.web") / "templates")
    env = Environment(loader=FileSystemLoader(folder), autoescape=True, trim_blocks=True,
                      lstrip_blocks=True)
    env.filters["num"] = format_number
    env.filters["age"] = format_age
    env.filters["duration"] = format_duration
    # One format for people everywhere (the terminal's too); --json speaks ISO 8601.
    env.filters["when"] = _when
    env.globals["lam_meaning"] = LAM_MEANING
    env.globals["query"] = lambda **params: urlencode(
        {k: v for k, v in params.items() if v is not None})
    return env


def format_number(value: Any, digits: int = 3) -> str:
    """A number for people: ``-`` for none (or a field a never evaluated rule lacks),
    short scientific form for tiny values."""
    if value is None or isinstance(value, Undefined):
        return "-"
    number = float(value)
    if number != 0 and abs(number) < 10 ** -digits:
        return f"{number:.2g}"
    return f"{number:.{digits}f}"


class _Pages:
    def __init__(self, data: PageData, templates: Environment) -> None:
        self._data = data
        self._templates = templates

    def render(self, name: str, status_code: int = 200, **context: Any) -> HTMLResponse:
        html = self._templates.get_template(name).render(**context)
        return HTMLResponse(html, status_code=status_code)

    def overview(self, request: Request) -> HTMLResponse:
        return self.render("overview.html", page="overview", **self._data.overview())

    def trend(self, request: Request) -> HTMLResponse:
        found = self._data.trend(request.path_params["rule"],
                                 segment=request.query_params.get("segment"),
                                 span=request.query_params.get("range", "6h"),
                                 filter_text=request.query_params.get("filter", ""))
        if found is None:
            return self._missing("no such rule")
        return self.render("trend.html", page="trend", **found)

    def alert(self, request: Request) -> HTMLResponse:
        found = self._data.alert(request.path_params["rule"],
                                 segment=request.query_params.get("segment", "(all)"))
        if found is None:
            return self._missing("no such rule or segment")
        return self.render("alert.html", page="alert", **found)

    def verdict(self, request: Request) -> HTMLResponse:
        found = self._data.verdict(request.path_params["verdict_id"])
        if found is None:
            return self._missing("no such verdict (it may have been purged)")
        return self.render("verdict.html", page="verdict", **found)

    def dead_letters(self, request: Request) -> HTMLResponse:
        return self.render("dead_letters.html", page="dead_letters",
                            **self._data.dead_letters())

    def health(self, request: Request) -> HTMLResponse:
        return self.render("health.html", page="health", **self._data.health())

    async def not_found(self, request: Request, exc: Exception) -> HTMLResponse:
        return self._missing("no such page")

    def _missing(self, what: str) -> HTMLResponse:
        return self.render("missing.html", status_code=404, page="missing", what=what)


class _Guard(BaseHTTPMiddleware):
    """Security headers on every answer; the token, when one is set."""

    def __init__(self, app: Any, *, token: str | None,
                 explain: Callable[[BaseException], str | None] | None,
                 render: Render) -> None:
        super().__init__(app)
        self._token = token
        self._explain = explain
        self._render = render

    async def dispatch(self, request: Request,
                       call_next: Callable[[Request], Awaitable[Response]]) -> Response:
        started = time.perf_counter()
        try:
            response = await self._authorised(request, call_next)
        except Exception as exc:
            # A setup problem (no schema yet) is said as the CLI says it, not as a 500.
            problem = self._explain(exc) if self._explain is not None else None
            if problem is None:
                raise
            response = self._render("setup.html", status_code=503, page="setup",
                                    problem=problem)
        for name, value in _HEADERS.items():
            response.headers[name] = value
        if request.url.path.startswith("/review"):
            response.headers["Content-Security-Policy"] = REVIEW_CONTENT_SECURITY_POLICY
        # The page's own time (queries and rendering), for the browser's tools and benches.
        response.headers["Server-Timing"] = \
            f"app;dur={(time.perf_counter() - started) * 1000:.1f}"
        return response

    async def _authorised(self, request: Request,
                          call_next: Callable[[Request], Awaitable[Response]]) -> Response:
        if self._token is None or request.url.path.startswith(_OPEN_PREFIXES):
            return await call_next(request)
        offered = request.query_params.get("token")
        if offered is not None and _same(offered, self._token):
            # Move the token from the URL (history, logs) into a cookie.
            rest = {k: v for k, v in request.query_params.items() if k != "token"}
            target = request.url.path + (f"?{urlencode(rest)}" if rest else "")
            response = RedirectResponse(target, status_code=303)
            response.set_cookie(TOKEN_COOKIE, self._token, httponly=True, samesite="strict",
                                secure=request.url.scheme == "https")
            return response
        header = request.headers.get("authorization", "")
        bearer = header[7:] if header.lower().startswith("bearer ") else None
        for candidate in (request.cookies.get(TOKEN_COOKIE), bearer):
            if candidate is not None and _same(candidate, self._token):
                return await call_next(request)
        return HTMLResponse("<!doctype html><title>evalfleet</title><p>This page needs its "
                            "token: open /?token=... once (EVALFLEET_UI_TOKEN).</p>",
                            status_code=401)


def _same(offered: str, token: str) -> bool:
    return hmac.compare_digest(offered.encode("utf-8"), token.encode("utf-8"))
