"""Final jobs that came before their session version's verdict.

Revision ID: 0022
Revises: 0021
Create Date: 2026-11-27

``pending_finals``: the verdict keys of session versions whose final job (``final_wait``
or ``end``) found no verdict to mark yet: a batch held the key (spooled, not yet
collected), or the job was published only to mark, its judging shed by backpressure or
a budget. A provisional verdict saved later under such a key is marked final at once
(``evalfleet.store.finality``), and the row goes.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0022"
down_revision = "0021"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "pending_finals",
        sa.Column("sample_id", sa.String(256), primary_key=True),
        sa.Column("metric", sa.String(64), primary_key=True),
        sa.Column("prompt_version", sa.String(32), primary_key=True),
        sa.Column("judge_model", sa.String(128), primary_key=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("pending_finals")
