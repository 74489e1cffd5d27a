"""The sequential detector's state beside each alert state.

Revision ID: 0014
Revises: 0013
Create Date: 2026-11-27

``alert_states.detector``: for a rule with ``test: sequential``, each of the segment's
e-detectors (one per test: ``baseline``, ``threshold``) as written by
``evalfleet.alerts.edetector.DetectorState.to_json``: a handful of numbers per bet and the
time up to which samples were read. Null for fixed-test rules and for every row before
this revision (a detector with no state starts again).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None

JSON_DOCUMENT = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")


def upgrade() -> None:
    with op.batch_alter_table("alert_states") as batch:
        batch.add_column(sa.Column("detector", JSON_DOCUMENT))


def downgrade() -> None:
    with op.batch_alter_table("alert_states") as batch:
        batch.drop_column("detector")
