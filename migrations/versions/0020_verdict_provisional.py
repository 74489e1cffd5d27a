"""Session versions that may still be replaced: a mark on their verdicts.

Revision ID: 0020
Revises: 0019
Create Date: 2026-11-27

``verdicts.provisional``: true for the verdict of a session version closed when idle
(a later turn may still make the next version); its scores are kept in the verdict but
not written to ``verdict_scores`` (so not to ``score_rollups`` either), so alerts and
corrected estimates do not count it. Marking it final (``SqlStore.finalise``) clears the
mark and writes its score rows then, which the rollup triggers count as any other. False
for every row before this revision: a constant default, added to every partition of
``verdicts`` without a table rewrite.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0020"
down_revision = "0019"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # A plain ADD COLUMN on SQLite too: a batch copy of ``verdicts`` would break the
    # rollup triggers that name it (0019) while the table is renamed.
    op.add_column("verdicts", sa.Column("provisional", sa.Boolean(), nullable=False,
                                        server_default=sa.false()))


def downgrade() -> None:
    op.drop_column("verdicts", "provisional")
