"""The simulated judge's prompt cache: how many prompt tokens a request finds cached. Pure.

Modelled on OpenAI's: a prompt is cut into blocks of ``block_tokens`` tokens (one token
per four characters, as the usage estimate counts them) and each block is named by a
digest of the model and the whole prompt up to the block's end, so a block matches only
when everything before it matched too. A request's cached tokens are the tokens of its
leading blocks seen before, counted only from ``min_tokens`` on (OpenAI caches prompts of
1,024 tokens or more, in 128-token steps); then its blocks are remembered. The memory is
bounded: at most ``max_blocks`` digests (16 bytes each), the least recently seen dropped
first. ``prompt_cache_key`` does not change what hits (a provider uses it to route calls
to one cache; the simulator has one), so two samples of one metric share their prefix
whatever keys they carry.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict

from evalfleet.core.tokens import CHARS_PER_TOKEN

#: Bytes of a block's digest kept.
DIGEST_BYTES = 16


class PromptCache:
    """The prefix blocks the simulator has seen, least recently seen first.

    Args:
        block_tokens: Tokens per block: cached tokens come in multiples of it.
        min_tokens: Shortest cached prefix reported; a shorter match counts as none.
        max_blocks: Block digests remembered at most.
    """

    def __init__(self, *, block_tokens: int, min_tokens: int, max_blocks: int) -> None:
        self.block_tokens = block_tokens
        self.min_tokens = min_tokens
        self.max_blocks = max_blocks
        self._blocks: OrderedDict[bytes, None] = OrderedDict()

    def __len__(self) -> int:
        return len(self._blocks)

    def serve(self, text: str, *, model: str) -> int:
        """The cached tokens of a prompt, which is then remembered.

        Args:
            text: The prompt (the message contents, concatenated).
            model: The model asked for (each model has its own cache).

        Returns:
            Cached prompt tokens: whole blocks, 0 below ``min_tokens``.
        """
        digests = _block_digests(text, model=model, block_chars=self.block_tokens * CHARS_PER_TOKEN)
        hits = 0
        for digest in digests:
            if digest not in self._blocks:
                break
            hits += 1
        for digest in digests:
            self._blocks[digest] = None
            self._blocks.move_to_end(digest)
        while len(self._blocks) > self.max_blocks:
            self._blocks.popitem(last=False)
        cached = hits * self.block_tokens
        return cached if cached >= self.min_tokens else 0


def _block_digests(text: str, *, model: str, block_chars: int) -> list[bytes]:
    """The digest of each whole block of ``text``, each over everything up to its end."""
    running = hashlib.sha256(model.encode("utf-8", "surrogatepass") + b"\x00")
    digests = []
    for end in range(block_chars, len(text) + 1, block_chars):
        running.update(text[end - block_chars:end].encode("utf-8", "surrogatepass"))
        digests.append(running.copy().digest()[:DIGEST_BYTES])
    return digests
