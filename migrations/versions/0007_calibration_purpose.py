"""Verdicts say what they are for; calibration reports are kept.

Revision ID: 0007
Revises: 0006_verdict_samples
Create Date: 2026-11-25

``verdicts.purpose``: ``production`` (every row before this revision), ``calibration``,
``canary`` or ``shadow``. Only production verdicts get ``verdict_scores`` rows, so alerts
and dashboards see the app's traffic alone. ``calibration_runs``: one row per
``evalfleet calibrate`` report (metric, prompt version, judge model, gold set, the
statistics as JSON).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0007"
down_revision = "0006_verdict_samples"
branch_labels = None
depends_on = None

JSON_DOCUMENT = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")
SURROGATE_KEY = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    with op.batch_alter_table("verdicts") as batch:
        batch.add_column(sa.Column("purpose", sa.String(16), nullable=False,
                                   server_default="production"))
    op.create_table(
        "calibration_runs",
        sa.Column("id", SURROGATE_KEY, autoincrement=True, nullable=False),
        sa.Column("metric", sa.String(64), nullable=False),
        sa.Column("prompt_version", sa.String(32), nullable=False),
        sa.Column("judge_model", sa.String(128), nullable=False),
        sa.Column("gold", sa.String(256), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("report", JSON_DOCUMENT, nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_calibration_runs"),
    )
    op.create_index("ix_calibration_runs_metric_created_at", "calibration_runs",
                    ["metric", "created_at"])


def downgrade() -> None:
    op.drop_index("ix_calibration_runs_metric_created_at", table_name="calibration_runs")
    op.drop_table("calibration_runs")
    with op.batch_alter_table("verdicts") as batch:
        batch.drop_column("purpose")
