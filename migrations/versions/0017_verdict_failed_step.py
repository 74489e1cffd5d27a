"""The trajectory step a judge named as where an agent went wrong.

Revision ID: 0017
Revises: 0016
Create Date: 2026-11-27

``verdicts.failed_step``: for a verdict of a metric whose output declares a
``step_field`` (the built-in agent metrics' ``failed_step``), the step, numbered from 1 as
the prompt writes the trajectory, that the judge named; null for every row before this
revision, for other metrics, and when the judge named none. The alert's evidence and the
verdict page name the step. Nullable, no default: added to every partition of
``verdicts`` without a table rewrite.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("verdicts") as batch:
        batch.add_column(sa.Column("failed_step", sa.Integer()))


def downgrade() -> None:
    with op.batch_alter_table("verdicts") as batch:
        batch.drop_column("failed_step")
