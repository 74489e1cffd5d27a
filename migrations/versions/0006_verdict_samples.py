"""Verdicts keep the sample they judged, in a table of their own.

Revision ID: 0006_verdict_samples
Revises: 0006
Create Date: 2026-11-25

``verdict_samples``: one row per verdict whose worker kept the sample content
(``EVALFLEET_KEEP_SAMPLES``): input, output, context, reference and fields as the
producer accepted them, after redaction. Keyed by the verdict and deleted with it;
``created_at`` (the verdict's) lets ``evalfleet purge`` apply
``EVALFLEET_SAMPLE_RETENTION_DAYS`` along its own index without touching verdicts.
Verdicts written before this revision have no row.

``alert_transitions``: every change of state of an alert rule and segment, with the
numbers (and worst samples) of the evaluation that caused it, for ``evalfleet alerts
show`` and the web page.

``alert_points``: one row per evaluation of a rule and segment (window and baseline
means and counts, state), kept two days by the engine: the rollup behind the web
page's sparklines and baseline bands.

``ix_verdicts_attributes``: on Postgres a GIN index (``jsonb_path_ops``) on the
verdicts' attributes, so a segment's verdicts (``attributes @> {...}``) are found
without reading every segment's: the web page's alert view reads one segment's
baseline day in milliseconds instead of the whole day's scores (see
``bench/ui_pages.py``); on SQLite a plain index, unused. On a large table, create it beforehand with
``CREATE INDEX CONCURRENTLY`` to avoid blocking inserts during the migration.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0006_verdict_samples"
down_revision = "0006"
branch_labels = None
depends_on = None

JSON_DOCUMENT = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")
SURROGATE_KEY = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "verdict_samples",
        sa.Column("verdict_id", SURROGATE_KEY, nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("sample", JSON_DOCUMENT, nullable=False),
        sa.ForeignKeyConstraint(["verdict_id"], ["verdicts.id"], ondelete="CASCADE",
                                name="fk_verdict_samples_verdict_id_verdicts"),
        sa.PrimaryKeyConstraint("verdict_id", name="pk_verdict_samples"),
    )
    op.create_index("ix_verdict_samples_created_at", "verdict_samples", ["created_at"])
    op.create_table(
        "alert_transitions",
        sa.Column("id", SURROGATE_KEY, autoincrement=True, nullable=False),
        sa.Column("rule", sa.String(128), nullable=False),
        sa.Column("segment_key", sa.String(64), nullable=False),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("previous", sa.String(24), nullable=False),
        sa.Column("state", sa.String(24), nullable=False),
        sa.Column("events", sa.String(128), nullable=False),
        sa.Column("finding", JSON_DOCUMENT, nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_alert_transitions"),
    )
    op.create_index("ix_alert_transitions_rule_segment_key_at", "alert_transitions",
                    ["rule", "segment_key", "at"])

    op.create_table(
        "alert_points",
        sa.Column("rule", sa.String(128), nullable=False),
        sa.Column("segment_key", sa.String(64), nullable=False),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("n", sa.Integer(), nullable=False),
        sa.Column("mean", sa.Float()),
        sa.Column("baseline_n", sa.Integer()),
        sa.Column("baseline_mean", sa.Float()),
        sa.Column("state", sa.String(24), nullable=False),
        sa.PrimaryKeyConstraint("rule", "segment_key", "at", name="pk_alert_points"),
    )
    op.create_index("ix_alert_points_rule_at", "alert_points", ["rule", "at"])
    op.create_index("ix_verdicts_attributes", "verdicts", ["attributes"],
                    postgresql_using="gin", postgresql_ops={"attributes": "jsonb_path_ops"})


def downgrade() -> None:
    op.drop_index("ix_verdicts_attributes", table_name="verdicts")
    op.drop_table("alert_points")
    op.drop_index("ix_alert_transitions_rule_segment_key_at", table_name="alert_transitions")
    op.drop_table("alert_transitions")
    op.drop_index("ix_verdict_samples_created_at", table_name="verdict_samples")
    op.drop_table("verdict_samples")
