"""Settings: environment names from the contract, .env support, secrets masked."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from evalfleet.core.errors import InvalidSettings
from evalfleet.core.settings import (
    Settings,
    UnknownVariable,
    load_settings,
    mask_url,
    unknown_variables,
)


def test_contract_environment_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EVALFLEET_DATABASE_URL", "postgresql+psycopg://postgres@127.0.0.1/x")
    monkeypatch.setenv("EVALFLEET_BROKER_URL", "redis://127.0.0.1:6379/0")
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:8400/v1")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-123")
    monkeypatch.setenv("EVALFLEET_JUDGE_MODEL", "judge-1")
    monkeypatch.setenv("EVALFLEET_JUDGE_MODELS", '{"rag_qa": "judge-2"}')
    settings = Settings()
    assert settings.store.database_url == "postgresql+psycopg://postgres@127.0.0.1/x"
    assert settings.broker.broker_url == "redis://127.0.0.1:6379/0"
    assert settings.judge.openai_base_url == "http://127.0.0.1:8400/v1"
    assert settings.judge.openai_api_key is not None
    assert settings.judge.openai_api_key.get_secret_value() == "sk-test-123"
    assert settings.judge_model_for("rag_qa", metric_default=None) == "judge-2"
    assert settings.judge_model_for("bbh_match", metric_default="m") == "m"
    assert settings.judge_model_for("bbh_match", metric_default=None) == "judge-1"


def test_dotenv_file_is_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / ".env").write_text("EVALFLEET_JUDGE_MODEL=from-dotenv\nOPENAI_API_KEY=sk-dot\n")
    settings = Settings()
    assert settings.judge.judge_model == "from-dotenv"
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


@pytest.mark.parametrize(("variable", "value", "shape"), [
    ("EVALFLEET_REVIEW_RATES", "{rag_qa: 0.1}", '{"<key>": <number>}'),
    ("EVALFLEET_JUDGE_MODELS", "rag_qa=gpt-4.1", '{"<key>": "<text>"}'),
    ("EVALFLEET_SHADOW_JUDGES", "{", '{"<key>": {"model": "<text>", "share": <number>}}'),
    ("EVALFLEET_BATCH_METRICS", "nightly", '["<text>"]'),
])
def test_a_setting_that_is_not_json_names_the_variable_and_the_shape(
        monkeypatch: pytest.MonkeyPatch, variable: str, value: str, shape: str) -> None:
    monkeypatch.setenv(variable, value)
    with pytest.raises(InvalidSettings) as caught:
        load_settings()
    assert str(caught.value) == f"{variable} must be JSON, e.g. {shape}; it is not valid JSON"


def test_json_of_the_wrong_shape_names_the_variable_and_the_shape(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EVALFLEET_JUDGE_MODELS", '["gpt-4.1"]')
    with pytest.raises(InvalidSettings, match=r'^EVALFLEET_JUDGE_MODELS: .*dictionary; '
                                              r'expected JSON like \{"<key>": "<text>"\}$'):
        load_settings()
    monkeypatch.setenv("EVALFLEET_JUDGE_MODELS", "{}")
    monkeypatch.setenv("EVALFLEET_REVIEW_RATES", '{"rag_qa": 2}')
    with pytest.raises(InvalidSettings) as caught:
        load_settings()
    assert str(caught.value) == ("EVALFLEET_REVIEW_RATES: review rate of 'rag_qa' "
                                 "must be within 0..1, not 2.0")


def test_a_bad_value_in_dotenv_is_named_too(tmp_path: Path) -> None:
    env_file = tmp_path / ".env"
    env_file.write_text("EVALFLEET_DAILY_BUDGETS_USD=rag_qa:50\n")
    with pytest.raises(InvalidSettings, match=r"^EVALFLEET_DAILY_BUDGETS_USD must be JSON"):
        load_settings(env_file=env_file)


@pytest.mark.parametrize(("name", "closest"), [
    ("EVALFLEET_DATABSE_URL", "EVALFLEET_DATABASE_URL"),
    ("EVALFLEET_JUDGE_MODLE", "EVALFLEET_JUDGE_MODEL"),
    ("evalfleet_broker_ulr", "EVALFLEET_BROKER_URL"),
    ("EVALFLEET_QQQQQQQQQQQQQQQQQQQQQQQQ", None),
])
def test_an_unknown_variable_names_the_closest_setting(name: str, closest: str | None) -> None:
    assert unknown_variables([name, "EVALFLEET_DATABASE_URL", "PATH"]) == [
        UnknownVariable(name, closest)]


def test_the_warning_never_shows_a_value(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EVALFLEET_DATABSE_URL", "postgresql://u:hunter2@db/x")
    _, unknown = load_settings()
    assert [str(item) for item in unknown] == [
        "EVALFLEET_DATABSE_URL is not an evalfleet setting and is ignored; did you mean "
        "EVALFLEET_DATABASE_URL?"]


def test_strict_settings_make_an_unknown_variable_an_error(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    (tmp_path / ".env").write_text("EVALFLEET_STRICT_SETTINGS=true\nEVALFLEET_JUGDE_RPM=5\n")
    with pytest.raises(InvalidSettings, match=r"^EVALFLEET_JUGDE_RPM is not an evalfleet "
                                              r"setting .*EVALFLEET_JUDGE_RPM\?.*STRICT"):
        load_settings(env_file=tmp_path / ".env")


def test_variables_the_docs_ask_for_are_not_flagged() -> None:
    """Every EVALFLEET_* name the docs, the README and the ops files write is a setting,
    an older name of one, or a variable the docs ask for another purpose."""
    root = Path(__file__).resolve().parents[3]
    files = [root / "README.md", *root.glob("docs/*.md"), *root.glob("ops/**/*"),
             root / "docker-compose.yml", root / "Dockerfile"]
    names = {name for path in files if path.is_file()
             for name in re.findall(r"EVALFLEET_[A-Z0-9_]*[A-Z0-9](?![A-Z0-9_*])",
                                    path.read_text(encoding="utf-8", errors="replace"))}
    names.discard("EVALFLEET_DATABSE_URL")  # the docs' example of a misspelt setting
    assert {"EVALFLEET_TOKEN", "EVALFLEET_LIMITER_URL", "EVALFLEET_DATABASE_URL"} <= names
    assert unknown_variables(names | {"EVALFLEET_TEST_POSTGRES"}) == []


def test_unknown_names_in_dotenv_are_found(tmp_path: Path) -> None:
    env_file = tmp_path / ".env"
    env_file.write_text("# EVALFLEET_COMMENTED=1\nexport EVALFLEET_BATCH_SIZ=4\n"
                        "EVALFLEET_JUDGE_MODEL=x\n  EVALFLEET_DATA_DIRR = y\n")
    _, unknown = load_settings(env_file=env_file)
    assert [item.name for item in unknown] == ["EVALFLEET_BATCH_SIZ", "EVALFLEET_DATA_DIRR"]
