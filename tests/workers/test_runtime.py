"""What a worker process sets up once: the garbage collector's tuning, the store."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from pathlib import Path

import pytest

from evalfleet.core.settings import Settings
from evalfleet.store import SqlStore
from workers.runtime import YOUNG_COLLECTION_THRESHOLD, build_runtime, tune_collector


@pytest.fixture
def collector() -> Iterator[None]:
    """Give the test process its collector back as it was."""
    threshold = gc.get_threshold()
    yield
    gc.unfreeze()
    gc.set_threshold(*threshold)


@pytest.mark.usefixtures("collector")
def test_tuning_freezes_what_is_loaded_and_collects_young_objects_less_often() -> None:
    loaded = type("Loaded", (), {})()  # an object the collector tracks, made before
    older = gc.get_threshold()[1:]
    tune_collector()
    assert gc.get_freeze_count() > 0
    assert not any(loaded is item for generation in range(3)
                   for item in gc.get_objects(generation))
    assert gc.get_threshold() == (YOUNG_COLLECTION_THRESHOLD, *older)


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
