"""Verdicts, their scores, dead letters and job claims.

Revision ID: 0001
Revises:
Create Date: 2026-11-22
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

JSON_DOCUMENT = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")
SURROGATE_KEY = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
TIMESTAMP = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "verdicts",
        sa.Column("id", SURROGATE_KEY, autoincrement=True, nullable=False),
        sa.Column("sample_id", sa.String(256), nullable=False),
        sa.Column("metric", sa.String(64), nullable=False),
        sa.Column("prompt_version", sa.String(32), nullable=False),
        sa.Column("judge_model", sa.String(128), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("error_class", sa.String(32)),
        sa.Column("error", sa.Text()),
        sa.Column("reason", sa.Text()),
        sa.Column("scores", JSON_DOCUMENT, nullable=False),
        sa.Column("raw_scores", JSON_DOCUMENT, nullable=False),
        sa.Column("raw_output", sa.Text()),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("latency_ms", sa.Integer(), nullable=False),
        sa.Column("prompt_tokens", sa.Integer()),
        sa.Column("completion_tokens", sa.Integer()),
        sa.Column("attributes", JSON_DOCUMENT, nullable=False),
        sa.Column("sample_ts", TIMESTAMP, nullable=False),
        sa.Column("created_at", TIMESTAMP, nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_verdicts"),
        sa.UniqueConstraint(
            "sample_id", "metric", "prompt_version", "judge_model",
            name="uq_verdicts_sample_id_metric_prompt_version_judge_model",
        ),
    )
    op.create_index("ix_verdicts_metric_created_at", "verdicts", ["metric", "created_at"])
    op.create_index("ix_verdicts_metric_sample_ts", "verdicts", ["metric", "sample_ts"])

    op.create_table(
        "verdict_scores",
        sa.Column("verdict_id", SURROGATE_KEY, nullable=False),
        sa.Column("name", sa.String(64), nullable=False),
        sa.Column("metric", sa.String(64), nullable=False),
        sa.Column("value", sa.Float()),
        sa.Column("sample_ts", TIMESTAMP, nullable=False),
        sa.ForeignKeyConstraint(
            ["verdict_id"], ["verdicts.id"], ondelete="CASCADE",
            name="fk_verdict_scores_verdict_id_verdicts",
        ),
        sa.PrimaryKeyConstraint("verdict_id", "name", name="pk_verdict_scores"),
    )
    op.create_index(
        "ix_verdict_scores_metric_name_sample_ts", "verdict_scores",
        ["metric", "name", "sample_ts"], postgresql_include=["value", "verdict_id"],
    )

    op.create_table(
        "dead_letters",
        sa.Column("id", SURROGATE_KEY, autoincrement=True, nullable=False),
        sa.Column("sample_id", sa.String(256)),
        sa.Column("metric", sa.String(64)),
        sa.Column("error_class", sa.String(32), nullable=False),
        sa.Column("error", sa.Text(), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("payload", JSON_DOCUMENT, nullable=False),
        sa.Column("created_at", TIMESTAMP, nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_dead_letters"),
    )
    op.create_index("ix_dead_letters_metric_created_at", "dead_letters", ["metric", "created_at"])

    op.create_table(
        "claims",
        sa.Column("key", sa.String(64), nullable=False),
        sa.Column("owner", sa.String(128), nullable=False),
        sa.Column("expires_at", TIMESTAMP, nullable=False),
        sa.PrimaryKeyConstraint("key", name="pk_claims"),
    )


def downgrade() -> None:
    op.drop_table("claims")
    op.drop_index("ix_dead_letters_metric_created_at", table_name="dead_letters")
    op.drop_table("dead_letters")
    op.drop_index("ix_verdict_scores_metric_name_sample_ts", table_name="verdict_scores")
    op.drop_table("verdict_scores")
    op.drop_index("ix_verdicts_metric_sample_ts", table_name="verdicts")
    op.drop_index("ix_verdicts_metric_created_at", table_name="verdicts")
    op.drop_table("verdicts")
