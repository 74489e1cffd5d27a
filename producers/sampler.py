"""Deterministic sampling by sample id. Pure.

A sample's fate depends only on its id (or its sampling key: the trace id of a sample
built from a trace) and the metric, so reruns, replicas and restarts agree, and rates
nest: a sample kept at 5% is also kept at 10%. The hash is salted by its purpose and
the metric (``sample``, metric, key), so each metric's sample is independent of the
other metrics' and of the other choices made by hash (the shadow share, the review
slice).
"""

from __future__ import annotations

import hashlib

#: 2**64, the size of the hash space the id is mapped into.
_HASH_SPACE = float(1 << 64)

#: The purpose the producers' sampling hash is salted with.
SAMPLE_SALT = "sample"


def id_fraction(value: str) -> float:
    """Where ``value`` falls in [0, 1), uniformly over values (callers salt it)."""
    digest = hashlib.blake2b(value.encode("utf-8"), digest_size=8).digest()
    return int.from_bytes(digest, "big") / _HASH_SPACE


def sampling_fraction(key: str, *, metric: str) -> float:
    """Where a sample falls in [0, 1) for ``metric``'s rate.

    Args:
        key: The sample id, or its sampling key (a trace id).
        metric: The metric the rate is of.
    """
    return id_fraction("\x1f".join((SAMPLE_SALT, metric, key)))


def is_sampled(key: str, rate: float, *, metric: str) -> bool:
    """True when the sample is kept for ``metric`` at sampling ``rate`` (0..1).

    Args:
        key: The sample id, or its sampling key (a trace id).
        rate: The metric's rate.
        metric: The metric.
    """
    return sampling_fraction(key, metric=metric) < rate
