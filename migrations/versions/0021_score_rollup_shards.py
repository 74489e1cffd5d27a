"""Score rollups spread over shards, and the triggers that keep them.

Revision ID: 0021
Revises: 0020
Create Date: 2026-11-27

``score_rollups.shard``: on Postgres a save adds to its connection's shard of a bucket's
row, so writers on different connections do not wait on one row; reads sum the shards
and ``evalfleet beat`` folds the shards of past buckets into shard 0
(``evalfleet.store.rollup``). The shard joins the primary key; a partial index finds
the rows left to fold. The triggers are made again (a store that ran 0019 before it
came without shards has them) and the table is filled from the scores stored.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from evalfleet.store.rollup import drop_trigger_statements, rebuild, trigger_statements

revision = "0021"
down_revision = "0020"
branch_labels = None
depends_on = None

_KEY = ["metric", "name", "span_s", "bucket", "segment_key", "level"]


def upgrade() -> None:
    bind = op.get_bind()
    for statement in drop_trigger_statements(bind.dialect.name):
        bind.exec_driver_sql(statement)
    with op.batch_alter_table("score_rollups") as batch:
        batch.add_column(sa.Column("shard", sa.SmallInteger(), nullable=False,
                                   server_default="0"))
        batch.drop_constraint("pk_score_rollups", type_="primary")
        batch.create_primary_key("pk_score_rollups", [*_KEY, "shard"])
    op.create_index("ix_score_rollups_sharded", "score_rollups", ["bucket"],
                    postgresql_where=sa.text("shard <> 0"), sqlite_where=sa.text("shard <> 0"))
    # The key as it is at this revision: the verdict's columns join it in 0024.
    for statement in trigger_statements(bind.dialect.name, verdict_columns=(), binned=False):
        bind.exec_driver_sql(statement)  # colons in SQLite's times are not parameters
    rebuild(bind, verdict_columns=(), binned=False)


def downgrade() -> None:
    bind = op.get_bind()
    for statement in drop_trigger_statements(bind.dialect.name):
        bind.exec_driver_sql(statement)
    op.drop_index("ix_score_rollups_sharded", table_name="score_rollups")
    with op.batch_alter_table("score_rollups") as batch:
        batch.drop_constraint("pk_score_rollups", type_="primary")
        batch.drop_column("shard")
        batch.create_primary_key("pk_score_rollups", _KEY)
