"""Dead letters keep their attempt history; retention tasks keep how far they got.

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-24

``dead_letters.history``: one JSON entry per failed delivery (time, attempt, error
class, error). Rows written before this revision get an empty list.

``retention_marks``: per retention task and metric, the creation time up to which
``evalfleet purge`` has handled verdicts, so the raw-output purge reads only new rows
instead of every verdict it emptied before.

No index is added for retention: the purge walks the existing (metric, created_at)
index of ``verdicts`` one metric at a time (see docs/operating.md, Retention, for the plans).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None

JSON_DOCUMENT = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")
TIMESTAMP = sa.DateTime(timezone=True)


def upgrade() -> None:
    # A constant default: Postgres adds the column without rewriting the table.
    with op.batch_alter_table("dead_letters") as batch:
        batch.add_column(sa.Column("history", JSON_DOCUMENT, nullable=False,
                                   server_default=sa.text("'[]'")))
    op.create_table(
        "retention_marks",
        sa.Column("task", sa.String(32), nullable=False),
        sa.Column("metric", sa.String(64), nullable=False),
        sa.Column("done_until", TIMESTAMP, nullable=False),
        sa.PrimaryKeyConstraint("task", "metric", name="pk_retention_marks"),
    )


def downgrade() -> None:
    op.drop_table("retention_marks")
    with op.batch_alter_table("dead_letters") as batch:
        batch.drop_column("history")
