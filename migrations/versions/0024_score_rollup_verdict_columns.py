"""The verdict's judge model and prompt version in the score rollups' key.

Revision ID: 0024
Revises: 0023
Create Date: 2026-11-27

``score_rollups.judge_model`` and ``score_rollups.prompt_version`` join the primary key
(before ``level``, the order the triggers take rows in), so an incident's ``explain_by``
splits a window by the verdict's own columns from the rollups
(``evalfleet.store.rollup``, ``evalfleet.alerts.window.fetch_explained``). The triggers
are made again with the new key and every rollup is computed again from the scores
stored (the existing rows cannot be split by judge without them).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from evalfleet.store.rollup import drop_trigger_statements, rebuild, trigger_statements

revision = "0024"
down_revision = "0023"
branch_labels = None
depends_on = None

_KEY = ["metric", "name", "span_s", "bucket", "segment_key"]


def upgrade() -> None:
    bind = op.get_bind()
    for statement in drop_trigger_statements(bind.dialect.name):
        bind.exec_driver_sql(statement)
    with op.batch_alter_table("score_rollups") as batch:
        batch.add_column(sa.Column("judge_model", sa.String(128), nullable=False,
                                   server_default=""))
        batch.add_column(sa.Column("prompt_version", sa.String(32), nullable=False,
                                   server_default=""))
        batch.drop_constraint("pk_score_rollups", type_="primary")
        batch.create_primary_key("pk_score_rollups", [*_KEY, "judge_model", "prompt_version",
                                                      "level", "shard"])
    for statement in trigger_statements(bind.dialect.name, binned=False):
        bind.exec_driver_sql(statement)  # colons in SQLite's times are not parameters
    rebuild(bind, binned=False)


def downgrade() -> None:
    bind = op.get_bind()
    for statement in drop_trigger_statements(bind.dialect.name):
        bind.exec_driver_sql(statement)
    bind.exec_driver_sql("DELETE FROM score_rollups")
    with op.batch_alter_table("score_rollups") as batch:
        batch.drop_constraint("pk_score_rollups", type_="primary")
        batch.drop_column("prompt_version")
        batch.drop_column("judge_model")
        batch.create_primary_key("pk_score_rollups", [*_KEY, "level", "shard"])
    for statement in trigger_statements(bind.dialect.name, verdict_columns=(), binned=False):
        bind.exec_driver_sql(statement)
    rebuild(bind, verdict_columns=(), binned=False)
