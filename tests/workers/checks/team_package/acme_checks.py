"""A team's own checks, as a package installed with the fleet would hold them (the tests
install it by entry point on a temporary path)."""

from __future__ import annotations

import os
import time

from evalfleet.core.sample import Sample


def polite(sample: Sample, *, words: tuple[str, ...] = ("please", "thank")) -> tuple[float, str]:
    """The share of ``words`` the answer uses."""
    found = [word for word in words if word in sample.output.lower()]
    return len(found) / len(words), f"uses {len(found)} of {len(words)} polite words"


def raises(sample: Sample) -> tuple[float, str]:
    """Fails as a bug in a check would."""
    raise ValueError(f"cannot read {sample.id}")


def sleeps(sample: Sample, *, seconds: float = 3600.0) -> tuple[float, str]:
    """Waits far past any limit."""
    time.sleep(seconds)
    return 1.0, "woke up"


def spins(sample: Sample) -> tuple[float, str]:
    """Never returns and never waits."""
    while True:
        pass


def seven(sample: Sample) -> tuple[float, str]:
    """A score off a 0..1 scale."""
    return 7, "seven"


def exits(sample: Sample) -> tuple[float, str]:
    """Kills its own process."""
    os._exit(3)
