"""Small input builders for the verdict parser tests: metrics, samples, judge replies."""

from __future__ import annotations

from functools import cache
from typing import Any

from evalfleet.core.metric import Metric, MetricRegistry, load_registry
from evalfleet.core.sample import Sample, parse_sample

#: The sample id every builder uses; bbh_match verdicts must echo it.
SAMPLE_ID = "17"

PRODUCT = {
    "product_title": "Trail running shoe, 280 g",
    "base_price": "129.00",
    "final_price": "99.00",
    "product_opinion_summary": "Light and grippy; runs half a size small.",
    "evaluation_goal": "balanced",
}


@cache
def registry() -> MetricRegistry:
    """The bundled metrics, loaded once."""
    return load_registry()


def metric(name: str) -> Metric:
    """A bundled metric by name."""
    return registry().get(name)


def sample(**overrides: Any) -> Sample:
    """A sample every bundled metric can judge; ``overrides`` replace its keys."""
    data: dict[str, Any] = {
        "id": SAMPLE_ID, "input": "Which shoe suits muddy trails?",
        "output": "The trail shoe: it is light and grippy.",
        "context": ["The trail shoe has 5 mm lugs.", "It weighs 280 g."],
        "reference": "The trail running shoe.", "fields": dict(PRODUCT),
    }
    data.update(overrides)
    return parse_sample(data)


def members(**values: str) -> str:
    """A JSON-like object from raw member texts: ``members(a="1")`` is ``{"a": 1}``.

    Values are written as given, so a test can put ``NaN``, ``True`` or ``80%`` in.
    """
    return "{" + ", ".join(f'"{key}": {value}' for key, value in values.items()) + "}"


CP = {"context_precision_score": "0.8", "reason": '"Close to the expected answer."'}

BBH = {
    "id": '"17"', "is_correct": "true", "extracted_answer": '"(B)"', "reasoning_score": "4",
    "error_type": '"none"', "comment": '"Correct answer, one step skipped."',
}

RAG = {
    "faithfulness": "0.9", "faithfulness_explanation": '"Supported by chunk 1."',
    "context_relevance": "0.5", "context_relevance_explanation": '"Half is noise."',
    "answer_relevance": "1.0", "answer_relevance_explanation": '"Answers directly."',
    "semantic_similarity": "0.75", "semantic_similarity_explanation": '"Same meaning."',
    "evaluation_status": '"success"', "reason": "null", "error": "null",
}


def cp(**overrides: str) -> str:
    """A context_precision verdict; keyword arguments replace raw member texts."""
    return members(**{**CP, **overrides})


def bbh(**overrides: str) -> str:
    """A bbh_match verdict for :data:`SAMPLE_ID`."""
    return members(**{**BBH, **overrides})


def rag(**overrides: str) -> str:
    """A rag_qa verdict for a sample with a reference."""
    return members(**{**RAG, **overrides})


def without(base: dict[str, str], *keys: str) -> str:
    """A verdict from ``base`` with ``keys`` left out."""
    return members(**{key: value for key, value in base.items() if key not in keys})
