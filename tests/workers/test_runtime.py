"""What a worker process sets up once: the store."""

from __future__ import annotations

from pathlib import Path

from evalfleet.core.settings import Settings
from evalfleet.store import SqlStore
from workers.runtime import build_runtime


def test_the_store_a_worker_opens_queues_the_review_slice(tmp_path: Path) -> None:
    settings = Settings(database_url=f"sqlite:///{tmp_path / 'v.db'}", data_dir=tmp_path,
                        review_rates={"rag_qa": 0.02}, review_labels_wanted=2)
    runtime = build_runtime(settings, concurrency=1)
    try:
        assert isinstance(runtime.store, SqlStore)
        assert runtime.store.review == settings.review.review_slice()
        assert runtime.store.review.metrics["rag_qa"].rate == 0.02
    finally:
        runtime.store.close()
