"""The one token estimate: text, characters and a chat prompt count alike."""

from __future__ import annotations

import pytest

from evalfleet.core.tokens import estimate_tokens, prompt_tokens, tokens_in_chars


@pytest.mark.parametrize(("characters", "tokens"), [(0, 0), (1, 1), (4, 1), (5, 2), (8, 2)])
def test_characters_round_up_to_tokens(characters: int, tokens: int) -> None:
    assert tokens_in_chars(characters) == tokens == estimate_tokens("x" * characters)


def test_a_prompt_counts_its_contents_together() -> None:
    messages = [{"role": "system", "content": "abc"}, {"role": "user", "content": "defgh"}]
    assert prompt_tokens(messages) == estimate_tokens("abcdefgh") == 2


def test_a_content_that_is_not_text_counts_by_its_printed_length() -> None:
    assert prompt_tokens([{"content": ["abcd"]}, {"content": 12345}]) == tokens_in_chars(
        len("['abcd']") + len("12345"))


def test_a_missing_content_counts_nothing() -> None:
    assert prompt_tokens([{"role": "user"}, {"role": "user", "content": None}]) == 0
