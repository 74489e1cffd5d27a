"""Datasets: samples saved from production as versioned copies.

Revision ID: 0011
Revises: 0009
Create Date: 2026-11-26

``datasets``: one row per name, with its own retention. ``dataset_items``: a copy of a
verdict as judged (sample, scores, reasoning, people's labels), named by verdict key
digest, never ``verdicts.id``. ``dataset_versions`` and ``dataset_members``: each
version and its items in order.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0011"
down_revision = "0009"
branch_labels = None
depends_on = None

JSON_DOCUMENT = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")
SURROGATE_KEY = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "datasets",
        sa.Column("id", SURROGATE_KEY, autoincrement=True, nullable=False),
        sa.Column("name", sa.String(128), nullable=False),
        sa.Column("description", sa.String(1024)),
        sa.Column("retention_days", sa.Float()),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_datasets"),
        sa.UniqueConstraint("name", name="uq_datasets_name"),
    )
    op.create_table(
        "dataset_items",
        sa.Column("id", SURROGATE_KEY, autoincrement=True, nullable=False),
        sa.Column("dataset_id", SURROGATE_KEY, nullable=False),
        sa.Column("verdict_key", sa.String(64), nullable=False),
        sa.Column("sample_id", sa.String(256), nullable=False),
        sa.Column("metric", sa.String(64), nullable=False),
        sa.Column("prompt_version", sa.String(32), nullable=False),
        sa.Column("judge_model", sa.String(128), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("error_class", sa.String(32)),
        sa.Column("scores", JSON_DOCUMENT, nullable=False),
        sa.Column("raw_scores", JSON_DOCUMENT, nullable=False),
        sa.Column("reason", sa.Text()),
        sa.Column("attributes", JSON_DOCUMENT, nullable=False),
        sa.Column("sample", JSON_DOCUMENT),
        sa.Column("sample_ts", sa.DateTime(timezone=True), nullable=False),
        sa.Column("judged_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("reviews", JSON_DOCUMENT, nullable=False),
        sa.Column("added_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["dataset_id"], ["datasets.id"], ondelete="CASCADE",
                                name="fk_dataset_items_dataset_id_datasets"),
        sa.PrimaryKeyConstraint("id", name="pk_dataset_items"),
        sa.UniqueConstraint("dataset_id", "verdict_key",
                            name="uq_dataset_items_dataset_id_verdict_key"),
    )
    op.create_index("ix_dataset_items_sample_id", "dataset_items", ["sample_id"])
    op.create_table(
        "dataset_versions",
        sa.Column("dataset_id", SURROGATE_KEY, nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("note", sa.String(512), nullable=False),
        sa.ForeignKeyConstraint(["dataset_id"], ["datasets.id"], ondelete="CASCADE",
                                name="fk_dataset_versions_dataset_id_datasets"),
        sa.PrimaryKeyConstraint("dataset_id", "version", name="pk_dataset_versions"),
    )
    op.create_table(
        "dataset_members",
        sa.Column("dataset_id", SURROGATE_KEY, nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("position", sa.Integer(), nullable=False),
        sa.Column("item_id", SURROGATE_KEY, nullable=False),
        sa.ForeignKeyConstraint(["dataset_id"], ["datasets.id"], ondelete="CASCADE",
                                name="fk_dataset_members_dataset_id_datasets"),
        sa.ForeignKeyConstraint(["item_id"], ["dataset_items.id"], ondelete="CASCADE",
                                name="fk_dataset_members_item_id_dataset_items"),
        sa.PrimaryKeyConstraint("dataset_id", "version", "position",
                                name="pk_dataset_members"),
    )
    op.create_index("ix_dataset_members_item_id", "dataset_members", ["item_id"])


def downgrade() -> None:
    op.drop_index("ix_dataset_members_item_id", table_name="dataset_members")
    op.drop_table("dataset_members")
    op.drop_table("dataset_versions")
    op.drop_index("ix_dataset_items_sample_id", table_name="dataset_items")
    op.drop_table("dataset_items")
    op.drop_table("datasets")
