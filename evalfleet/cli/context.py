"""What every command shares: the settings (built once, on first use) and time parsing."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

import click

from evalfleet.cli.boundary import SetupError
from evalfleet.core.durations import EXAMPLES, parse_duration
from evalfleet.core.errors import InvalidSettings
from evalfleet.core.settings import Settings, load_settings

if TYPE_CHECKING:
    from evalfleet.store import SqlStore


class CliState:
    """Per-invocation state: the settings, read from the environment on first use."""

    def __init__(self) -> None:
        self._settings: Settings | None = None
        self.debug = False
        """Whether ``--log-level debug`` was given: setup errors then show their traceback."""

    @property
    def settings(self) -> Settings:
        """The settings; invalid ones end the command with a clear error, and each
        ``EVALFLEET_*`` variable that is no setting gets one warning line."""
        if self._settings is None:
            try:
                settings, unknown = load_settings()
            except InvalidSettings as exc:
                raise SetupError(str(exc)) from None
            for variable in unknown:
                click.echo(f"Warning: {variable}", err=True)
            self._settings = settings
        return self._settings


pass_state = click.make_pass_decorator(CliState, ensure=True)


def open_existing_store(url: str, *, pool_size: int = 10) -> SqlStore:
    """The store at ``url``, which must exist already: every command but ``migrate`` uses
    this, so reading a folder with no store never leaves an empty SQLite file behind.

    Raises:
        SetupError: When ``url`` names a SQLite file that does not exist.
    """
    from evalfleet.store import open_store
    from evalfleet.store.setup import sqlite_file

    path = sqlite_file(url)
    if path is not None and not Path(path).exists():
        raise SetupError(f"no evalfleet store at {path} yet: run `evalfleet migrate` to "
                         "create one, or set EVALFLEET_DATABASE_URL to yours (the demo "
                         "prints its own)")
    return open_store(url, pool_size=pool_size)


def require_schema(settings: Settings) -> None:
    """Read the verdict table once, so a long-running command without a schema stops at
    start with the boundary's one-line advice instead of failing every job.

    Raises:
        StoreUnavailable: When the database cannot be reached or has no schema.
    """
    store = open_existing_store(settings.resolved_database_url(), pool_size=1)
    try:
        next(iter(store.iter_verdicts(since=datetime.now(UTC))), None)
    finally:
        store.close()


def parse_time(text: str | None, *, now: datetime | None = None) -> datetime | None:
    """Parse an ISO 8601 time (zone required) or a duration ago (``15m``, ``2h``, ``7d``).

    Raises:
        ValueError: When ``text`` is neither.
    """
    if text is None:
        return None
    now = now or datetime.now(UTC)
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        try:
            ago = parse_duration(text)
        except ValueError:
            raise ValueError(f"{text!r} is not an ISO 8601 time or a duration such as "
                             f"{EXAMPLES}") from None
        try:
            return now - ago
        except OverflowError:
            raise ValueError(f"{text!r} reaches back before the year 1") from None
    if moment.tzinfo is None:
        raise ValueError(f"{text!r} has no timezone; add Z or +00:00")
    return moment
