"""Judge cascades: how a verdict was reached, and the thresholds fitted on labels.

Revision ID: 0018
Revises: 0017
Create Date: 2026-11-27

``verdicts.cascade``: for a metric judged by a cascade of judges, the tier that settled
the verdict, its model and confidence, the thresholds' version and every tier tried
(``workers.cascade.cascade_record``); null for every row before this revision and for a
metric judged by one model. Nullable, no default: added to every partition of
``verdicts`` without a table rewrite.

``cascade_thresholds``: each fit of a cascade's thresholds on people's labels, one row
per (metric, cascade identity, version); the worker reads the latest version.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0018"
down_revision = "0017"
branch_labels = None
depends_on = None


def upgrade() -> None:
    json_type = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")
    with op.batch_alter_table("verdicts") as batch:
        batch.add_column(sa.Column("cascade", json_type))
    op.create_table(
        "cascade_thresholds",
        sa.Column("metric", sa.String(64), primary_key=True),
        sa.Column("identity", sa.String(128), primary_key=True),
        sa.Column("version", sa.Integer, primary_key=True),
        sa.Column("thresholds", json_type, nullable=False),
        sa.Column("report", json_type, nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("cascade_thresholds")
    with op.batch_alter_table("verdicts") as batch:
        batch.drop_column("cascade")
