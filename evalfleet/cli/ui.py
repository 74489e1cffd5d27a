"""``evalfleet ui``: the read-only web page (ASGI, served by uvicorn)."""

from __future__ import annotations

import ipaddress
from typing import Any

import click

from evalfleet.cli.context import CliState, open_existing_store, pass_state
from evalfleet.core.errors import EvalfleetError
from evalfleet.core.log import install_secret_filter

#: Addresses the page may serve on without a token.
_LOOPBACK_NAMES = ("localhost",)


@click.command()
@click.option("--host", default="127.0.0.1", show_default=True,
              help="Address to bind; anything but loopback needs EVALFLEET_UI_TOKEN.")
@click.option("--port", type=click.IntRange(1, 65535), default=8500, show_default=True)
@click.option("--access-log/--no-access-log", default=False, show_default=True)
@pass_state
def ui(state: CliState, host: str, port: int, access_log: bool) -> None:
    """Serve the web page: alerts, trends, the worst samples and the judge's reasoning,
    verdicts, dead letters and fleet health, read-only; and the review page, where
    reviewers (evalfleet review add-reviewer) label the review queue. Works offline.
    """
    import uvicorn

    settings = state.settings
    token = settings.alerts.ui_token.get_secret_value() if settings.alerts.ui_token else None
    if token is None and not is_loopback(host):
        raise click.UsageError(f"--host {host} is reachable from other machines: set "
                               "EVALFLEET_UI_TOKEN (or bind 127.0.0.1)")
    try:
        app = build_ui_app(settings, token=token)
    except EvalfleetError as exc:
        raise click.UsageError(str(exc)) from None
    install_secret_filter(settings.secret_values())
    click.echo(f"evalfleet ui on http://{host}:{port}/ (token {'on' if token else 'off'})",
               err=True)
    uvicorn.run(app, host=host, port=port, access_log=access_log, log_level="warning")


def is_loopback(host: str) -> bool:
    """True for a loopback address or ``localhost``."""
    if host in _LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def build_ui_app(settings: Any, *, token: str | None) -> Any:
    """The web app over the configured store, rules and queues.

    Raises:
        InvalidAlertRule: When the rules file is invalid.
    """
    from evalfleet.alerts import load_rule_set
    from evalfleet.broker.probe import open_queue_probe
    from evalfleet.cli.status import monitor_options
    from evalfleet.core.metric import load_registry
    from evalfleet.ops.fleet_status import status_json
    from evalfleet.ops.monitor import StatusMonitor
    from evalfleet.web import UiOptions, create_app
    from evalfleet.web.pages import PageData

    rules = load_rule_set(settings)
    store = open_existing_store(settings.resolved_read_database_url(), pool_size=4)

    def read_health() -> dict[str, Any]:
        try:
            probe = open_queue_probe(settings)
        except EvalfleetError as exc:
            return {"queues": [], "error": str(exc)}
        try:
            options = monitor_options(settings, metrics=(), window_s=300.0,
                                      concurrency=settings.worker.worker_concurrency, drain_s=900.0)
            monitor = StatusMonitor(store=store, probe=probe, options=options)
            return status_json(monitor.observe())
        except EvalfleetError as exc:
            return {"queues": [], "error": str(exc)}
        finally:
            probe.close()

    data = PageData(store=store, rules=rules, secrets=tuple(settings.secret_values()),
                    health_reader=read_health, registry=load_registry(settings.judge.metrics_dir))
    from evalfleet.cli.boundary import explain

    url = settings.resolved_database_url()
    options = UiOptions(token=token, secrets=tuple(settings.secret_values()),
                        explain=lambda exc: explain(exc, database_url=url))
    # The review pages write (leases, labels): they use the primary when the pages read a
    # read-only copy.
    primary = (store if settings.resolved_read_database_url() == url
               else open_existing_store(url, pool_size=2))
    return create_app(data, options, review=_review_pages(settings, primary, rules))


def _review_pages(settings: Any, store: Any, rules: Any) -> Any:
    """Builds the review pages (with saving an alert's samples as a dataset) over
    ``store`` once the app gives its renderer."""
    import secrets

    from evalfleet.core.metric import load_registry
    from evalfleet.store.queries.datasets import Datasets
    from evalfleet.store.queries.review_queue import ReviewQueue
    from evalfleet.web.datasets import SavingPages
    from evalfleet.web.review_page import ReviewOptions

    secret = (settings.review.review_secret.get_secret_value().encode("utf-8")
              if settings.review.review_secret else secrets.token_bytes(32))
    options = ReviewOptions(secret=secret, lease_s=settings.review.review_lease_s)
    registry = load_registry(settings.judge.metrics_dir)
    return lambda render: SavingPages(
        datasets=Datasets(store), rules=rules, queue=ReviewQueue(store), registry=registry,
        options=options, render=render)
