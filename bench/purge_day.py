"""``evalfleet purge`` of the oldest day of a bench store, timed.

Run on a database a ``bench.ui_pages --keep`` run left: the retention is set so that
the cut-off falls on the first UTC midnight after the oldest verdict, so the purge
removes the oldest (partial) day and nothing else: on a partitioned store one
partition each of verdicts, scores and samples dropped whole; on an unpartitioned one
the same rows deleted batch by batch. Printed: the rows, the days dropped whole, the
transactions and the time.

    python -m bench.purge_day --database evalfleet_bench_ui
"""

from __future__ import annotations

import argparse
from datetime import UTC, datetime, timedelta

from sqlalchemy import text

from evalfleet.ops.purger import Purger
from evalfleet.ops.retention import RetentionPolicy
from evalfleet.store import open_store

POSTGRES = "postgresql+psycopg://postgres@127.0.0.1:5432"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--database", default="evalfleet_bench_ui")
    args = parser.parse_args()
    store = open_store(f"{POSTGRES}/{args.database}", pool_size=1)
    with store.engine.connect() as conn:
        oldest = conn.execute(text(
            "SELECT min(created_at) FROM verdicts WHERE metric = 'rag_qa'")).scalar_one()
        total = conn.execute(text("SELECT count(*) FROM verdicts")).scalar_one()
    cutoff = datetime(oldest.year, oldest.month, oldest.day, tzinfo=UTC) + timedelta(days=1)
    now = datetime.now(UTC)
    policy = RetentionPolicy(verdict_days=(now - cutoff).total_seconds() / 86400)
    try:
        report = Purger(store, policy).run(now=now)
    finally:
        store.close()
    deleted = sum(report.verdicts_deleted.values())
    dropped = getattr(report, "partitions_dropped", [])
    print(f"purge of the verdicts created before {cutoff:%Y-%m-%d %H:%M} UTC (of {total:,}): "
          f"{deleted:,} verdicts with their scores and samples in {report.elapsed_s:.1f} s, "
          f"{report.transactions} transactions; days dropped whole: "
          f"{', '.join(dropped) or 'none'}")


if __name__ == "__main__":
    main()
