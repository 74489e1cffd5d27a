"""One price structure per judge model: its two forms, its defaults, what a verdict costs."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from evalfleet.core.price import ModelPrice, Price, cost_usd, resolve_prices
from evalfleet.core.settings import Settings

#: gpt-4o-mini's list price: 0.15 in, 0.075 cached, 0.60 out; batch at half.
PRICE = Price(input_per_mtok=0.15, output_per_mtok=0.60, cached_input_per_mtok=0.075,
              batch_multiplier=0.5)


def settings(**values: object) -> Settings:
    return Settings(_env_file=None, **values)  # type: ignore[call-arg]


@pytest.mark.parametrize(("given", "expected"), [
    # The older two-number form: cached input at the input price, the fleet's batch share.
    ([0.15, 0.60], Price(0.15, 0.60, 0.15, 0.5)),
    ((1, 2), Price(1.0, 2.0, 1.0, 0.5)),
    ({"input": 0.15, "output": 0.60}, Price(0.15, 0.60, 0.15, 0.5)),
    ({"input": 0.15, "output": 0.60, "cached_input": 0.075}, Price(0.15, 0.60, 0.075, 0.5)),
    ({"input": 2, "output": 8, "cached_input": 0.5, "batch": 0.25}, Price(2, 8, 0.5, 0.25)),
    ({"input": 0, "output": 0, "cached_input": 0}, Price(0, 0, 0, 0.5)),
])
def test_both_forms_read_with_their_defaults(given: object, expected: Price) -> None:
    assert settings(model_prices={"m": given}).judge.resolved_model_prices() == {"m": expected}


def test_the_fleet_batch_share_applies_where_a_model_states_none() -> None:
    read = settings(model_prices={"old": [1, 2], "own": {"input": 1, "output": 2, "batch": 0.4}},
                    batch_price_multiplier=0.6).judge.resolved_model_prices()
    assert (read["old"].batch_multiplier, read["own"].batch_multiplier) == (0.6, 0.4)


def test_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EVALFLEET_MODEL_PRICES", '{"a": [0.15, 0.6], "b": {"input": 1, '
                                                 '"cached_input": 0.1, "output": 4}}')
    read = Settings(_env_file=None).judge.resolved_model_prices()  # type: ignore[call-arg]
    assert read == {"a": Price(0.15, 0.6, 0.15, 0.5), "b": Price(1, 4, 0.1, 0.5)}


@pytest.mark.parametrize(("given", "where", "words"), [
    ({"input": -1, "output": 1}, "model_prices.gpt-x.input", "greater than or equal to 0"),
    ({"input": 1, "output": "a lot"}, "model_prices.gpt-x.output", "valid number"),
    ({"input": 1, "output": 1, "cached_input": 2}, "model_prices.gpt-x",
     "cached_input (2) is above input (1)"),
    ({"input": 1, "output": 1, "batch": 0}, "model_prices.gpt-x.batch", "greater than 0"),
    ({"input": 1, "output": 1, "batch": 1.5}, "model_prices.gpt-x.batch", "less than or equal"),
    ({"input": 1, "output": 1, "cached": 0.5}, "model_prices.gpt-x.cached", "not permitted"),
    ({"output": 1}, "model_prices.gpt-x.input", "Field required"),
    ({"input": float("nan"), "output": 1}, "model_prices.gpt-x.input", "finite number"),
    ([1, 2, 3], "model_prices.gpt-x", "expected [input, output] or an object"),
    ("cheap", "model_prices.gpt-x", "input"),
])
def test_bad_values_are_refused_naming_the_model_and_field(given: object, where: str,
                                                           words: str) -> None:
    with pytest.raises(ValidationError) as caught:
        settings(model_prices={"gpt-x": given})
    assert where in str(caught.value) and words in str(caught.value)


@pytest.mark.parametrize(("prompt", "cached", "completion", "batch", "expected"), [
    (1_000_000, None, 0, False, 0.15),
    (1000, None, 500, False, 0.00015 + 0.0003),
    (1000, 0, None, False, 0.00015),
    # 800 of 1,000 prompt tokens cached: 200 at 0.15 and 800 at 0.075 per million.
    (1000, 800, 500, False, (200 * 0.15 + 800 * 0.075 + 500 * 0.60) / 1e6),
    (1000, 800, 500, True, (200 * 0.15 + 800 * 0.075 + 500 * 0.60) / 1e6 * 0.5),
    (1000, None, 500, True, (1000 * 0.15 + 500 * 0.60) / 1e6 * 0.5),
    # A count past the prompt's is the whole prompt; a negative one is none.
    (1000, 5000, 0, False, 1000 * 0.075 / 1e6),
    (1000, -5, 0, False, 1000 * 0.15 / 1e6),
    (None, 10, 500, False, None),
])
def test_cost_usd(prompt: int | None, cached: int | None, completion: int | None, batch: bool,
                  expected: float | None) -> None:
    cost = cost_usd(PRICE, prompt_tokens=prompt, completion_tokens=completion,
                    cached_tokens=cached, batch=batch)
    assert cost == (pytest.approx(expected) if expected is not None else None)


def test_no_price_no_cost() -> None:
    assert cost_usd(None, prompt_tokens=10, completion_tokens=10, cached_tokens=5) is None


def test_resolve_prices() -> None:
    prices = {"m": ModelPrice(input=1, output=2, cached_input=0.25)}
    assert resolve_prices(prices, batch_multiplier=0.5) == {"m": Price(1, 2, 0.25, 0.5)}
