"""The judge simulator's knobs: faults, latency, rate limit. Pure.

One frozen :class:`SimConfig` holds every knob. The server swaps it whole on a
runtime change (:meth:`SimConfig.merge`), so a request always sees one
consistent set of values.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from evalfleet.core.errors import InvalidInput
from evalfleet.core.simulator import SIMULATOR_NAME
from evalfleet.judgesim.quality import JudgeProfile

#: How a malformed verdict is broken. Each kind leaves text that strict JSON rejects.
MalformedKind = Literal[
    "trailing_comma", "single_quotes", "prose_around", "unescaped_quote", "python_literals",
    "missing_brace",
]

#: Every malformed kind, in the order they are documented.
MALFORMED_KINDS: tuple[MalformedKind, ...] = get_args(MalformedKind)

#: Shape of the per-request latency distribution.
LatencyKind = Literal["fixed", "uniform", "lognormal"]

#: Which server's wording refusals play: OpenAI's, llama-cpp-python's (a refused
#: ``response_format`` is a 500 from its request validation), llama.cpp's own server,
#: vLLM's (a prompt too long is a 400 with text only).
ServerStyle = Literal["openai", "llama_cpp_python", "llama_cpp", "vllm"]


class InvalidSimConfig(InvalidInput):
    """A simulator setting that is out of range, of the wrong type or unknown."""


class SimConfig(BaseModel):
    """Every knob of the judge simulator; the defaults answer at once and never fail."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    seed: int = 0
    """Seed of the random generator behind fault decisions and latency samples."""

    latency: LatencyKind = "fixed"
    """Latency distribution: ``fixed`` (``latency_ms``), ``uniform`` (``latency_min_ms`` to
    ``latency_max_ms``) or ``lognormal`` (``latency_median_ms``, ``latency_p99_ms``)."""

    latency_ms: float = Field(default=0.0, ge=0)
    """Delay before every answer under ``fixed`` latency."""

    latency_min_ms: float = Field(default=0.0, ge=0)
    """Shortest delay under ``uniform`` latency."""

    latency_max_ms: float = Field(default=0.0, ge=0)
    """Longest delay under ``uniform`` latency."""

    latency_median_ms: float = Field(default=100.0, gt=0)
    """Median delay under ``lognormal`` latency."""

    latency_p99_ms: float = Field(default=1000.0, gt=0)
    """99th percentile delay under ``lognormal`` latency."""

    rate_limit_rate: float = Field(default=0.0, ge=0, le=1)
    """Share of requests answered 429 with a ``Retry-After`` header."""

    server_error_rate: float = Field(default=0.0, ge=0, le=1)
    """Share of requests answered 500."""

    hang_rate: float = Field(default=0.0, ge=0, le=1)
    """Share of requests that wait ``hang_s`` (or until the client leaves) before answering."""

    malformed_rate: float = Field(default=0.0, ge=0, le=1)
    """Share of requests whose verdict is broken in one of ``malformed_kinds``."""

    truncated_rate: float = Field(default=0.0, ge=0, le=1)
    """Share of requests whose verdict is cut off, with ``finish_reason`` ``length``."""

    malformed_kinds: tuple[MalformedKind, ...] = Field(default=MALFORMED_KINDS, min_length=1)
    """The kinds a malformed reply is drawn from."""

    first_answer_fault: Literal["malformed", "truncated"] | None = None
    """When set, every first answer (to a request with no assistant turn yet) is broken
    this way (malformed: the first of ``malformed_kinds``), and every re-ask is answered
    as usual: a score problem the re-ask mends, in chat requests and batch lines alike."""

    retry_after_s: float = Field(default=1.0, ge=0)
    """Delay advertised by a 429 from ``rate_limit_rate`` (``Retry-After`` is rounded up)."""

    hang_s: float = Field(default=30.0, ge=0)
    """How long a hanging request waits before answering normally."""

    rpm_limit: int | None = Field(default=None, gt=0)
    """Requests admitted per sliding 60 s window; None for no limit."""

    models: tuple[str, ...] = Field(default=(SIMULATOR_NAME,), min_length=1)
    """Model names listed by ``GET /v1/models`` (any model name is accepted)."""

    score_shifts: dict[str, float] = Field(default_factory=dict)
    """Per model name, added to every 0..1 score it gives (clamped): two judges that
    disagree by a known amount, or one that drifts when the shift changes."""

    flipped_answers: tuple[str, ...] = ()
    """Model names whose yes/no verdicts (``is_correct``) are inverted: a judge that
    starts to get binary answers backwards when the list changes."""

    judge_profiles: dict[str, JudgeProfile] = Field(default_factory=dict)
    """Per model name, a judge of known quality (:mod:`evalfleet.judgesim.quality`): its
    ``error_rate`` (share of prompts it gets wrong) and whether the log-probabilities it
    returns when asked (``logprobs: true``) are ``honest`` or ``overconfident``."""

    api_key: str | None = None
    """When set, a chat request without ``Authorization: Bearer <api_key>`` is refused
    (401), as a hosted judge refuses a missing or wrong key; None accepts any."""

    system_fingerprint: str = SIMULATOR_NAME
    """The ``system_fingerprint`` every completion reports (change it to play a provider
    that silently swapped its backend)."""

    refused_response_formats: tuple[Literal["json_schema", "json_object"], ...] = ()
    """``response_format`` types refused, as a server without structured outputs or JSON
    mode refuses them (in ``server_style``'s words)."""

    context_tokens: int | None = Field(default=None, gt=0)
    """The model's context, in tokens (one per four characters): a longer prompt plus its
    ``max_tokens`` is refused, in ``server_style``'s words; None for no limit."""

    serve_at_once: int | None = Field(default=None, gt=0)
    """Requests served at once, as a self-hosted judge's slots (None: any number): the
    rest queue inside the simulator, their latency starting once served, until the
    client gives up."""

    server_style: ServerStyle = "openai"
    """How refusals (``refused_response_formats``, ``refused_parameters``,
    ``context_tokens``) are worded."""

    refused_parameters: tuple[Literal["prompt_cache_key"], ...] = ()
    """Optional request parameters refused when present, as a server whose request
    validation forbids unknown fields refuses them (in ``server_style``'s words: Azure
    OpenAI's 400 "Unrecognized request argument supplied", llama-cpp-python's 500)."""

    prompt_cache: bool = True
    """Report ``usage.prompt_tokens_details.cached_tokens`` for a prompt whose leading
    blocks were seen before (:mod:`evalfleet.judgesim.prompt_cache`); False reports no
    ``prompt_tokens_details``, as most self-hosted servers."""

    prompt_cache_min_tokens: int = Field(default=1024, ge=0)
    """Shortest cached prefix reported, in tokens (OpenAI's 1,024); shorter counts as none."""

    prompt_cache_block_tokens: int = Field(default=128, gt=0)
    """Cached tokens come in whole blocks of this many tokens (OpenAI's 128)."""

    prompt_cache_max_blocks: int = Field(default=65_536, gt=0)
    """Block digests the prompt cache remembers (16 bytes each); the least recently
    seen go first."""

    batch_turnaround_s: float = Field(default=1.0, ge=0)
    """Seconds from a batch's creation to its end (the first tenth validating)."""

    batch_line_error_rate: float = Field(default=0.0, ge=0, le=1)
    """Share of a batch's lines answered 500 in its error file."""

    batch_expire_done_share: float | None = Field(default=None, ge=0, lt=1)
    """When set, batches expire at their turnaround with only this share of lines done
    (the rest are ``batch_expired`` lines in the error file); None: batches complete."""

    batch_enqueued_token_limit: int | None = Field(default=None, gt=0)
    """Prompt tokens (one per four characters of the messages) a model may have in open
    batches; a batch over it fails with ``token_limit_exceeded``. None for no limit."""

    batch_max_requests: int = Field(default=50_000, gt=0)
    """Most requests in one batch file; more fails the batch's validation."""

    batch_max_file_bytes: int = Field(default=209_715_200, gt=0)
    """Largest upload accepted by ``POST /v1/files``."""

    batch_flavor: Literal["openai", "azure", "together"] = "openai"
    """Whose Batch API to play: ``azure`` serves files and batches under ``/openai/``
    (an ``api-version`` query required; ``/v1/`` ones answer 404) and takes the endpoint
    ``/chat/completions``; ``together`` takes input files of purpose ``batch-api`` only."""

    @model_validator(mode="after")
    def _check_consistency(self) -> SimConfig:
        fault_rates = (self.rate_limit_rate + self.server_error_rate + self.hang_rate
                       + self.malformed_rate + self.truncated_rate)
        if fault_rates > 1.0 + 1e-9:
            raise ValueError(f"fault rates add up to {fault_rates:g}, more than 1")
        if self.latency_min_ms > self.latency_max_ms:
            raise ValueError("latency_min_ms exceeds latency_max_ms")
        if self.latency_p99_ms < self.latency_median_ms:
            raise ValueError("latency_p99_ms is below latency_median_ms")
        return self

    @classmethod
    def build(cls, values: Mapping[str, Any]) -> SimConfig:
        """A configuration from a mapping of field names to values.

        Args:
            values: Field names and values; fields left out keep their defaults.

        Returns:
            The configuration.

        Raises:
            InvalidSimConfig: Naming the first bad field.
        """
        try:
            return cls.model_validate(dict(values))
        except ValidationError as exc:
            raise InvalidSimConfig(_describe(exc)) from None

    def merge(self, changes: Mapping[str, Any]) -> SimConfig:
        """This configuration with ``changes`` applied on top (a partial update).

        Args:
            changes: Field names and their new values.

        Returns:
            A new configuration; this one is unchanged.

        Raises:
            InvalidSimConfig: Naming the first bad field, or when the result is inconsistent.
        """
        return self.build({**self.model_dump(), **changes})

    def as_json(self) -> dict[str, Any]:
        """Every field as JSON-ready values."""
        return self.model_dump(mode="json")


def _describe(exc: ValidationError) -> str:
    error = exc.errors()[0]
    location = ".".join(str(part) for part in error["loc"])
    return f"{location}: {error['msg']}" if location else str(error["msg"])
