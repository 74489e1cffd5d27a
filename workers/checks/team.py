"""Finding a team's check function and the version of the package it comes from.

Team checks are trusted code deployed with the fleet: a function named in the metric
file as ``module:function``, or an entry point of the ``evalfleet.checks`` group. Only
the worker resolves them, and never imports them: the function runs in the check
process pool (:mod:`workers.checks.pool`). The installed package's version is part of
the check's version, so upgrading the package re-judges and an unchanged one never does.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from importlib import metadata

from evalfleet.core.checkspec import LoadedCheck, Team

#: The entry point group team checks are registered under.
ENTRY_POINT_GROUP = "evalfleet.checks"


@dataclass(frozen=True)
class TeamFunction:
    """Where a team check's function lives."""

    target: str | None
    """``module:function``; None when the entry point is not installed."""
    package: str
    """``name==version`` of the distribution that provides it (empty when none does)."""


def resolve(spec: Team) -> TeamFunction:
    """The function ``spec`` names and the package that provides it, found without
    importing anything (once per metric version and worker process: reading every
    installed distribution's metadata takes tens of milliseconds)."""
    if spec.entry_point is not None:
        found = metadata.entry_points(group=ENTRY_POINT_GROUP, name=spec.entry_point)
        for entry in found:
            dist = entry.dist
            return TeamFunction(entry.value, f"{dist.name}=={dist.version}" if dist else "")
        return TeamFunction(None, "")
    assert spec.function is not None
    top = spec.function.split(":", 1)[0].split(".", 1)[0]
    names = metadata.packages_distributions().get(top, [])
    package = ",".join(sorted(f"{name}=={metadata.version(name)}" for name in set(names)))
    return TeamFunction(spec.function, package)


def team_version(check: LoadedCheck, function: TeamFunction) -> str:
    """The version a team check's verdicts are keyed by: its parameters' hash and the
    providing package's name and version."""
    digest = hashlib.sha256(f"{check.version}\0{function.package}".encode())
    return digest.hexdigest()[:len(check.version)]
