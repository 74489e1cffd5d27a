"""Batch judging: the spool of jobs waiting for a batch, and the batches sent.

Revision ID: 0012
Revises: 0011
Create Date: 2026-11-26

``judge_batch_spool``: one row per job taken in batch mode, by its verdict key's digest
(the batch line's ``custom_id``), with the job and the rendered request; ``batch`` names
the batch carrying it (null while it waits). ``judge_batches``: one row per batch, from
the moment its lines are chosen (``preparing``) through creation at the provider
(``open``) to collection (``done``), with what its verdicts cost and saved.
``verdicts.judge_mode``: ``call`` (every row before this revision) or ``batch``.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("verdicts") as batch:
        batch.add_column(sa.Column("judge_mode", sa.String(8), nullable=False,
                                   server_default="call"))
    op.create_table(
        "judge_batch_spool",
        sa.Column("key", sa.String(64), primary_key=True),
        sa.Column("judge_model", sa.String(128), nullable=False),
        sa.Column("metric", sa.String(64), nullable=False),
        sa.Column("job", sa.Text(), nullable=False),
        sa.Column("body", sa.Text(), nullable=False),
        sa.Column("body_bytes", sa.Integer(), nullable=False),
        sa.Column("spooled_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("not_before", sa.DateTime(timezone=True), nullable=False),
        sa.Column("batch", sa.String(64)),
    )
    op.create_index("ix_judge_batch_spool_judge_model_batch_spooled_at", "judge_batch_spool",
                    ["judge_model", "batch", "spooled_at"])
    op.create_index("ix_judge_batch_spool_batch", "judge_batch_spool", ["batch"])
    op.create_table(
        "judge_batches",
        sa.Column("id", sa.String(64), primary_key=True),
        sa.Column("judge_model", sa.String(128), nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("provider_id", sa.String(128)),
        sa.Column("input_file_id", sa.String(128)),
        sa.Column("status", sa.String(16)),
        sa.Column("requests", sa.Integer(), nullable=False),
        sa.Column("completed", sa.Integer(), nullable=False, server_default=sa.text("0")),
        sa.Column("failed", sa.Integer(), nullable=False, server_default=sa.text("0")),
        sa.Column("estimated_cost_usd", sa.Float()),
        sa.Column("cost_usd", sa.Float(), nullable=False, server_default=sa.text("0")),
        sa.Column("saved_usd", sa.Float(), nullable=False, server_default=sa.text("0")),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("finished_at", sa.DateTime(timezone=True)),
    )
    op.create_index("ix_judge_batches_state", "judge_batches", ["state"])


def downgrade() -> None:
    op.drop_table("judge_batches")
    op.drop_table("judge_batch_spool")
    with op.batch_alter_table("verdicts") as batch:
        batch.drop_column("judge_mode")
