"""Settings: environment names from the contract, .env support, secrets masked."""

from __future__ import annotations

from pathlib import Path

import pytest

from evalfleet.core.settings import Settings, mask_url


def test_contract_environment_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EVALFLEET_DATABASE_URL", "postgresql+psycopg://postgres@127.0.0.1/x")
    monkeypatch.setenv("EVALFLEET_BROKER_URL", "redis://127.0.0.1:6379/0")
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:8400/v1")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-123")
    monkeypatch.setenv("EVALFLEET_JUDGE_MODEL", "judge-1")
    monkeypatch.setenv("EVALFLEET_JUDGE_MODELS", '{"rag_qa": "judge-2"}')
    settings = Settings()
    assert settings.database_url == "postgresql+psycopg://postgres@127.0.0.1/x"
    assert settings.broker_url == "redis://127.0.0.1:6379/0"
    assert settings.openai_base_url == "http://127.0.0.1:8400/v1"
    assert settings.openai_api_key is not None
    assert settings.openai_api_key.get_secret_value() == "sk-test-123"
    assert settings.judge_model_for("rag_qa", metric_default=None) == "judge-2"
    assert settings.judge_model_for("bbh_match", metric_default="m") == "m"
    assert settings.judge_model_for("bbh_match", metric_default=None) == "judge-1"


def test_dotenv_file_is_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / ".env").write_text("EVALFLEET_JUDGE_MODEL=from-dotenv\nOPENAI_API_KEY=sk-dot\n")
    settings = Settings()
    assert settings.judge_model == "from-dotenv"
    assert settings.secret_values() == ["sk-dot"]


def test_embedded_defaults_when_unset(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path)
    assert settings.embedded_database and settings.embedded_broker
    assert settings.resolved_database_url() == f"sqlite:///{tmp_path / 'evalfleet.db'}"
    assert settings.resolved_broker_url() == "filesystem://localhost//"


def test_blank_urls_mean_unset(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EVALFLEET_DATABASE_URL", "  ")
    assert Settings().embedded_database


def test_repr_masks_every_secret() -> None:
    settings = Settings(
        database_url="postgresql://evalfleet:db-pass-1@db:5432/evalfleet",
        broker_url="redis://:redis-pass-2@redis:6379/0", openai_api_key="sk-secret-3",
    )
    text = repr(settings) + str(settings)
    for secret in ("db-pass-1", "redis-pass-2", "sk-secret-3"):
        assert secret not in text
    assert "postgresql://evalfleet:***@db:5432/evalfleet" in text
    assert sorted(settings.secret_values()) == ["db-pass-1", "redis-pass-2", "sk-secret-3"]


@pytest.mark.parametrize(("url", "masked"), [
    ("postgresql://u:p@h:5432/d", "postgresql://u:***@h:5432/d"),
    ("redis://:p@h/0", "redis://:***@h/0"),
    ("redis://h:6379/0", "redis://h:6379/0"),
    ("sqlite:////tmp/x.db", "sqlite:////tmp/x.db"),
])
def test_mask_url(url: str, masked: str) -> None:
    assert mask_url(url) == masked


def test_as_environment_round_trips(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    settings = Settings(
        database_url="postgresql://u:p@h/d", openai_api_key="sk-1", data_dir=tmp_path,
        judge_models={"rag_qa": "m2"}, retry_base_s=0.5,
    )
    for name, value in settings.as_environment().items():
        monkeypatch.setenv(name, value)
    assert Settings() == settings


def test_invalid_values_are_rejected(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EVALFLEET_SAMPLE_RATE", "1.5")
    with pytest.raises(ValueError, match="sample_rate"):
        Settings()


@pytest.mark.parametrize(("values", "words"), [
    ({"visibility_timeout_s": 400, "judge_timeout_s": 60, "retry_max_s": 300},
     "visibility_timeout_s \\(400\\) must exceed two judge calls plus retry_max_s"),
    ({"claim_lease_s": 100, "judge_timeout_s": 60}, "claim_lease_s \\(100\\) must exceed"),
])
def test_timeouts_must_fit_together(values: dict[str, float], words: str) -> None:
    with pytest.raises(ValueError, match=words):
        Settings(**values)  # type: ignore[arg-type]


@pytest.mark.parametrize(("environment", "shared"), [
    ({}, None),  # the embedded broker: nothing shared
    ({"EVALFLEET_BROKER_URL": "redis://broker:6379/0"}, "redis://broker:6379/0"),
    ({"EVALFLEET_BROKER_URL": "amqp://guest:guest@rabbit//"}, None),
    ({"EVALFLEET_BROKER_URL": "amqp://guest:guest@rabbit//",
      "EVALFLEET_SHARED_REDIS_URL": "redis://state:6379/1"}, "redis://state:6379/1"),
    ({"EVALFLEET_BROKER_URL": "amqp://guest:guest@rabbit//",
      "EVALFLEET_LIMITER_URL": "redis://state:6379/2"}, "redis://state:6379/2"),  # older name
])
def test_shared_redis(environment: dict[str, str], shared: str | None,
                      monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    assert Settings(_env_file=None).resolved_shared_redis_url() == shared  # type: ignore[call-arg]
