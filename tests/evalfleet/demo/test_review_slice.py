"""The demo's review queue: its own store queues every rag_qa verdict, a configured slice
or a shared database keeps what it has."""

from __future__ import annotations

from pathlib import Path

from evalfleet.core.settings import Settings
from evalfleet.demo.runner import DEMO_REVIEW_RATES, _demo_settings


def test_the_demos_own_store_queues_every_rag_qa_verdict(tmp_path: Path) -> None:
    settings = _demo_settings(Settings(data_dir=tmp_path))
    assert settings.review.review_rates == DEMO_REVIEW_RATES == {"rag_qa": 1.0}
    assert settings.store.data_dir == tmp_path / "demo"


def test_a_configured_slice_is_kept(tmp_path: Path) -> None:
    settings = _demo_settings(Settings(data_dir=tmp_path, review_rates={"rag_qa": 0.1}))
    assert settings.review.review_rates == {"rag_qa": 0.1}
    strata = Settings(data_dir=tmp_path,
                      review_strata={"rag_qa": [{"below": 0.5, "rate": 0.2}]})
    assert _demo_settings(strata).review.review_rates == {}


def test_a_shared_database_keeps_its_review_queue(tmp_path: Path) -> None:
    shared = Settings(data_dir=tmp_path, database_url="postgresql+psycopg://u@h:5432/fleet")
    assert _demo_settings(shared).review.review_rates == {}
