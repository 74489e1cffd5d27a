"""A dead letter settles its verdict key, once.

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-22

``dead_letters.verdict_key``: the digest of the verdict key (sample, metric, prompt
version, judge model) the job would have made, unique. A second copy of a job that was
dead-lettered (a redelivery while the first copy was still being judged) finds it when
claiming and is acknowledged instead of being judged and dead-lettered again. Null for
messages that could not be read and for rows written before this revision.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("dead_letters") as batch:
        batch.add_column(sa.Column("verdict_key", sa.String(64)))
        batch.create_unique_constraint("uq_dead_letters_verdict_key", ["verdict_key"])


def downgrade() -> None:
    with op.batch_alter_table("dead_letters") as batch:
        batch.drop_constraint("uq_dead_letters_verdict_key", type_="unique")
        batch.drop_column("verdict_key")
