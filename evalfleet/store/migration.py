"""Schema creation and upgrades through Alembic (``evalfleet migrate``)."""

from __future__ import annotations

from datetime import UTC, datetime
from importlib import resources

from alembic import command
from alembic.config import Config
from sqlalchemy import Engine

from evalfleet.store.segment_index import build_segment_index
from evalfleet.store.upgrade import needs_upgrade, prepare


def schema_revision(engine: Engine) -> str | None:
    """The Alembic revision of ``engine``'s schema, or None when it has none yet."""
    from alembic.runtime.migration import MigrationContext

    with engine.connect() as conn:
        return MigrationContext.configure(conn).get_current_revision()


def alembic_config(engine: Engine) -> Config:
    """An Alembic config pointing at the bundled ``migrations/`` package."""
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
    config = alembic_config(engine)
    with engine.begin() as connection:
        config.attributes["connection"] = connection
        command.upgrade(config, revision)
