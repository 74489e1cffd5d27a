"""Review items know when their sample was taken.

Revision ID: 0016
Revises: 0015
Create Date: 2026-11-27

``review_items.sample_ts``: the sample time of the verdict an item reviews. A window's
verdicts are chosen on sample time; the labels that correct it are now chosen on the
same time (``evalfleet.review.estimate.label_pool``), not on when the item was queued,
so items queued long after their samples were taken (a backfill, the demo) correct the
windows their samples are in. Filled from the verdicts (on Postgres through
``verdict_keys``, which gives the verdict's partition); an item whose verdict is gone
(retention) takes its queue time. Indexed with the metric, as the pool reads it.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None

_POSTGRES_FILL = """
UPDATE review_items AS i SET sample_ts = v.sample_ts
FROM verdict_keys AS k JOIN verdicts AS v ON v.created_at = k.created_at
WHERE k.digest = i.verdict_key AND v.metric = i.metric AND v.sample_id = i.sample_id
  AND v.prompt_version = i.prompt_version AND v.judge_model = i.judge_model
"""

_SQLITE_FILL = """
UPDATE review_items SET sample_ts = (
  SELECT v.sample_ts FROM verdicts AS v
  WHERE v.sample_id = review_items.sample_id AND v.metric = review_items.metric
    AND v.prompt_version = review_items.prompt_version
    AND v.judge_model = review_items.judge_model)
"""


def upgrade() -> None:
    postgres = op.get_bind().dialect.name == "postgresql"
    with op.batch_alter_table("review_items") as batch:
        batch.add_column(sa.Column("sample_ts", sa.DateTime(timezone=True)))
    op.execute(_POSTGRES_FILL if postgres else _SQLITE_FILL)
    op.execute("UPDATE review_items SET sample_ts = created_at WHERE sample_ts IS NULL")
    with op.batch_alter_table("review_items") as batch:
        batch.alter_column("sample_ts", existing_type=sa.DateTime(timezone=True),
                           nullable=False)
    op.create_index("ix_review_items_metric_sample_ts", "review_items",
                    ["metric", "sample_ts"])


def downgrade() -> None:
    op.drop_index("ix_review_items_metric_sample_ts", table_name="review_items")
    with op.batch_alter_table("review_items") as batch:
        batch.drop_column("sample_ts")
