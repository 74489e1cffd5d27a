"""Where a bad setup becomes one line for the operator: the CLI's single error boundary.

Every command runs inside :class:`FleetGroup`. An exception that means the setup is wrong
(no schema, a database or broker that does not answer, a URL scheme nobody supports, an
unknown metric, a bad alert rules or sampling file) ends the command with one sentence
that says what is wrong and what to run, and exit status 2. The traceback is printed
only with ``--log-level debug``. Anything else is a bug and keeps its traceback.

Library exceptions are matched here and nowhere else, the most specific first, walking
the chain (``__cause__``, ``__context__``) that the store and the producers raise with.
"""

from __future__ import annotations

import traceback
from collections.abc import Iterator
from typing import Any

import click

from evalfleet.core.errors import BrokerUnavailable, InvalidInput, UnknownMetric
from evalfleet.core.settings import REDIS_SCHEMES

__all__ = ["FleetGroup", "SetupError", "explain"]

#: Exit status of a bad setup (click's own usage errors use it too).
SETUP_EXIT_CODE = 2

#: Broker URL schemes evalfleet supports (filesystem: the embedded default).
_BROKER_SCHEMES = (*REDIS_SCHEMES, "amqp://", "amqps://", "pyamqp://", "filesystem://")


class SetupError(click.ClickException):
    """The setup keeps the command from running: printed as one line, exit status 2."""

    exit_code = SETUP_EXIT_CODE


class FleetGroup(click.Group):
    """A click group whose commands' setup errors are explained in one line."""

    def invoke(self, ctx: click.Context) -> Any:
        """Run the command; translate setup errors into :class:`SetupError`.

        Raises:
            SetupError: When :func:`explain` recognises the failure.
        """
        try:
            return super().invoke(ctx)
        except (click.ClickException, click.exceptions.Exit, click.Abort, SystemExit):
            raise
        except Exception as exc:
            urls = _urls_of(ctx)
            message = explain(exc, database_url=urls[0], broker_url=urls[1])
            if message is None:
                raise
            if getattr(ctx.obj, "debug", False):
                traceback.print_exc()
            raise SetupError(message) from None


def explain(exc: BaseException, *, database_url: str = "", broker_url: str = "") -> str | None:
    """One sentence for a failure caused by the setup, or None for anything else.

    Args:
        exc: What the command raised.
        database_url: The configured database URL (shown without its password).
        broker_url: The configured broker URL (shown without its password).

    Returns:
        What is wrong and what to do about it, or None when ``exc`` is not a setup problem.
    """
    chain = list(_chain(exc))
    database = _masked(database_url)
    broker = _masked(broker_url)
    for error in chain:
        if isinstance(error, UnknownMetric):
            return f"{error}; `evalfleet metrics` lists the metrics"
    for error in chain:
        table = _missing_table(error)
        if table is not None:
            return (f"the database {database} has no evalfleet schema ({table}); "
                    "run `evalfleet migrate`")
    detail = _detail(exc)
    for error in chain:
        message = _database_setup(error, database, detail)
        if message is not None:
            return message
    for error in chain:
        message = _broker_setup(error, broker, detail)
        if message is not None:
            return message
    for error in chain:
        if isinstance(error, InvalidInput):
            return str(error)
    return None


def _database_setup(error: BaseException, database: str, detail: str) -> str | None:
    # Imported here: the CLI starts without SQLAlchemy (about 150 ms) until it is needed.
    from evalfleet.store.setup import SetupProblem, setup_problem

    problem = setup_problem(error)
    if problem is SetupProblem.UNSUPPORTED:
        return (f"EVALFLEET_DATABASE_URL {database} is not a database evalfleet supports; "
                "use postgresql+psycopg://user@host:5432/name or sqlite:///path")
    # Connection, authentication and missing-database errors; an IntegrityError or a
    # ProgrammingError is a bug and keeps its traceback.
    if problem is SetupProblem.UNREACHABLE:
        return (f"cannot use the database {database} ({detail}); check "
                "EVALFLEET_DATABASE_URL and that the server is up")
    return None


def _broker_setup(error: BaseException, broker: str, detail: str) -> str | None:
    # kombu fails on a scheme it lacks with a KeyError, and on one whose transport
    # evalfleet does not ship with whatever that transport's import raises.
    if (isinstance(error, KeyError) and _raised_in(error, "kombu/transport")) or (
            broker and not broker.startswith(_BROKER_SCHEMES) and _raised_in(error, "kombu")):
        return (f"EVALFLEET_BROKER_URL {broker} is not a broker evalfleet supports; "
                "use redis://host:6379/0 or amqp://user:password@host:5672/vhost")
    from amqp.exceptions import AccessRefused, NotAllowed
    from kombu.exceptions import OperationalError as KombuOperationalError
    from redis.exceptions import AuthenticationError, ResponseError
    from redis.exceptions import ConnectionError as RedisConnectionError

    # Refused logins and unknown virtual hosts (RabbitMQ), refused passwords (Redis).
    if isinstance(error, AccessRefused | NotAllowed | AuthenticationError) or (
            isinstance(error, ResponseError) and "AUTH" in str(error).upper()):
        return (f"the broker {broker} refused the connection ({detail}); check the user, "
                "password and virtual host in EVALFLEET_BROKER_URL")
    if isinstance(error, BrokerUnavailable | KombuOperationalError | RedisConnectionError):
        return (f"cannot reach the broker {broker} ({detail}); check "
                "EVALFLEET_BROKER_URL and that the server is up")
    return None


def _missing_table(error: BaseException) -> str | None:
    from evalfleet.store.setup import missing_table

    return missing_table(error)


def _chain(exc: BaseException) -> Iterator[BaseException]:
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        current = current.__cause__ or current.__context__


def _raised_in(error: BaseException, part: str) -> bool:
    """Whether ``error`` was raised in a file whose path contains ``part``."""
    frames = traceback.extract_tb(error.__traceback__)
    return bool(frames) and f"/{part}/" in frames[-1].filename.replace("\\", "/")


def _detail(exc: BaseException) -> str:
    """The driver's own words: the first line of the deepest error in the ``from`` chain.

    Only explicit causes are followed: an implicit ``__context__`` is often a library's
    internal noise (an empty pool's ``IndexError``), not what went wrong.
    """
    deepest, seen = exc, {id(exc)}
    while True:
        nxt = getattr(deepest, "orig", None) or deepest.__cause__
        if not isinstance(nxt, BaseException) or id(nxt) in seen:
            break
        deepest = nxt
        seen.add(id(nxt))
    text = str(deepest).strip()
    return text.splitlines()[0].strip() if text else type(deepest).__name__


def _masked(url: str) -> str:
    from evalfleet.store.setup import describe_url

    return describe_url(url)


def _urls_of(ctx: click.Context) -> tuple[str, str]:
    """The configured database and broker URLs, or blanks when the settings are invalid."""
    state = ctx.obj
    try:
        settings = state.settings
        return settings.resolved_database_url(), settings.resolved_broker_url()
    except Exception:  # invalid settings are reported by whoever reads them
        return "", ""
