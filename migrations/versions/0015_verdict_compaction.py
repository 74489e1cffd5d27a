"""What compaction cut from a verdict's trajectory.

Revision ID: 0015
Revises: 0014
Create Date: 2026-11-27

``verdicts.compaction``: for a verdict whose sample's trajectory was compacted into the
metric's token budget, what was cut (``{"original_chars", "cut_chars", "pieces_cut"}``);
null for every row before this revision and for verdicts nothing was cut from. Nullable,
no default: added to every partition of ``verdicts`` without a table rewrite.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None


def upgrade() -> None:
    json_type = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")
    with op.batch_alter_table("verdicts") as batch:
        batch.add_column(sa.Column("compaction", json_type))


def downgrade() -> None:
    with op.batch_alter_table("verdicts") as batch:
        batch.drop_column("compaction")
