"""Word-overlap scores for RAG prompts, so simulated verdicts follow the sample. Pure.

A real judge is not needed to see that an answer full of words its context
never mentions is less faithful than one that repeats the context. The
simulator answers seed 004 (``rag_qa``) with these overlaps, so a demo or a
load test over realistic samples shows realistic differences (an unfaithful
prompt version scores lower); scores stay deterministic and predictable.

Words are numbers, and lowercase runs of three letters or more less a short list
of function words.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_WORD = re.compile(r"\d+|[^\W\d_]{3,}", re.UNICODE)
_FIELD = re.compile(
    r"- \*\*(User Question|Retrieved Context|Reference Answer|Generated Answer)\*\*: ?"
    r"(.*?)(?=\n- \*\*[A-Z][\w ]+\*\*:|\n### |\Z)", re.S)
_STOPWORDS = frozenset((
    "the", "and", "for", "are", "but", "not", "you", "your", "with", "this", "that", "from",
    "have", "has", "had", "was", "were", "will", "would", "can", "could", "should", "may",
    "might", "must", "our", "their", "there", "they", "them", "then", "than", "what", "which",
    "who", "whom", "when", "where", "why", "how", "all", "any", "each", "few", "more", "most",
    "other", "some", "such", "only", "own", "same", "too", "very", "just", "also", "into",
    "onto", "over", "under", "about", "after", "before", "again", "further", "once", "here",
    "both", "nor", "off", "out", "its", "yes", "one", "two", "does", "did", "doing", "been",
    "being", "because", "until", "while", "per", "via",
))
_REFUSALS = ("can't", "cannot", "not able", "unable", "don't have", "no information")


@dataclass(frozen=True, slots=True)
class RagInputs:
    """The four inputs of a rag_qa prompt, as rendered."""

    question: str
    context: str
    reference: str
    answer: str


def read_rag_inputs(prompt_text: str) -> RagInputs | None:
    """The inputs section of a rag_qa prompt, or None when it is not there."""
    found = {name: value.strip() for name, value in _FIELD.findall(prompt_text)}
    if "Generated Answer" not in found:
        return None
    return RagInputs(question=found.get("User Question", ""),
                     context=found.get("Retrieved Context", ""),
                     reference=found.get("Reference Answer", ""),
                     answer=found["Generated Answer"])


def grounded_scores(inputs: RagInputs, *, reference_missing: bool) -> dict[str, float | None]:
    """The four rag_qa scores from word overlaps, each in 0..1, two decimals.

    - faithfulness: share of the answer's words found in the context (an answer that
      declines for lack of context is faithful; any other answer to no context is not);
    - context_relevance: share of the question's words found in the context;
    - answer_relevance: share of the question's words found in the answer;
    - semantic_similarity: share of the reference's words found in the answer, or None
      when the reference is missing.
    """
    question, context = _words(inputs.question), _words(inputs.context)
    answer, reference = _words(inputs.answer), _words(inputs.reference)
    if not context:
        declines = any(phrase in inputs.answer.lower() for phrase in _REFUSALS)
        faithfulness = 1.0 if declines else 0.0
    else:
        faithfulness = _share(answer, within=context)
    return {
        "faithfulness": faithfulness,
        "context_relevance": _share(question, within=context),
        "answer_relevance": _share(question, within=answer),
        "semantic_similarity": None if reference_missing else _share(reference, within=answer),
    }


def _words(text: str) -> set[str]:
    return {word for word in _WORD.findall(text.lower()) if word not in _STOPWORDS}


def _share(words: set[str], *, within: set[str]) -> float:
    if not words:
        return 1.0
    return round(len(words & within) / len(words), 2)
