"""The provider registry: every name the settings may give, and a named refusal of others."""

from __future__ import annotations

import pytest

from evalfleet.core.settings import Settings
from workers.judge import AsyncHttpJudge, OpenAIJudge
from workers.judge.dialect import CHAT_ENDPOINT
from workers.judge.registry import (
    BATCH_DIALECTS,
    JUDGE_CLIENTS,
    UnknownProvider,
    batch_dialect,
)
from workers.runtime import build_provider


@pytest.mark.parametrize(("name", "kind"), [("http", AsyncHttpJudge), ("openai", OpenAIJudge)])
def test_each_judge_client_is_built_from_the_settings(name: str, kind: type) -> None:
    settings = Settings(judge_client=name, openai_base_url="http://judge.local/v1")
    provider = build_provider(settings, concurrency=4)
    assert isinstance(provider, kind)
    assert provider.endpoint == "http://judge.local/v1/chat/completions"
    assert set(JUDGE_CLIENTS) == {"http", "openai"}


def test_each_batch_flavor_has_its_dialect() -> None:
    assert set(BATCH_DIALECTS) == {"openai", "groq", "azure", "together"}
    assert batch_dialect("groq", api_version="v") == batch_dialect("openai", api_version="v")
    azure = batch_dialect("azure", api_version="2024-10-21")
    assert (azure.endpoint, azure.query, azure.key_header) == (
        "/chat/completions", {"api-version": "2024-10-21"}, "api-key")
    together = batch_dialect("together", api_version="v")
    assert (together.endpoint, together.file_purpose) == (CHAT_ENDPOINT, "batch-api")


def test_a_name_the_registry_lacks_is_refused_naming_the_known_ones() -> None:
    with pytest.raises(UnknownProvider, match=r"EVALFLEET_JUDGE_CLIENT 'acme' \(known: http, "
                                              r"openai\)"):
        build_provider(Settings(judge_client="acme"), concurrency=1)
    with pytest.raises(UnknownProvider, match=r"EVALFLEET_BATCH_FLAVOR 'acme' \(known: azure, "
                                              r"groq, openai, together\)"):
        batch_dialect("acme", api_version="v")


def test_a_beat_with_an_unknown_batch_flavor_stops_at_start() -> None:
    from workers.batchjudge.rounds import BatchRounds

    def never() -> None:
        raise AssertionError("no runtime is built before the flavor is checked")

    with pytest.raises(UnknownProvider, match="EVALFLEET_BATCH_FLAVOR 'acme'"):
        BatchRounds(Settings(batch_flavor="acme"), runtime=never,  # type: ignore[arg-type]
                    publish=lambda job, countdown_s: None)
