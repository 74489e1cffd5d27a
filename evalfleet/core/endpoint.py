"""Named judge endpoints: a second (third...) server beside the fleet's judge. Pure.

A cascade's tiers may sit on different servers: a small model on the team's own
llama.cpp or vLLM box, a large one at a hosted API. A metric file names a tier's
endpoint by name (``endpoint: local``); the settings say where that name points
(``EVALFLEET_JUDGE_ENDPOINTS``), with its own key and the limits the fleet keeps for
it. Keeping the URL out of the metric file keeps it out of the prompt version, so
moving a server is a settings change that never re-judges anything: the verdict key
changes when a tier's model (or the metric file) changes, not when a URL moves.
"""

from __future__ import annotations

import os

from pydantic import BaseModel, ConfigDict, Field

#: What an endpoint's name may be (lower case, as a metric file writes it).
ENDPOINT_NAME = r"^[a-z][a-z0-9_-]{0,62}$"

#: What an environment variable's name may be.
_ENV_NAME = r"^[A-Za-z_][A-Za-z0-9_]*$"


class JudgeEndpoint(BaseModel):
    """One named judge endpoint and what the fleet keeps per endpoint for it. Unset
    limits inherit the fleet's (``EVALFLEET_JUDGE_RPM``, ``..._TPM``,
    ``..._JUDGE_RATE_LIMITS``, ``..._JUDGE_MAX_IN_FLIGHT``); its circuit breaker, response
    formats and ``prompt_cache_key`` support are its own, always."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    base_url: str = Field(min_length=1)
    """Its OpenAI-compatible base URL, e.g. ``http://10.0.0.5:8080/v1``."""

    api_key_env: str | None = Field(default=None, pattern=_ENV_NAME)
    """The environment variable holding its API key (the key itself never sits in the
    settings' JSON); None sends no key."""

    rpm: float | None = Field(default=None, gt=0)
    """Requests per minute the whole fleet may send it, per model."""

    tpm: float | None = Field(default=None, gt=0)
    """Tokens per minute the whole fleet may use on it, per model."""

    max_in_flight: int | None = Field(default=None, gt=0)
    """Calls the whole fleet keeps in flight on it per model (its server's slots)."""

    def api_key(self) -> str | None:
        """The key read from ``api_key_env`` now (None when unset or empty)."""
        return os.environ.get(self.api_key_env) or None if self.api_key_env else None
