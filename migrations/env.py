"""Alembic environment: runs migrations on the connection ``evalfleet migrate`` opens."""

from __future__ import annotations

from alembic import context
from sqlalchemy import create_engine

from evalfleet.store.schema import metadata, schema_filter

config = context.config


def run_migrations() -> None:
    """Upgrade on the connection handed over in the config, or on the configured URL."""
    connection = config.attributes.get("connection")
    if connection is not None:
        _run_on(connection)
        return
    engine = create_engine(config.get_main_option("sqlalchemy.url") or "")
    with engine.connect() as connection:
        _run_on(connection)
        connection.commit()


def _run_on(connection: object) -> None:
    context.configure(
        connection=connection,  # type: ignore[arg-type]
        target_metadata=metadata,
        # SQLite cannot ALTER most things in place; batch mode copies the table.
        render_as_batch=connection.dialect.name == "sqlite",  # type: ignore[attr-defined]
        compare_type=True,
        **schema_filter(connection.dialect.name),  # type: ignore[attr-defined]
    )
    with context.begin_transaction():
        context.run_migrations()


run_migrations()
