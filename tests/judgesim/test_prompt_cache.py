"""The simulator's prompt cache: whole blocks of a repeated prefix, per model, bounded."""

from __future__ import annotations

import pytest

from evalfleet.judgesim.prompt_cache import PromptCache

#: One block of 4 tokens is 16 characters.
BLOCK = "x" * 16


def cache(*, min_tokens: int = 0, max_blocks: int = 1000) -> PromptCache:
    return PromptCache(block_tokens=4, min_tokens=min_tokens, max_blocks=max_blocks)


@pytest.mark.parametrize(("first", "then", "cached"), [
    ("a" * 64, "a" * 64, 16),  # the same prompt: every whole block
    ("a" * 64 + "tail", "a" * 64 + "other tail", 16),  # a partial block is never cached
    ("a" * 48 + "b" * 16, "a" * 48 + "c" * 16, 12),  # up to the first block that differs
    ("b" + "a" * 63, "a" * 64, 0),  # one character before changes every block after it
    ("a" * 15, "a" * 15, 0),  # shorter than a block
    ("", "a" * 64, 0),
])
def test_cached_tokens_are_the_leading_blocks_seen_before(first: str, then: str,
                                                          cached: int) -> None:
    prompts = cache()
    assert prompts.serve(first, model="m") == 0
    assert prompts.serve(then, model="m") == cached


def test_each_model_has_its_own_cache() -> None:
    prompts = cache()
    prompts.serve(BLOCK * 4, model="m")
    assert prompts.serve(BLOCK * 4, model="other") == 0
    assert prompts.serve(BLOCK * 4, model="m") == 16


def test_a_prefix_below_the_minimum_counts_as_none() -> None:
    prompts = cache(min_tokens=12)
    prompts.serve("a" * 64, model="m")
    assert prompts.serve("a" * 32 + "b" * 32, model="m") == 0  # 8 tokens matched
    assert prompts.serve("a" * 48 + "c" * 16, model="m") == 12


def test_memory_is_bounded_least_recently_seen_first() -> None:
    prompts = cache(max_blocks=8)
    prompts.serve("a" * 64, model="m")  # 4 blocks
    for n in range(10):
        prompts.serve(f"{n:016d}" * 4, model="m")
        assert len(prompts) <= 8
    assert prompts.serve("a" * 64, model="m") == 0  # pushed out
    assert prompts.serve(f"{9:016d}" * 4, model="m") == 16  # the newest stays
