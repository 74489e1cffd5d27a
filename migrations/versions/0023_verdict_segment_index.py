"""A segment's verdicts by time: an index on (metric, attributes key, sample_ts).

Revision ID: 0023
Revises: 0022
Create Date: 2026-11-27

``ix_verdicts_metric_segment_sample_ts`` (Postgres): the key is ``md5(attributes::text)``,
the rollups' ``segment_key``. The alert page's window values and worst samples and a
firing alert's evidence look up the segment's attribute sets in ``score_rollups`` and
read each one's range of sample time here, instead of ANDing the attributes' GIN
lookup (every row of the segment in the partitions read) with the (metric, sample_ts)
range (every segment's rows of the window). Created on the partitioned parent, so each
day's partition has its own and later partitions get it when created. Built here, it
would hold writes to each partition back while it runs (11 s for 2.7 million verdicts on
a busy 2-core machine): ``evalfleet migrate`` builds it first on a store with verdicts, a
partition at a time ``CONCURRENTLY`` (``evalfleet.store.segment_index``), so this finds
it made; only a new store's empty tables get it here. SQLite keeps its plain table.
"""

from __future__ import annotations

from alembic import op

revision = "0023"
down_revision = "0022"
branch_labels = None
depends_on = None

_NAME = "ix_verdicts_metric_segment_sample_ts"


def upgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    # IF NOT EXISTS: evalfleet migrate built it beforehand, a partition at a time without
    # holding writes back (evalfleet.store.segment_index).
    op.execute(f"CREATE INDEX IF NOT EXISTS {_NAME} ON verdicts"
               " (metric, md5(CAST(attributes AS text)), sample_ts)")


def downgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    op.drop_index(_NAME, table_name="verdicts")
