"""The simulated judge's reply to one chat request. Pure and deterministic.

Scores come from the prompt. The message contents are concatenated and
hashed (sha256); the digest is cut into 2-byte slots and each score reads its
own slot: floats in 0..1 rounded to 2 decimals, integers in 1..5, booleans.
A directive anywhere in the prompt overrides verdict keys, so tests and load
tests can script drops::

    [[judge-sim faithfulness=0.2 answer_relevance=0.9]]

Values are read as JSON scalars (``0.2``, ``true``, ``null``, ``"two words"``);
anything else is taken as a bare string.

The built-in judge prompts are recognised by fingerprints and answered in
their own format (see :data:`PromptFormat`). Other prompts get a verdict
built from the request's JSON schema, or a short text.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from evalfleet.errors import InvalidInput
from evalfleet.judgesim.config import MalformedKind
from evalfleet.judgesim.faults import Fault

#: Which prompt the simulator recognised, and so the format of its answer.
#: ``rag_qa``, ``context_precision``, ``bbh_match``, ``rec_faithfulness``: the built-in
#: judge prompts; ``json_schema``: a verdict that satisfies the request's schema;
#: ``json_object``: ``{"score", "reason"}``; ``text``: one sentence.
PromptFormat = Literal[
    "rag_qa", "context_precision", "bbh_match", "rec_faithfulness", "json_schema",
    "json_object", "text",
]

#: Characters per token in the usage estimate.
CHARS_PER_TOKEN = 4

#: Hex characters of the prompt digest kept as the prompt key.
PROMPT_KEY_LENGTH = 16

_DIRECTIVE = re.compile(r"\[\[judge-sim\b(.*?)\]\]", re.S)
_ASSIGNMENT = re.compile(r'([A-Za-z_][\w.-]*)=("(?:[^"\\]|\\.)*"|[^\s"]+)')
_REFERENCE = re.compile(r"^- \*\*Reference Answer\*\*:(.*?)\n- \*\*Generated Answer\*\*:",
                        re.M | re.S)
_REFERENCE_LINE = re.compile(r"^- \*\*Reference Answer\*\*:(.*)$", re.M)
_VERDICT_KEY = re.compile(r'`"([^"`\n]+)"`: The score between 0\.0 and 1\.0')
_REASON_KEY = re.compile(r'`"([^"`\n]+)"`: A detailed explanation')
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
_REC_EXTENT = {1: "barely", 2: "poorly", 3: "partly", 4: "mostly", 5: "fully"}
_TEXT_PREAMBLE = "Here is my evaluation of the answer."
_UNESCAPED = ' The answer says "yes".'
_PLACEHOLDER = "\x00unescaped\x00"

#: Longest string a schema's ``minLength`` can ask of a generated verdict, in characters.
_MAX_STRING_CHARS = 1000


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
        return cls(tuple(contents), tuple(roles), text, hashlib.sha256(text.encode()).digest())

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


def estimate_tokens(text: str) -> int:
    """Tokens in ``text``: characters divided by four, rounded up."""
    return -(-len(text) // CHARS_PER_TOKEN)


def parse_directives(text: str) -> dict[str, Any]:
    """The verdict overrides written as ``[[judge-sim key=value ...]]`` in ``text``.

    Args:
        text: The prompt text.

    Returns:
        Verdict keys and their values; a later directive wins over an earlier one.
    """
    overrides: dict[str, Any] = {}
    if "[[judge-sim" not in text:
        return overrides
    for directive in _DIRECTIVE.finditer(text):
        for key, raw in _ASSIGNMENT.findall(directive.group(1)):
            overrides[key] = _scalar(raw)
    return overrides


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
    max_tokens: int | None = None,
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

    Returns:
        Content, finish reason and token usage.
    """
    simulation = _simulate(prompt, response_format)
    content, cut_at = _render(simulation, model=model, bare=_is_json_mode(response_format),
                              fault=fault)
    finish_reason = "stop"
    if fault.outcome == "truncated":
        content, finish_reason = content[:cut_at], "length"
    return reply_with(prompt, content=content, finish_reason=finish_reason, max_tokens=max_tokens)


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


def _scalar(raw: str) -> Any:
    try:
        value = json.loads(raw)
    except ValueError:
        return raw
    return value if not isinstance(value, dict | list) else raw


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
    elif prompt_format == "json_schema":
        verdict, keys = _from_schema(prompt, _schema_of(response_format) or {})
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
    verdict: dict[str, Any] = {}
    for index, name in enumerate(_RAG_SCORES):
        value = None if name == "semantic_similarity" and no_reference else _unit(prompt.digest,
                                                                                 index)
        value = overrides.get(name, value)
        verdict[name] = value
        if name == "semantic_similarity" and value is None and no_reference:
            verdict[f"{name}_explanation"] = "No reference answer provided, so it is not scored."
        else:
            verdict[f"{name}_explanation"] = _explain(_RAG_EXPLANATIONS[name], value)
    verdict.update(evaluation_status="success", reason=None, error=None)
    return verdict


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
    is_correct = overrides.get("is_correct", _slot(prompt.digest, 0) % 2 == 1)
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


def _last_line(response: str) -> str:
    lines = [line.strip() for line in _THINK.sub("", response).splitlines() if line.strip()]
    return lines[-1][:60] if lines else ""


def _from_schema(
    prompt: Prompt, schema: dict[str, Any],
) -> tuple[dict[str, Any], tuple[str, ...]]:
    filler = _SchemaFiller(prompt.digest, schema)
    value = filler.fill(schema, "verdict", 0)
    verdict = value if isinstance(value, dict) else {"value": value}
    properties = schema.get("properties")
    keys = tuple(name for name, spec in (properties or {}).items()
                 if isinstance(spec, dict) and "enum" not in spec
                 and filler.main_type(spec) in ("number", "integer", "boolean"))
    return verdict, keys


class _SchemaFiller:
    """Fills a JSON schema with values read from successive digest slots."""

    def __init__(self, digest: bytes, root: dict[str, Any]) -> None:
        self.digest = digest
        self.root = root
        self.index = 0

    def next_slot(self) -> int:
        self.index += 1
        return _slot(self.digest, self.index - 1)

    def fill(self, schema: Any, name: str, depth: int) -> Any:
        schema = self.resolve(schema)
        if depth > 8 or not isinstance(schema, dict):
            return None
        if "const" in schema:
            return schema["const"]
        if isinstance(schema.get("enum"), list) and schema["enum"]:
            return schema["enum"][self.next_slot() % len(schema["enum"])]
        for combinator in ("anyOf", "oneOf", "allOf"):
            options = schema.get(combinator)
            if isinstance(options, list) and options:
                chosen = next((o for o in options if self.main_type(o) != "null"), options[0])
                return self.fill(chosen, name, depth + 1)
        return self.fill_type(schema, self.main_type(schema), name, depth)

    def fill_type(self, schema: dict[str, Any], kind: str, name: str, depth: int) -> Any:
        if kind == "object":
            return {key: self.fill(spec, key, depth + 1)
                    for key, spec in (schema.get("properties") or {}).items()}
        if kind == "array":
            most = _bound(schema, "maxItems")
            count = int(min(max(1, _bound(schema, "minItems") or 1), 5 if most is None else most))
            return [self.fill(schema.get("items", {}), name, depth + 1) for _ in range(count)]
        if kind == "number":
            return self.number(schema)
        if kind == "integer":
            return self.integer(schema)
        if kind == "boolean":
            return self.next_slot() % 2 == 1
        if kind == "null":
            return None
        min_length = min(int(_bound(schema, "minLength") or 0), _MAX_STRING_CHARS)
        text = f"Simulated {name}.".ljust(min_length, ".")
        max_length = _bound(schema, "maxLength")
        return text if max_length is None else text[: int(max_length)]

    def number(self, schema: dict[str, Any]) -> float:
        low = _bound(schema, "minimum", "exclusiveMinimum")
        high = _bound(schema, "maximum", "exclusiveMaximum")
        if low is None:
            low = 0.0 if high is None else high - 1
        if high is None:
            high = low + 1
        value = min(max(round(low + self.next_slot() / 0xFFFF * (high - low), 2), low), high)
        if value in (_bound(schema, "exclusiveMinimum"), _bound(schema, "exclusiveMaximum")):
            value = (low + high) / 2
        return float(value)

    def integer(self, schema: dict[str, Any]) -> int:
        minimum, above = _bound(schema, "minimum"), _bound(schema, "exclusiveMinimum")
        maximum, below = _bound(schema, "maximum"), _bound(schema, "exclusiveMaximum")
        low = math.ceil(minimum) if minimum is not None else (
            math.floor(above) + 1 if above is not None else 0)
        high = math.floor(maximum) if maximum is not None else (
            math.ceil(below) - 1 if below is not None else low + 10)
        return low + self.next_slot() % max(1, high - low + 1)

    def main_type(self, schema: Any, depth: int = 0) -> str:
        schema = self.resolve(schema)
        if depth > 8 or not isinstance(schema, dict):
            return "null"
        kind = schema.get("type")
        if isinstance(kind, list):
            kind = next((k for k in kind if k != "null"), "null")
        if isinstance(kind, str):
            return kind
        for combinator in ("anyOf", "oneOf", "allOf"):
            options = schema.get(combinator)
            if isinstance(options, list) and options:
                kinds = [self.main_type(option, depth + 1) for option in options]
                return next((k for k in kinds if k != "null"), "null")
        return "object" if "properties" in schema else "array" if "items" in schema else "string"

    def resolve(self, schema: Any) -> Any:
        for _ in range(8):
            if not isinstance(schema, dict) or not isinstance(schema.get("$ref"), str):
                return schema
            node: Any = self.root
            for part in schema["$ref"].removeprefix("#/").split("/"):
                node = node.get(part) if isinstance(node, dict) and part else node
            schema = node
        return None


def _bound(schema: dict[str, Any], *keys: str) -> float | None:
    """The first of ``keys`` that holds a finite number in ``schema``."""
    for key in keys:
        value = schema.get(key)
        if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
            return value
    return None


def _render(
    simulation: _Simulation, *, model: str, bare: bool, fault: Fault,
) -> tuple[str, int]:
    """Content for a simulation, and where a truncated reply is cut."""
    verdict = simulation.verdict
    if simulation.format == "rec_faithfulness":
        return _score_tag_text(verdict["score"], fault.malformed_kind)
    if simulation.format == "text":
        text = (f"judge-sim ({model}): no judge prompt recognised; "
                f"simulated score {verdict['score']}.")
        return text, len(text) // 2
    if fault.malformed_kind is not None:
        content = _malformed_json(verdict, fault.malformed_kind, bare=bare)
    elif bare:
        content = json.dumps(verdict, ensure_ascii=False)
    else:
        content = _fence(json.dumps(verdict, ensure_ascii=False, indent=2))
    start = content.find("{")
    return content, start + max(1, (len(content) - start) // 2)


def _fence(verdict_json: str) -> str:
    return f"{_TEXT_PREAMBLE}\n\n```json\n{verdict_json}\n```"


def _score_tag_text(score: Any, malformed: MalformedKind | None) -> tuple[str, int]:
    in_scale = isinstance(score, int) and not isinstance(score, bool) and 1 <= score <= 5
    found = "Some pieces" if not in_scale else "No piece" if score == 5 else f"{5 - score} piece(s)"
    extent = _REC_EXTENT[score] if in_scale else "to some extent"
    body = (
        "1. I check each claim of the recommendation explanation summary against the query, "
        "product title, prices and opinion summary.\n"
        f"2. {found} of information could not be verified from the input.\n"
        f"3. The summary follows the Faithfulness metric {extent}.\n"
    )
    if malformed in ("prose_around", "trailing_comma"):
        return f"{body}Score- {score} out of 5", len(body)
    if malformed in ("missing_brace", "unescaped_quote"):
        return f"{body}Score- <score>{score}", len(body)
    if malformed is not None:
        return f"{body}Score- <score>None</score>", len(body)
    return f"{body}Score- <score>{score}</score>", len(body) + len("Score- <score>")


def _malformed_json(verdict: dict[str, Any], kind: MalformedKind, *, bare: bool) -> str:
    if kind == "python_literals" and not _has_literal(verdict):
        kind = "trailing_comma"
    # The longest text is an explanation, not an id or an enum, so only the syntax breaks.
    texts = [(len(value), key) for key, value in verdict.items() if isinstance(value, str)]
    text_key = max(texts)[1] if texts else None
    if kind == "unescaped_quote" and text_key is None:
        kind = "trailing_comma"
    if kind == "prose_around":
        return f"Sure, here is my verdict: {json.dumps(verdict, ensure_ascii=False)} Hope it helps."
    if kind == "single_quotes":
        body = _dump(verdict, quote="'", indent=not bare)
    elif kind == "python_literals":
        body = _dump(verdict, python=True, indent=not bare)
    elif kind == "unescaped_quote":
        assert text_key is not None
        body = _dump({**verdict, text_key: _PLACEHOLDER}, indent=not bare)
        escaped = json.dumps(verdict[text_key], ensure_ascii=False)[:-1]
        body = body.replace(json.dumps(_PLACEHOLDER), f'{escaped}{_UNESCAPED}"')
    else:
        body = _dump(verdict, indent=not bare)
        closing = body.rindex("}")
        head = body[:closing].rstrip()
        body = head if kind == "missing_brace" else head + (",\n}" if not bare else ",}")
    return body if bare else _fence(body)


def _has_literal(value: Any) -> bool:
    if isinstance(value, dict):
        return any(_has_literal(item) for item in value.values())
    if isinstance(value, list):
        return any(_has_literal(item) for item in value)
    return value is None or isinstance(value, bool)


def _dump(value: Any, *, quote: str = '"', python: bool = False, indent: bool = False) -> str:
    """JSON-like text with a choice of string quote and of literal spelling."""
    if isinstance(value, dict):
        items = [f"{_quoted(str(key), quote)}: {_dump(item, quote=quote, python=python)}"
                 for key, item in value.items()]
        return "{\n  " + ",\n  ".join(items) + "\n}" if indent and items else (
            "{" + ", ".join(items) + "}")
    if isinstance(value, list):
        return "[" + ", ".join(_dump(item, quote=quote, python=python) for item in value) + "]"
    if isinstance(value, str):
        return _quoted(value, quote)
    if value is None:
        return "None" if python else "null"
    if isinstance(value, bool):
        return str(value) if python else str(value).lower()
    return json.dumps(value)


def _quoted(text: str, quote: str) -> str:
    if quote == '"':
        return json.dumps(text, ensure_ascii=False)
    escaped = text.replace("\\", "\\\\").replace("'", "\\'").replace("\n", "\\n")
    return f"'{escaped}'"
