"""Does the database answer? One query on a fresh connection, for readiness probes.

The probe keeps no connection between two asks (``NullPool``): a probe that reused a
pooled connection would report a database that stopped accepting new connections as up.
"""

from __future__ import annotations

from typing import Any

import sqlalchemy
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.pool import NullPool

from evalfleet.core.errors import StoreUnavailable


class DatabasePing:
    """Asks the database at ``url`` for ``SELECT 1`` on a fresh connection each time.

    Args:
        url: The SQLAlchemy URL.
        timeout_s: Connect timeout (Postgres; whole seconds, at least one).
    """

    def __init__(self, url: str, *, timeout_s: float) -> None:
        connect_args: dict[str, Any] = {}
        if url.startswith("postgresql"):
            connect_args["connect_timeout"] = max(1, round(timeout_s))
        self._engine = sqlalchemy.create_engine(url, poolclass=NullPool, connect_args=connect_args)

    def ping(self) -> None:
        """Ask once.

        Raises:
            StoreUnavailable: The database did not answer; the reason names the
                driver's error class and its first line.
        """
        try:
            with self._engine.connect() as connection:
                connection.execute(sqlalchemy.text("SELECT 1"))
        except SQLAlchemyError as exc:
            reason = str(getattr(exc, "orig", None) or exc).strip().splitlines()[0]
            raise StoreUnavailable(f"{type(exc).__name__}: {reason}") from exc
