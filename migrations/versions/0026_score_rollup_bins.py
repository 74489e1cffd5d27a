"""A minute's off-grid scores counted per tenth of 0..1 in the score rollups.

Revision ID: 0026
Revises: 0025
Create Date: 2026-11-28

The rollups' triggers are made again so that a minute bucket's off-grid values go to
the row of their histogram bin instead of one ``OFF_GRID`` row
(``evalfleet.store.rollup.binned_level``): the alert page then draws a window's
histogram from the minute rows and picks the minutes that can hold its worst samples,
instead of reading every score row of the window. The sums the engine reads are the
same. The rows kept before stay as they are (rebuilding a busy store's rollups would
hold the upgrade for a scan of every score): a minute still holding an ``OFF_GRID`` row
has its score rows read, as before.
"""

from __future__ import annotations

from alembic import op

from evalfleet.store.rollup import drop_trigger_statements, rebuild, trigger_statements

revision = "0026"
down_revision = "0025"
branch_labels = None
depends_on = None


def upgrade() -> None:
    _make_triggers(binned=True)


def downgrade() -> None:
    _make_triggers(binned=False)
    # Earlier code reads a binned row's level as a value on the grid.
    rebuild(op.get_bind(), binned=False)


def _make_triggers(*, binned: bool) -> None:
    bind = op.get_bind()
    for statement in [*drop_trigger_statements(bind.dialect.name),
                      *trigger_statements(bind.dialect.name, binned=binned)]:
        bind.exec_driver_sql(statement)  # colons in SQLite's times are not parameters
