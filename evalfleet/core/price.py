"""What a judge model costs, and what one verdict's judge calls cost. Pure.

One price structure per judge model (``EVALFLEET_MODEL_PRICES``), in US dollars per
million tokens: ``input`` (prompt tokens), ``cached_input`` (prompt tokens the provider
served from its prompt cache), ``output`` (completion tokens), and ``batch``, the share
of all three that a request judged through the provider's Batch API costs. The older
form ``[input, output]`` still reads, as an object with the other two left out.

Left out, ``cached_input`` is the ``input`` price: a provider without a cache discount
(most self-hosted servers, many proxies) bills cached tokens in full, and discounts
differ per model (OpenAI's run from 50% to 90% off), so the cost is never understated by
a guess; state the discount to count it. Left out, ``batch`` is the fleet's
``EVALFLEET_BATCH_PRICE_MULTIPLIER`` (0.5 unless set), so configurations written before
this structure keep their meaning.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

#: Tokens a price is given for.
PER_TOKENS = 1_000_000


class ModelPrice(BaseModel):
    """One judge model's price as configured, in US dollars per million tokens."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    input: float = Field(ge=0, allow_inf_nan=False)
    """Prompt tokens not served from the provider's cache."""

    output: float = Field(ge=0, allow_inf_nan=False)
    """Completion tokens."""

    cached_input: float | None = Field(default=None, ge=0, allow_inf_nan=False)
    """Prompt tokens served from the provider's prompt cache; unset: the ``input`` price."""

    batch: float | None = Field(default=None, gt=0, le=1, allow_inf_nan=False)
    """Share of the synchronous price a Batch API request costs; unset: the fleet's
    ``batch_price_multiplier``."""

    @model_validator(mode="before")
    @classmethod
    def _two_numbers(cls, value: Any) -> Any:
        # The older form: [input, output].
        if isinstance(value, list | tuple):
            if len(value) != 2:
                raise ValueError(f"expected [input, output] or an object with input, "
                                 f"output, cached_input and batch, not {len(value)} numbers")
            return {"input": value[0], "output": value[1]}
        return value

    @model_validator(mode="after")
    def _cached_is_a_discount(self) -> ModelPrice:
        if self.cached_input is not None and self.cached_input > self.input:
            raise ValueError(f"cached_input ({self.cached_input:g}) is above input "
                             f"({self.input:g}): a cache hit never costs more")
        return self

    def resolved(self, *, batch_multiplier: float) -> Price:
        """The price with its defaults filled in.

        Args:
            batch_multiplier: The fleet's batch share, for a price that states none.

        Returns:
            Every rate known.
        """
        return Price(
            input_per_mtok=self.input, output_per_mtok=self.output,
            cached_input_per_mtok=self.input if self.cached_input is None else self.cached_input,
            batch_multiplier=batch_multiplier if self.batch is None else self.batch)


@dataclass(frozen=True, slots=True)
class Price:
    """One judge model's price with every rate known (:meth:`ModelPrice.resolved`)."""

    input_per_mtok: float
    output_per_mtok: float
    cached_input_per_mtok: float
    batch_multiplier: float
    """Share of the three rates above a Batch API request costs."""


def resolve_prices(prices: Mapping[str, ModelPrice], *,
                   batch_multiplier: float) -> dict[str, Price]:
    """Every configured model's price with its defaults filled in.

    Args:
        prices: The ``model_prices`` setting.
        batch_multiplier: The fleet's ``batch_price_multiplier``.

    Returns:
        By judge model.
    """
    return {model: price.resolved(batch_multiplier=batch_multiplier)
            for model, price in prices.items()}


def cost_usd(price: Price | None, *, prompt_tokens: int | None, completion_tokens: int | None,
             cached_tokens: int | None = None, batch: bool = False) -> float | None:
    """What judge calls cost.

    Cached tokens are part of the prompt tokens (as providers report them): they are
    priced at the cached rate and the rest of the prompt at the input rate. A count of
    cached tokens above the prompt's is taken as the whole prompt.

    Args:
        price: The judge model's price; None when it has none.
        prompt_tokens: Prompt tokens reported (None: usage unknown).
        completion_tokens: Completion tokens reported.
        cached_tokens: Of the prompt tokens, those served from the provider's cache.
        batch: Judged through the Batch API, at its share of the price.

    Returns:
        US dollars; None when the price or the usage is unknown.
    """
    if price is None or prompt_tokens is None:
        return None
    cached = min(max(cached_tokens or 0, 0), prompt_tokens)
    usd = ((prompt_tokens - cached) * price.input_per_mtok
           + cached * price.cached_input_per_mtok
           + (completion_tokens or 0) * price.output_per_mtok) / PER_TOKENS
    return usd * price.batch_multiplier if batch else usd
