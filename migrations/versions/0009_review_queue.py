"""The review queue: items people label, their labels and skips, and reviewers.

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-26

``review_items``: one per sample and metric, naming its verdict by key digest (never
``verdicts.id``), with why it was queued and its inclusion probability, a copy of the
sample and of the judge's scores. ``review_labels``: one row per item, reviewer and
score. ``review_skips``: who passed on which item. ``reviewers``: names and the SHA-256
of their tokens.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None

JSON_DOCUMENT = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")
SURROGATE_KEY = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "review_items",
        sa.Column("id", SURROGATE_KEY, autoincrement=True, nullable=False),
        sa.Column("sample_id", sa.String(256), nullable=False),
        sa.Column("metric", sa.String(64), nullable=False),
        sa.Column("verdict_key", sa.String(64), nullable=False),
        sa.Column("prompt_version", sa.String(32), nullable=False),
        sa.Column("judge_model", sa.String(128), nullable=False),
        sa.Column("reason", sa.String(16), nullable=False),
        sa.Column("detail", sa.String(256)),
        sa.Column("probability", sa.Float()),
        sa.Column("stratum", sa.String(32)),
        sa.Column("labels_wanted", sa.Integer(), nullable=False),
        sa.Column("labels_given", sa.Integer(), nullable=False, server_default=sa.text("0")),
        sa.Column("skips", sa.Integer(), nullable=False, server_default=sa.text("0")),
        sa.Column("lease_owner", sa.String(128)),
        sa.Column("lease_expires_at", sa.DateTime(timezone=True)),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("done_at", sa.DateTime(timezone=True)),
        sa.Column("judge_scores", JSON_DOCUMENT, nullable=False),
        sa.Column("judge_raw_scores", JSON_DOCUMENT, nullable=False),
        sa.Column("judge_reason", sa.Text()),
        sa.Column("attributes", JSON_DOCUMENT, nullable=False),
        sa.Column("sample", JSON_DOCUMENT),
        sa.PrimaryKeyConstraint("id", name="pk_review_items"),
        sa.UniqueConstraint("sample_id", "metric", name="uq_review_items_sample_id_metric"),
    )
    op.create_index("ix_review_items_done_at_id", "review_items",
                    ["done_at", "id"])
    op.create_index("ix_review_items_metric_created_at", "review_items",
                    ["metric", "created_at"])
    op.create_index("ix_review_items_lease_owner", "review_items", ["lease_owner"])
    op.create_table(
        "review_labels",
        sa.Column("item_id", SURROGATE_KEY, nullable=False),
        sa.Column("reviewer", sa.String(128), nullable=False),
        sa.Column("score", sa.String(64), nullable=False),
        sa.Column("raw_value", JSON_DOCUMENT),
        sa.Column("value", sa.Float()),
        sa.Column("comment", sa.Text()),
        sa.Column("source", sa.String(16), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["item_id"], ["review_items.id"], ondelete="CASCADE",
                                name="fk_review_labels_item_id_review_items"),
        sa.PrimaryKeyConstraint("item_id", "reviewer", "score", name="pk_review_labels"),
    )
    op.create_table(
        "review_skips",
        sa.Column("item_id", SURROGATE_KEY, nullable=False),
        sa.Column("reviewer", sa.String(128), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["item_id"], ["review_items.id"], ondelete="CASCADE",
                                name="fk_review_skips_item_id_review_items"),
        sa.PrimaryKeyConstraint("item_id", "reviewer", name="pk_review_skips"),
    )
    op.create_table(
        "reviewers",
        sa.Column("name", sa.String(128), nullable=False),
        sa.Column("token_digest", sa.String(64), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("name", name="pk_reviewers"),
        sa.UniqueConstraint("token_digest", name="uq_reviewers_token_digest"),
    )


def downgrade() -> None:
    op.drop_table("reviewers")
    op.drop_table("review_skips")
    op.drop_table("review_labels")
    op.drop_index("ix_review_items_lease_owner", table_name="review_items")
    op.drop_index("ix_review_items_metric_created_at", table_name="review_items")
    op.drop_index("ix_review_items_done_at_id", table_name="review_items")
    op.drop_table("review_items")
