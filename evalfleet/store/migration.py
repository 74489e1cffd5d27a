"""Schema creation and upgrades through Alembic (``evalfleet migrate``)."""

from __future__ import annotations

from importlib import resources

from alembic import command
from alembic.config import Config
from sqlalchemy import Engine


def alembic_config(engine: Engine) -> Config:
    """An Alembic config pointing at the bundled ``migrations/`` package."""
    config = Config()
    config.set_main_option("script_location", str(resources.files("migrations")))
    return config


def migrate(engine: Engine, *, revision: str = "head") -> None:
    """Create or upgrade the schema to ``revision`` on ``engine``'s database."""
    config = alembic_config(engine)
    with engine.begin() as connection:
        config.attributes["connection"] = connection
        command.upgrade(config, revision)
