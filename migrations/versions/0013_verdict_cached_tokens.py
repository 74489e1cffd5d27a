"""Cached prompt tokens on verdicts.

Revision ID: 0013
Revises: 0012
Create Date: 2026-11-26

``verdicts.cached_tokens``: of a verdict's ``prompt_tokens``, those the provider served
from its prompt cache (``usage.prompt_tokens_details.cached_tokens``), priced at the
model's cached rate; null for every row before this revision and for judges that do not
report it. On Postgres ``verdicts`` is partitioned by day (0008): a column added to the
parent is added to every partition, without a table rewrite (nullable, no default).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("verdicts") as batch:
        batch.add_column(sa.Column("cached_tokens", sa.Integer()))


def downgrade() -> None:
    with op.batch_alter_table("verdicts") as batch:
        batch.drop_column("cached_tokens")
