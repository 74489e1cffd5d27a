"""Schema creation and upgrades through Alembic (``evalfleet migrate``)."""

from __future__ import annotations

from datetime import UTC, datetime
from importlib import resources
from typing import TYPE_CHECKING

from sqlalchemy import Engine

from evalfleet.store.segment_index import build_segment_index
from evalfleet.store.upgrade import needs_upgrade, prepare

if TYPE_CHECKING:
    from alembic.config import Config

# Alembic is imported where a schema is read or changed, not with the store: importing it
# costs about 0.6 s of CPU, paid by every worker and command that starts and never
# migrates.


def schema_revision(engine: Engine) -> str | None:
    """The Alembic revision of ``engine``'s schema, or None when it has none yet."""
    from alembic.runtime.migration import MigrationContext

    with engine.connect() as conn:
        return MigrationContext.configure(conn).get_current_revision()


def alembic_config(engine: Engine) -> Config:
    """An Alembic config pointing at the bundled ``migrations/`` package."""
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(resources.files("migrations")))
    return config


def migrate(engine: Engine, *, revision: str = "head") -> None:
    """Create or upgrade the schema to ``revision`` on ``engine``'s database.

    A Postgres store that holds verdicts in plain tables is first prepared for
    partitioning online (:func:`evalfleet.store.upgrade.prepare`: resumable, the fleet
    may run), so that revision 0008 holds its locks for a moment only; a partitioned one
    gets the segment index of revision 0023 built a partition at a time without holding
    writes back (:func:`evalfleet.store.segment_index.build_segment_index`).
    """
    with engine.connect() as conn:
        prepare_first = revision == "head" and needs_upgrade(conn)
    if prepare_first:
        prepare(engine, now=datetime.now(UTC))
    if revision == "head":
        build_segment_index(engine)
    from alembic import command

    config = alembic_config(engine)
    with engine.begin() as connection:
        config.attributes["connection"] = connection
        command.upgrade(config, revision)
