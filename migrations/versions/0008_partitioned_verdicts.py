"""Verdicts, scores and kept samples partitioned by day on Postgres.

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-26

Postgres: ``verdicts``, ``verdict_scores`` and ``verdict_samples`` become tables
partitioned by range on ``created_at``, one partition per UTC day, the three alike
(``evalfleet.store.partitions`` says why ``created_at`` and not ``sample_ts``: retention
counts from the creation time, so a day past retention is three partitions dropped
whole; samples have no other time; and pages and alerts bound ``created_at`` from
below by their window on sample time). The existing rows move nowhere: each table
becomes the ``<table>_legacy`` partition of its new parent, up to a UTC midnight at
least a day ahead; daily partitions follow, seven days ahead, and a default partition
catches anything outside them. Retention retires the legacy partition whole once it
is past. ``verdict_keys`` (key digest, creation time) keeps each verdict key unique
across partitions; ``verdict_scores.created_at`` is new (the verdict's). The slow
parts (filling ``verdict_keys``, the unique indexes, the bound checks) are done
beforehand, resumably and without blocking the fleet, by ``evalfleet migrate``
(``evalfleet.store.upgrade.prepare``); what is left here holds the three tables'
locks for a moment. No downgrade on Postgres.

SQLite keeps its plain tables; ``verdict_scores.created_at`` is added and filled from
the verdicts.
"""

from __future__ import annotations

from datetime import UTC, datetime

import sqlalchemy as sa
from alembic import op

from evalfleet.store.upgrade import convert, needs_upgrade

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    bind = op.get_bind()
    if bind.dialect.name == "postgresql":
        if needs_upgrade(bind):
            convert(bind, now=datetime.now(UTC))
        return
    with op.batch_alter_table("verdict_scores") as batch:
        batch.add_column(sa.Column("created_at", sa.DateTime(timezone=True), nullable=False,
                                   server_default="1970-01-01 00:00:00.000000"))
    op.execute("UPDATE verdict_scores SET created_at = (SELECT created_at FROM verdicts"
               " WHERE verdicts.id = verdict_scores.verdict_id)")
    with op.batch_alter_table("verdict_scores") as batch:
        batch.alter_column("created_at", server_default=None)


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        raise NotImplementedError("revision 0008 cannot be undone on Postgres")
    with op.batch_alter_table("verdict_scores") as batch:
        batch.drop_column("created_at")
