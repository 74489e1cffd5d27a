""""Save these samples": an alert's worst samples become a dataset from the page.

The review pages' machinery, not a second one: the pages are :class:`ReviewPages` with
two more routes under ``/review``, so only a signed-in reviewer (their token's cookie)
can save, every form carries the reviewer's signed CSRF token, and the read-only token
of the other pages can never post. The alert page links here with a plain GET form
(which writes nothing); this page shows what will be saved and posts it:

- ``GET /review/save-samples?rule=&segment=&name=&worst=``: the confirmation form;
- ``POST /review/save-samples``: a new dataset, or a new version of the one named.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from evalfleet.alerts.rule import RuleSet
from evalfleet.core.errors import InvalidDataset
from evalfleet.dataset.selection import MAX_ALERT_SAMPLES, alert_samples, rule_segment
from evalfleet.store.queries.datasets import Datasets, DatasetVersion, check_name
from evalfleet.web.review_page import ReviewPages

#: Samples saved when the form does not say.
DEFAULT_WORST = 10


class SavingPages(ReviewPages):
    """The review pages, plus saving an alert's worst samples as a dataset."""

    def __init__(self, *, datasets: Datasets, rules: RuleSet, **review: Any) -> None:
        super().__init__(**review)
        self._datasets = datasets
        self._rules = rules

    def routes(self) -> list[Route]:
        """The review routes and ``/review/save-samples`` (GET: confirm, POST: save)."""
        return [
            *super().routes(),
            Route("/review/save-samples", self.confirm_save, methods=["GET"]),
            Route("/review/save-samples", self.save, methods=["POST"]),
        ]

    async def confirm_save(self, request: Request) -> Response:
        reviewer = await self._reviewer(request)
        if reviewer is None:
            return self._page(request, "review_login.html", csrf=self._csrf(None))
        wanted = dict(request.query_params)
        try:
            _, segment, name, worst = self._read(wanted)
        except InvalidDataset as exc:
            return self._saved(request, f"Nothing to save: {exc}", wanted, status_code=400)
        return self._page(request, "dataset_save.html", reviewer=reviewer,
                          rule=wanted.get("rule", ""), segment=str(segment), dataset=name,
                          worst=worst, csrf=self._csrf(request))

    async def save(self, request: Request) -> Response:
        reviewer, refusal, form = await self._poster_form(request)
        if reviewer is None:
            return refusal
        try:
            rule, segment, name, worst = self._read(form)
            version = await run_in_threadpool(self._save, rule, segment, name=name,
                                              worst=worst, reviewer=reviewer)
        except InvalidDataset as exc:
            return self._saved(request, f"Nothing was saved: {exc}", form, status_code=400)
        if version is None:
            text = f"{name} already holds these samples: no new version."
        else:
            text = (f"Saved as {version.dataset} version {version.version} "
                    f"({version.items} samples). Export it with: evalfleet dataset export "
                    f"{version.dataset}")
        return self._saved(request, text, form, status_code=200)

    def _saved(self, request: Request, text: str, form: dict[str, str], *,
               status_code: int) -> Response:
        return self._page(request, "dataset_saved.html", status_code=status_code, text=text,
                          rule=form.get("rule", ""), segment=form.get("segment", ""))

    def _read(self, form: dict[str, str]) -> tuple[Any, Any, str, int]:
        """The rule, segment, dataset name and sample count a form asks for.

        Raises:
            InvalidDataset: Naming the bad field.
        """
        rule = next((r for r in self._rules.rules if r.name == form.get("rule")), None)
        if rule is None:
            raise InvalidDataset("no such rule", field="rule")
        segment = rule_segment(form.get("segment", ""), rule)
        name = check_name(form.get("name", "").strip())
        text = form.get("worst", str(DEFAULT_WORST)).strip()
        if not text.isdigit() or not 1 <= int(text) <= MAX_ALERT_SAMPLES:
            raise InvalidDataset(f"must be 1 to {MAX_ALERT_SAMPLES}", field="worst")
        return rule, segment, name, int(text)

    def _save(self, rule: Any, segment: Any, *, name: str, worst: int,
              reviewer: str) -> DatasetVersion | None:
        store = self._datasets.store
        found = alert_samples(store, rule, segment, worst=worst)
        if not found.found:
            raise InvalidDataset("no scored samples in this segment's window", field="segment")
        items = self._datasets.of_verdicts(found.found)
        note = f"{found.note} (saved by {reviewer} from the page)"
        now = datetime.now(UTC)
        try:
            return self._datasets.add(name, items, note=note, now=now)
        except InvalidDataset as exc:
            if exc.field != "name":  # the name is valid (checked): no such dataset yet
                raise
        return self._datasets.create(name, items, note=note, now=now)

