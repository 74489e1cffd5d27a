"""The score rollups' insert trigger finds each new score's verdict by its key's index.

Revision ID: 0025
Revises: 0024
Create Date: 2026-11-27

Postgres only (SQLite's row triggers read one verdict by its key already): the trigger
function joined its transition table to ``verdicts``, and a session plans it once, when
it first fires; planned while the tables were small it hashed the new rows and scanned
every partition of ``verdicts`` whole on every save, a cost that grew with the table
(``evalfleet.store.rollup``). The function is made again with a lateral lookup by
``(id, created_at)``; what it adds is the same, so the rollups are not rebuilt.
"""

from __future__ import annotations

from alembic import op

from evalfleet.store.rollup import trigger_statements

revision = "0025"
down_revision = "0024"
branch_labels = None
depends_on = None


def upgrade() -> None:
    bind = op.get_bind()
    if bind.dialect.name != "postgresql":
        return
    for statement in trigger_statements(bind.dialect.name, binned=False):
        if statement.startswith("CREATE OR REPLACE FUNCTION score_rollups_add()"):
            bind.exec_driver_sql(statement)


def downgrade() -> None:
    """The lookup stays: it adds what the join added."""
