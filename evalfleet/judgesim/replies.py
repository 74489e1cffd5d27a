"""The simulated judge's reply to one chat request. Pure and deterministic.

Scores come from the prompt. For seed 004 (``rag_qa``) they are word overlaps
between its question, context, reference and answer
(:mod:`evalfleet.judgesim.grounding`), so unfaithful answers score lower. Other
prompts are hashed (sha256); the digest is cut into 2-byte slots and each score
reads its own slot: floats in 0..1 rounded to 2 decimals, integers in 1..5,
booleans.
A ``[[judge-sim key=value]]`` directive in the prompt overrides verdict keys
(see :mod:`evalfleet.judgesim.directive`).

The built-in judge prompts are recognised by fingerprints and answered in
their own format (see :data:`PromptFormat`). Other prompts get a verdict
built from the request's JSON schema (:mod:`evalfleet.judgesim.schema_fill`),
or a short text. The reply's text, bare or fenced, malformed or truncated, is
written by :mod:`evalfleet.judgesim.mangle`.
"""

from __future__ import annotations

import hashlib
import itertools
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal

from evalfleet.core.errors import InvalidInput
from evalfleet.core.tokens import CHARS_PER_TOKEN, estimate_tokens
from evalfleet.judgesim.config import MalformedKind
from evalfleet.judgesim.directive import parse_directives
from evalfleet.judgesim.faults import Fault
from evalfleet.judgesim.grounding import grounded_scores, read_rag_inputs
from evalfleet.judgesim.mangle import render_json, render_score_tag, render_text
from evalfleet.judgesim.quality import (
    JudgeProfile,
    draw,
    score_value_starts,
    token_logprobs,
    wrong_value,
)
from evalfleet.judgesim.schema_fill import fill_verdict

#: Which prompt the simulator recognised, and so the format of its answer.
#: ``rag_qa``, ``context_precision``, ``bbh_match``, ``rec_faithfulness``,
#: ``agent_task_completion``, ``agent_tool_use``, ``conversation_goal_completion``,
#: ``conversation_faithfulness``, ``user_frustration``: the built-in judge prompts;
#: ``json_schema``: a verdict that satisfies the request's schema;
#: ``json_object``: ``{"score", "reason"}``; ``text``: one sentence.
PromptFormat = Literal[
    "rag_qa", "context_precision", "bbh_match", "rec_faithfulness", "agent_task_completion",
    "agent_tool_use", "conversation_goal_completion", "conversation_faithfulness",
    "user_frustration", "json_schema", "json_object", "text",
]

#: Hex characters of the prompt digest kept as the prompt key.
PROMPT_KEY_LENGTH = 16

_REFERENCE = re.compile(r"^- \*\*Reference Answer\*\*:(.*?)\n- \*\*Generated Answer\*\*:",
                        re.M | re.S)
_REFERENCE_LINE = re.compile(r"^- \*\*Reference Answer\*\*:(.*)$", re.M)
_VERDICT_KEY = re.compile(r'`"([^"`\n]+)"`: The score between 0\.0 and 1\.0')
_REASON_KEY = re.compile(r'`"([^"`\n]+)"`: A detailed explanation')
#: A tool call's step in an agent metric's trajectory (``Step 3: tool call weather``).
_TOOL_STEP = re.compile(r"^Step (\d{1,6}): tool call ", re.M)
_BBH_ID = re.compile(r"^ID:[ \t]*(.*?)[ \t]*$", re.M)
_BBH_BLOCK = re.compile(r"^(QUESTION|MODEL_RESPONSE|GROUND_TRUTH):[ \t]*\n?", re.M)
_THINK = re.compile(r"<think>.*?(?:</think>|\Z)", re.S)

_RAG_SCORES = ("faithfulness", "context_relevance", "answer_relevance", "semantic_similarity")
_RAG_EXPLANATIONS = {
    "faithfulness": ("Most claims in the answer are not supported by the context.",
                     "Some claims in the answer are supported by the context, others are not.",
                     "The claims in the answer are supported by the context."),
    "context_relevance": ("The context is mostly irrelevant to the question.",
                          "The context is partly relevant to the question.",
                          "The context holds what the question needs with little noise."),
    "answer_relevance": ("The answer does not address the question.",
                         "The answer addresses part of the question.",
                         "The answer addresses the question directly."),
    "semantic_similarity": ("The answer's meaning differs from the reference answer.",
                            "The answer is partly similar in meaning to the reference answer.",
                            "The answer is close in meaning to the reference answer."),
}
_BBH_ERRORS = ("format_error", "hallucination", "wrong_logic", "no_answer")


class InvalidChatRequest(InvalidInput):
    """A chat completion request the simulator cannot read.

    Attributes:
        param: The offending request parameter, e.g. ``messages``.
        code: OpenAI-style error code, e.g. ``invalid_value``.
    """

    def __init__(
        self, reason: str, *, param: str | None = None, code: str = "invalid_value",
    ) -> None:
        self.param = param
        self.code = code
        super().__init__(reason)


@dataclass(frozen=True, slots=True)
class Prompt:
    """The messages of one request, read once: contents, roles and their digest."""

    contents: tuple[str, ...]
    """Each message's text, in order (content parts joined)."""

    roles: tuple[str, ...]
    """Each message's role."""

    text: str
    """The contents, concatenated with nothing between them."""

    digest: bytes
    """sha256 of ``text`` (UTF-8); scores and the prompt key come from it."""

    @classmethod
    def from_messages(cls, messages: Any) -> Prompt:
        """Read the ``messages`` of a chat completion request.

        Args:
            messages: The decoded ``messages`` list.

        Returns:
            The prompt.

        Raises:
            InvalidChatRequest: When it is not a non-empty list of messages.
        """
        if not isinstance(messages, list) or not messages:
            raise InvalidChatRequest("'messages' must be a non-empty array", param="messages")
        contents, roles = [], []
        for index, message in enumerate(messages):
            if not isinstance(message, dict) or not isinstance(message.get("role"), str):
                raise InvalidChatRequest(f"messages[{index}] must be an object with a 'role'",
                                         param=f"messages[{index}]")
            roles.append(message["role"])
            contents.append(_content_text(message.get("content"), index))
        text = "".join(contents)
        # surrogatepass: a lone surrogate in the messages is hashed, not an error.
        digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).digest()
        return cls(tuple(contents), tuple(roles), text, digest)

    @property
    def key(self) -> str:
        """The prompt key counted in ``by_prompt``: the first 16 hex digits of the digest."""
        return self.digest.hex()[:PROMPT_KEY_LENGTH]


@dataclass(frozen=True, slots=True)
class Usage:
    """Token counts, estimated as one token per four characters, rounded up."""

    prompt_tokens: int
    completion_tokens: int

    @property
    def total_tokens(self) -> int:
        """Prompt and completion tokens together."""
        return self.prompt_tokens + self.completion_tokens


@dataclass(frozen=True, slots=True)
class Reply:
    """What the simulated judge answers: the message content and how it ended."""

    content: str
    finish_reason: str
    usage: Usage
    logprobs: dict[str, Any] | None = None
    """The choice's ``logprobs`` object, when the request asked for it."""


@dataclass(frozen=True, slots=True)
class _Simulation:
    format: PromptFormat
    verdict: dict[str, Any]
    score_keys: tuple[str, ...]


def prompt_key(messages: Sequence[Mapping[str, Any]]) -> str:
    """The key under which ``GET /_sim/stats`` counts requests with these messages.

    Args:
        messages: Chat messages, as sent to the judge.

    Returns:
        The first 16 hex digits of sha256 over the message contents, concatenated.

    Raises:
        InvalidChatRequest: When the messages are malformed.
    """
    return Prompt.from_messages(list(messages)).key


def recognise_prompt(
    messages: Sequence[Mapping[str, Any]], *, response_format: Any = None,
) -> PromptFormat:
    """Which judge prompt ``messages`` hold, and so the format of the answer.

    Args:
        messages: Chat messages, as sent to the judge.
        response_format: The request's ``response_format``, if any.

    Returns:
        The recognised format.

    Raises:
        InvalidChatRequest: When the messages are malformed.
    """
    return _recognise(Prompt.from_messages(list(messages)), response_format)


def simulated_scores(
    messages: Sequence[Mapping[str, Any]], *, response_format: Any = None,
) -> dict[str, Any]:
    """The scores the simulator puts in its verdict for ``messages``, directives applied.

    The keys are the verdict keys of the recognised format: the four rag_qa
    metrics; the context precision verdict key; ``is_correct`` and
    ``reasoning_score``; ``score`` for the score tag, JSON mode and text; the
    top-level number, integer and boolean properties of a JSON schema.

    Args:
        messages: Chat messages, as sent to the judge.
        response_format: The request's ``response_format``, if any.

    Returns:
        Verdict keys and values.

    Raises:
        InvalidChatRequest: When the messages are malformed.
    """
    simulation = _simulate(Prompt.from_messages(list(messages)), response_format)
    return {key: simulation.verdict[key] for key in simulation.score_keys}


def simulated_verdict(
    messages: Sequence[Mapping[str, Any]], *, response_format: Any = None,
) -> dict[str, Any]:
    """The whole verdict the simulator answers for ``messages`` when nothing goes wrong.

    Args:
        messages: Chat messages, as sent to the judge.
        response_format: The request's ``response_format``, if any.

    Returns:
        The verdict's keys and values (``{"score": N}`` for the score tag and text).

    Raises:
        InvalidChatRequest: When the messages are malformed.
    """
    return dict(_simulate(Prompt.from_messages(list(messages)), response_format).verdict)


def build_reply(
    prompt: Prompt, *, model: str, response_format: Any, fault: Fault,
    max_tokens: int | None = None, shift: float = 0.0, flip: bool = False,
    profile: JudgeProfile | None = None, top_logprobs: int | None = None,
) -> Reply:
    """The simulated judge's answer to one request.

    JSON verdicts are bare under ``json_schema`` and ``json_object`` response
    formats, and in a fenced block after one sentence otherwise. A malformed
    fault breaks the verdict (free text with no verdict is left as it is); a
    truncated fault cuts it mid-way with ``finish_reason`` ``length``; content
    longer than ``max_tokens`` is cut there, also with ``length``.

    Args:
        prompt: The request's messages.
        model: The requested model, named in text replies.
        response_format: The request's ``response_format``, if any.
        fault: The fault decided for the request; only malformed and truncated matter here.
        max_tokens: The request's completion token limit, if any.
        shift: Added to every 0..1 score (clamped, two decimals): a judge that scores
            higher or lower than the default one.
        flip: Invert every yes/no score: a judge that gets binary answers backwards.
        profile: The model's quality (:mod:`evalfleet.judgesim.quality`): wrong on some
            prompts, and what its log-probabilities say; None: right and sure.
        top_logprobs: Asked for log-probabilities with this many alternatives per token
            (``logprobs: true``); None: not asked.

    Returns:
        Content, finish reason, token usage and, when asked, the log-probabilities.
    """
    simulation = _shifted(_simulate(prompt, response_format), shift, flip=flip)
    quality = draw(profile, model=model, digest=prompt.digest) if profile else None
    if quality is not None and not quality.right:
        simulation = _wrong(simulation)
    content, cut_at = _render(simulation, model=model, bare=_is_json_mode(response_format),
                              malformed=fault.malformed_kind)
    finish_reason = "stop"
    if fault.outcome == "truncated":
        content, finish_reason = content[:cut_at], "length"
    reply = reply_with(prompt, content=content, finish_reason=finish_reason,
                       max_tokens=max_tokens)
    if top_logprobs is None:
        return reply
    starts = score_value_starts(reply.content, keys=simulation.score_keys,
                                tag=simulation.format == "rec_faithfulness")
    return replace(reply, logprobs=token_logprobs(
        reply.content, score_starts=starts, shown=quality.shown if quality else 1.0,
        top_logprobs=top_logprobs))


def _wrong(simulation: _Simulation) -> _Simulation:
    """The simulation with every score moved far from the people's answer."""
    verdict = dict(simulation.verdict)
    for key in simulation.score_keys:
        verdict[key] = wrong_value(verdict.get(key))
    return _Simulation(simulation.format, verdict, simulation.score_keys)


def _shifted(simulation: _Simulation, shift: float, *, flip: bool = False) -> _Simulation:
    """The simulation with ``shift`` added to its 0..1 scores (clamped, two decimals)
    and, with ``flip``, its yes/no scores inverted."""
    if not shift and not flip:
        return simulation
    verdict = dict(simulation.verdict)
    for key in simulation.score_keys:
        value = verdict.get(key)
        if flip and isinstance(value, bool):
            verdict[key] = not value
        elif isinstance(value, float) and 0.0 <= value <= 1.0:
            verdict[key] = round(min(1.0, max(0.0, value + shift)), 2)
    return _Simulation(simulation.format, verdict, simulation.score_keys)


def reply_with(
    prompt: Prompt, *, content: str, finish_reason: str = "stop", max_tokens: int | None = None,
) -> Reply:
    """A reply with the given content, token usage estimated, cut at ``max_tokens``.

    Args:
        prompt: The request's messages.
        content: The reply content.
        finish_reason: How the reply ended.
        max_tokens: The request's completion token limit, if any.

    Returns:
        The reply.
    """
    if max_tokens is not None and estimate_tokens(content) > max_tokens:
        content, finish_reason = content[: max(0, max_tokens) * CHARS_PER_TOKEN], "length"
    usage = Usage(estimate_tokens(prompt.text), estimate_tokens(content))
    return Reply(content, finish_reason, usage)


def reference_missing(prompt_text: str) -> bool:
    """Whether a rag_qa prompt's reference answer counts as missing.

    The reference is what follows ``- **Reference Answer**:`` (up to the
    generated answer's line); it is missing when, trimmed and lowercased, it is
    empty or ``none``, or when the line is absent.

    Args:
        prompt_text: The prompt text.

    Returns:
        True when semantic similarity must be null.
    """
    match = _REFERENCE.search(prompt_text) or _REFERENCE_LINE.search(prompt_text)
    return match is None or match.group(1).strip().lower() in ("", "none")


def _content_text(content: Any, index: int) -> str:
    if isinstance(content, str):
        return content
    if content is None:
        return ""
    if isinstance(content, list):
        return "".join(part["text"] for part in content
                       if isinstance(part, dict) and isinstance(part.get("text"), str))
    raise InvalidChatRequest(f"messages[{index}].content must be a string or an array of parts",
                             param=f"messages[{index}].content")


def _recognise(prompt: Prompt, response_format: Any) -> PromptFormat:
    text = prompt.text
    if "Semantic Similarity" in text and "evaluation_status" in text:
        return "rag_qa"
    if any(role == "system" and "BIG-Bench Hard" in content
           for role, content in zip(prompt.roles, prompt.contents, strict=True)):
        return "bbh_match"
    if "CONTEXT PRECISION" in text:
        return "context_precision"
    if "Score- <score>" in text:
        return "rec_faithfulness"
    if "**Task Completion**" in text and "evaluation_status" in text:
        return "agent_task_completion"
    if "**Tool Use**" in text and "evaluation_status" in text:
        return "agent_tool_use"
    for name, (key, _, _) in _SESSION_SCORES.items():
        if f'"{key}":' in text and "**Conversation**" in text:
            return name  # type: ignore[return-value]
    if _schema_of(response_format) is not None:
        return "json_schema"
    return "json_object" if _is_json_mode(response_format) else "text"


def _is_json_mode(response_format: Any) -> bool:
    return isinstance(response_format, dict) and response_format.get("type") in (
        "json_object", "json_schema")


def _schema_of(response_format: Any) -> dict[str, Any] | None:
    if not isinstance(response_format, dict) or response_format.get("type") != "json_schema":
        return None
    spec = response_format.get("json_schema")
    schema = spec.get("schema") if isinstance(spec, dict) else None
    return schema if isinstance(schema, dict) else None


def _slot(digest: bytes, index: int) -> int:
    if index < len(digest) // 2:
        return int.from_bytes(digest[2 * index: 2 * index + 2], "big")
    extra = hashlib.sha256(digest + index.to_bytes(4, "big")).digest()
    return int.from_bytes(extra[:2], "big")


def _unit(digest: bytes, index: int) -> float:
    return round(_slot(digest, index) / 0xFFFF, 2)


def _one_to_five(digest: bytes, index: int) -> int:
    return 1 + _slot(digest, index) % 5


def _simulate(prompt: Prompt, response_format: Any) -> _Simulation:
    prompt_format = _recognise(prompt, response_format)
    overrides = parse_directives(prompt.text)
    keys: tuple[str, ...]
    if prompt_format == "rag_qa":
        verdict, keys = _rag_qa(prompt, overrides), _RAG_SCORES
    elif prompt_format == "context_precision":
        verdict, keys = _context_precision(prompt, overrides)
    elif prompt_format == "bbh_match":
        verdict, keys = _bbh_match(prompt, overrides), ("is_correct", "reasoning_score")
    elif prompt_format == "rec_faithfulness":
        score = overrides.get("score", _only_value(overrides, _one_to_five(prompt.digest, 0)))
        return _Simulation(prompt_format, {"score": score}, ("score",))
    elif prompt_format in ("agent_task_completion", "agent_tool_use"):
        verdict, keys = _agent_verdict(prompt, overrides, prompt_format)
    elif prompt_format in _SESSION_SCORES:
        verdict, keys = _session_verdict(prompt, overrides, prompt_format)
    elif prompt_format == "json_schema":
        verdict, keys = fill_verdict(_schema_of(response_format) or {}, _slots(prompt.digest))
    else:
        verdict, keys = {"score": _unit(prompt.digest, 0)}, ("score",)
        if prompt_format == "json_object":
            verdict["reason"] = "Simulated verdict: no judge prompt recognised."
    verdict.update(overrides)
    return _Simulation(prompt_format, verdict, keys)


def _only_value(overrides: dict[str, Any], default: Any) -> Any:
    return next(iter(overrides.values())) if len(overrides) == 1 else default


def _rag_qa(prompt: Prompt, overrides: dict[str, Any]) -> dict[str, Any]:
    no_reference = reference_missing(prompt.text)
    inputs = read_rag_inputs(prompt.text)
    grounded = grounded_scores(inputs, reference_missing=no_reference) if inputs else None
    verdict: dict[str, Any] = {}
    for index, name in enumerate(_RAG_SCORES):
        if name == "semantic_similarity" and no_reference:
            value = None
        else:
            value = grounded[name] if grounded else _unit(prompt.digest, index)
        value = overrides.get(name, value)
        verdict[name] = value
        if name == "semantic_similarity" and value is None and no_reference:
            verdict[f"{name}_explanation"] = "No reference answer provided, so it is not scored."
        else:
            verdict[f"{name}_explanation"] = _explain(_RAG_EXPLANATIONS[name], value)
    verdict.update(evaluation_status="success", reason=None, error=None)
    return verdict

#: The agent metrics' score key and explanations, low to high.
_AGENT_SCORES = {
    "agent_task_completion": ("task_completion", (
        "The run did not achieve what the user asked.",
        "The run achieved part of what the user asked.",
        "The run achieved what the user asked.")),
    "agent_tool_use": ("tool_use", (
        "The tools were misused: wrong tools, arguments or readings of their results.",
        "Some tool calls were right, others had wrong arguments or misread results.",
        "The right tools were called with fitting arguments and their results used well.")),
}


def _agent_verdict(prompt: Prompt, overrides: dict[str, Any],
                   prompt_format: str) -> tuple[dict[str, Any], tuple[str, ...]]:
    key, sentences = _AGENT_SCORES[prompt_format]
    score = overrides.get(key, _unit(prompt.digest, 0))
    # A low score names a step, as a judge would: the run's first tool call.
    first_tool = _TOOL_STEP.search(prompt.text)
    low = isinstance(score, int | float) and not isinstance(score, bool) and score < 0.5
    failed_step = int(first_tool.group(1)) if low and first_tool else None
    return ({key: score, f"{key}_explanation": _explain(sentences, score),
             "failed_step": failed_step, "evaluation_status": "success", "reason": None,
             "error": None}, (key,))


#: The session metrics' score key, explanations (low to high) and the field naming the
#: turn that went wrong.
_SESSION_SCORES = {
    "conversation_goal_completion": ("goal_completion", (
        "The user did not get what they came for.",
        "The user got part of what they came for.",
        "The user got what they came for."), "failed_turn"),
    "conversation_faithfulness": ("conversation_faithfulness", (
        "Answers were unsupported by the retrieved context or contradicted earlier ones.",
        "Most answers were supported; one was not, or contradicted an earlier one.",
        "Every answer was supported by its context and consistent with earlier ones."),
        "failed_turn"),
    "user_frustration": ("no_frustration", (
        "The user was clearly frustrated: repeated questions, corrections or abandonment.",
        "The user showed some frustration.",
        "The user showed no sign of frustration."), "first_frustrated_turn"),
}


def _session_verdict(prompt: Prompt, overrides: dict[str, Any],
                     prompt_format: str) -> tuple[dict[str, Any], tuple[str, ...]]:
    key, sentences, turn = _SESSION_SCORES[prompt_format]
    score = overrides.get(key, _unit(prompt.digest, 0))
    return ({key: score, f"{key}_explanation": _explain(sentences, score), turn: None,
             "evaluation_status": "success", "reason": None, "error": None}, (key,))


def _explain(sentences: tuple[str, str, str], value: Any) -> str:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return "Not scored."
    return sentences[0 if value < 0.4 else 1 if value < 0.75 else 2]


def _context_precision(
    prompt: Prompt, overrides: dict[str, Any],
) -> tuple[dict[str, Any], tuple[str, ...]]:
    verdict_match = _VERDICT_KEY.search(prompt.text)
    reason_match = _REASON_KEY.search(prompt.text)
    verdict_key = verdict_match.group(1) if verdict_match else "context_precision_score"
    reason_key = reason_match.group(1) if reason_match else "reason"
    score = overrides.get(verdict_key, _unit(prompt.digest, 0))
    reason = _explain(("The answer is largely misaligned with the expected answer and context.",
                       "The answer is partly aligned with the expected answer, with gaps.",
                       "The answer closely matches the expected answer and fits the context."),
                      score)
    return {verdict_key: score, reason_key: reason}, (verdict_key,)


def _bbh_match(prompt: Prompt, overrides: dict[str, Any]) -> dict[str, Any]:
    # The first user message carries the sample; a re-ask appends more messages after it.
    user_text = next((content for role, content in zip(prompt.roles, prompt.contents, strict=True)
                      if role == "user" and _BBH_ID.search(content)), "")
    id_match = _BBH_ID.search(user_text)
    response, truth = _bbh_blocks(user_text)
    is_correct = overrides.get("is_correct", _answers(response, truth, digest=prompt.digest))
    reasoning_score = overrides.get("reasoning_score", _one_to_five(prompt.digest, 1))
    error_type = overrides.get("error_type", "none" if is_correct is True else
                               _BBH_ERRORS[_slot(prompt.digest, 2) % len(_BBH_ERRORS)])
    if is_correct is True:
        extracted = truth
    elif error_type == "no_answer":
        extracted = ""
    else:
        extracted = _last_line(response)
    verdict_word = "Correct answer found" if is_correct is True else "Answer does not match"
    return {
        "id": id_match.group(1) if id_match else "",
        "is_correct": is_correct,
        "extracted_answer": extracted,
        "reasoning_score": reasoning_score,
        "error_type": error_type,
        "comment": f"{verdict_word}. Reasoning score {reasoning_score}.",
    }


def _bbh_blocks(user_text: str) -> tuple[str, str]:
    starts: dict[str, list[tuple[int, int]]] = {}
    for match in _BBH_BLOCK.finditer(user_text):
        starts.setdefault(match.group(1), []).append((match.start(), match.end()))
    truth_start, truth_end = starts.get("GROUND_TRUTH", [(len(user_text), len(user_text))])[-1]
    response_span = next((span for span in starts.get("MODEL_RESPONSE", [])
                          if span[1] <= truth_start), None)
    response = user_text[response_span[1]:truth_start] if response_span else ""
    return response, user_text[truth_end:].strip()


def _answers(response: str, truth: str, *, digest: bytes) -> bool:
    """Whether the response's last line gives the ground truth (as a whole token, any
    case), as a judge reading the final answer would decide; a coin from the digest when
    either is missing."""
    lines = [line.strip() for line in _THINK.sub("", response).splitlines() if line.strip()]
    line, wanted = (lines[-1][-200:] if lines else "").lower(), truth.strip().lower()
    if not line or not wanted or len(wanted) > 60:
        return _slot(digest, 0) % 2 == 1
    return re.search(rf"(?<!\w){re.escape(wanted)}(?!\w)", line) is not None


def _last_line(response: str) -> str:
    lines = [line.strip() for line in _THINK.sub("", response).splitlines() if line.strip()]
    return lines[-1][:60] if lines else ""


def _slots(digest: bytes) -> Iterator[int]:
    """The digest's slots in order, for the schema filler."""
    return (_slot(digest, index) for index in itertools.count())


def _render(
    simulation: _Simulation, *, model: str, bare: bool, malformed: MalformedKind | None,
) -> tuple[str, int]:
    """Content for a simulation, and where a truncated reply is cut."""
    verdict = simulation.verdict
    if simulation.format == "rec_faithfulness":
        return render_score_tag(verdict["score"], malformed)
    if simulation.format == "text":
        return render_text(model, verdict["score"])
    return render_json(verdict, bare=bare, malformed=malformed)
