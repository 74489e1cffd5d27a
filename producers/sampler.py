"""Deterministic sampling by sample id. Pure.

A sample's fate depends only on its id, so reruns, replicas and restarts agree,
and rates nest: a sample kept at 5% is also kept at 10%.
"""

from __future__ import annotations

import hashlib

#: 2**64, the size of the hash space the id is mapped into.
_HASH_SPACE = float(1 << 64)


def id_fraction(sample_id: str) -> float:
    """Where ``sample_id`` falls in [0, 1), uniformly over ids."""
    digest = hashlib.blake2b(sample_id.encode("utf-8"), digest_size=8).digest()
    return int.from_bytes(digest, "big") / _HASH_SPACE


def is_sampled(sample_id: str, rate: float) -> bool:
    """True when the sample is kept at sampling ``rate`` (0..1)."""
    return id_fraction(sample_id) < rate
