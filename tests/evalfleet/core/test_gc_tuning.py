"""The garbage collector's tuning for long-running fleet processes."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from evalfleet.core.gc_tuning import YOUNG_COLLECTION_THRESHOLD, tune_collector


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
