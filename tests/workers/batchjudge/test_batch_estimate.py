"""A batch's estimated cost counts each line's prompt with the fleet's one token estimate."""

from __future__ import annotations

from pathlib import Path

import pytest

from evalfleet.core.price import ModelPrice, cost_usd
from evalfleet.core.settings import Settings
from evalfleet.core.tokens import prompt_tokens
from workers.batchjudge.rounds import estimator

MESSAGES = [{"role": "system", "content": "Judge the answer."},
            {"role": "user", "content": "Q: 2 + 2? A: 4"}]


def test_a_line_is_priced_at_the_rate_limiters_prompt_tokens(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path, model_prices={"m": ModelPrice(input=2.0, output=8.0)})
    price = settings.judge.resolved_model_prices()["m"]
    costs = estimator(settings)([("rag_qa", {"model": "m", "messages": MESSAGES,
                                             "max_tokens": 50})])
    assert costs == {"rag_qa": pytest.approx(cost_usd(
        price, prompt_tokens=prompt_tokens(MESSAGES), completion_tokens=50, batch=True))}


def test_a_line_without_a_prompt_list_or_a_known_model_costs_no_prompt(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path, model_prices={"m": ModelPrice(input=2.0, output=8.0)})
    price = settings.judge.resolved_model_prices()["m"]
    costs = estimator(settings)([("rag_qa", {"model": "m", "messages": "not a list"}),
                                 ("rag_qa", {"model": "m", "messages": [None, "x"]}),
                                 ("other", {"model": "unpriced", "messages": MESSAGES})])
    assert costs == {"rag_qa": pytest.approx(2 * (cost_usd(
        price, prompt_tokens=0, completion_tokens=0, batch=True) or 0.0))}
