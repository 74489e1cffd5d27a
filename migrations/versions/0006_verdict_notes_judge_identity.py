"""Verdicts keep their annotation notes and what the judge reported about itself.

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-25

``verdicts.notes``: the annotations (explanations, ``error_type``, ...) the judge left
out or wrote off-spec; they no longer reject a verdict. ``judge_reported_model`` and
``judge_fingerprint``: the response's ``model`` and ``system_fingerprint``, beside the
model asked for, so a provider's silent model change shows in the data. All null for
rows written before this revision.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None

JSON_DOCUMENT = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")


def upgrade() -> None:
    with op.batch_alter_table("verdicts") as batch:
        batch.add_column(sa.Column("notes", JSON_DOCUMENT))
        batch.add_column(sa.Column("judge_reported_model", sa.String(128)))
        batch.add_column(sa.Column("judge_fingerprint", sa.String(128)))


def downgrade() -> None:
    with op.batch_alter_table("verdicts") as batch:
        batch.drop_column("judge_fingerprint")
        batch.drop_column("judge_reported_model")
        batch.drop_column("notes")
