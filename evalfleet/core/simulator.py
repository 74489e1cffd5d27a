"""The judge simulator's one name, and how a verdict it judged is recognised.

The simulator answers any model name it is asked for (a fleet on default settings asks
for ``gpt-4o-mini``), and that name is part of the verdict key, so it cannot say who
judged. The ``system_fingerprint`` it reports can: it is this name unless a test makes
the simulator play a provider that swapped its backend.
"""

from __future__ import annotations

#: The simulator's name: the model it lists, the fingerprint it reports, and the judge
#: model the demo asks it for.
SIMULATOR_NAME = "judge-sim"


def judged_by_simulator(fingerprint: str | None) -> bool:
    """Whether a reply with this ``system_fingerprint`` came from the judge simulator."""
    return fingerprint is not None and fingerprint.startswith(SIMULATOR_NAME)
