"""The garbage collector's tuning for a long-running fleet process (a worker, an ingest).

What such a process loaded to start (modules, Celery, pydantic models, the app: about
200,000 objects in a worker) lives as long as the process: frozen, no collection walks
it again. And its work keeps many young objects alive at once (a worker's calls in
flight, a trace sweep's spans and samples), so at Python's default threshold of 700
allocations every young collection walked and promoted them. The collector took about
17% of a worker's CPU at C = 256, 9% with the freeze alone and 2% with both; an ingest's
trace sweep ran about a tenth faster (docs/performance.md, (a3) and (h)).
"""

from __future__ import annotations

import gc

#: Container allocations between young garbage collections (Python's default is 700).
YOUNG_COLLECTION_THRESHOLD = 20_000


def tune_collector() -> None:
    """Freeze what the process has loaded and collect young objects less often; call it
    once the process has started (after any fork), before it takes work."""
    gc.freeze()
    gc.set_threshold(YOUNG_COLLECTION_THRESHOLD, *gc.get_threshold()[1:])
