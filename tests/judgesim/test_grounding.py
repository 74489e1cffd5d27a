"""Word-overlap scores for rag_qa prompts."""

from __future__ import annotations

import pytest

from evalfleet.judgesim import simulated_scores
from evalfleet.judgesim.grounding import RagInputs, grounded_scores, read_rag_inputs
from tests.judgesim.builders import rendered


def test_reads_the_inputs_of_a_rendered_prompt() -> None:
    (message,) = rendered("rag_qa", input="Where is the Louvre?", output="In Paris.",
                          context=["The Louvre is in Paris.", "It opened in 1793."],
                          reference="Paris")
    inputs = read_rag_inputs(message["content"])
    assert inputs == RagInputs(question="Where is the Louvre?",
                               context="[1] The Louvre is in Paris.\n[2] It opened in 1793.",
                               reference="Paris", answer="In Paris.")


def test_a_prompt_without_inputs_reads_as_none() -> None:
    assert read_rag_inputs("Rate this answer.") is None


@pytest.mark.parametrize(("inputs", "scores"), [
    (RagInputs("Capital of France?", "Paris is the capital of France.", "Paris",
               "Paris is the capital."),
     {"faithfulness": 1.0, "context_relevance": 1.0, "answer_relevance": 0.5,
      "semantic_similarity": 1.0}),
    (RagInputs("Refund window?", "Refunds within 30 days of delivery.", "30 days",
               "Refunds within 90 days, plus free shipping worldwide."),
     # 3 of the answer's 8 words are in the context (90, plus, free... are not)
     {"faithfulness": 0.38, "context_relevance": 0.0, "answer_relevance": 0.0,
      "semantic_similarity": 0.5}),
    (RagInputs("Opening hours?", "", "", "I cannot answer that from the documents."),
     {"faithfulness": 1.0, "context_relevance": 0.0, "answer_relevance": 0.0,
      "semantic_similarity": None}),
    (RagInputs("Opening hours?", "", "", "We open at nine."),
     {"faithfulness": 0.0, "context_relevance": 0.0, "answer_relevance": 0.0,
      "semantic_similarity": None}),
])
def test_grounded_scores(inputs: RagInputs, scores: dict[str, float | None]) -> None:
    missing = scores["semantic_similarity"] is None
    assert grounded_scores(inputs, reference_missing=missing) == scores


def test_an_unsupported_answer_scores_lower_than_a_supported_one() -> None:
    context = ["Growth costs $39 per month for up to 5 users with unlimited invoices."]
    supported = simulated_scores(rendered("rag_qa", context=context,
                                          output="Growth costs $39 per month for 5 users."))
    invented = simulated_scores(rendered("rag_qa", context=context,
                                         output="Growth costs $29 and includes phone support "
                                                "and a dedicated manager."))
    assert supported["faithfulness"] > invented["faithfulness"]
