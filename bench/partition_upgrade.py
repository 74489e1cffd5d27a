"""The upgrade of a filled store to day partitions (revision 0008), step by step, timed.

Run on a database a ``bench.ui_pages --keep`` run of the unpartitioned code left
(revision 0007, e.g. from the main branch's checkout). Printed: each online step of
``evalfleet.store.upgrade.prepare`` (the fleet may run through them: ``start`` and
the adding of each ``CHECK ... NOT VALID`` take a table's exclusive lock for a
moment; the key fill, the ``CONCURRENTLY`` index builds and the ``VALIDATE`` let
reads and writes through), then the Alembic migration itself, whose transaction
holds the three verdict tables' exclusive locks: the pause the fleet and the pages see.

    python -m bench.partition_upgrade --database evalfleet_bench_main
"""

from __future__ import annotations

import argparse
import time
from datetime import UTC, datetime

from sqlalchemy import text

from evalfleet.store import migrate, open_store
from evalfleet.store.upgrade import needs_upgrade, prepare

POSTGRES = "postgresql+psycopg://postgres@127.0.0.1:5432"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--database", default="evalfleet_bench_main")
    args = parser.parse_args()
    store = open_store(f"{POSTGRES}/{args.database}", pool_size=1)
    try:
        with store.engine.connect() as conn:
            if not needs_upgrade(conn):
                raise SystemExit(f"{args.database}: not an unpartitioned store")
            sizes = conn.execute(text(
                "SELECT (SELECT count(*) FROM verdicts), (SELECT count(*) FROM verdict_scores),"
                " (SELECT count(*) FROM verdict_samples),"
                " pg_size_pretty(pg_total_relation_size('verdicts'))")).one()
        print(f"store: {sizes[0]:,} verdicts ({sizes[3]} with indexes), {sizes[1]:,} scores, "
              f"{sizes[2]:,} samples")
        started = time.perf_counter()
        prepare(store.engine, now=datetime.now(UTC),
                on_step=lambda name, took_s: print(f"  prepare {name}: {took_s:.1f} s"))
        prepared = time.perf_counter()
        migrate(store.engine)
        done = time.perf_counter()
    finally:
        store.close()
    print(f"online preparation {prepared - started:.1f} s; the migration's transaction "
          f"(the three tables locked): {done - prepared:.2f} s")


if __name__ == "__main__":
    main()
