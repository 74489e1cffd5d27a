"""The machine tools some tests run, and the Debian package each comes from.

CI installs them all (``.ci/run``); a developer's machine may lack one. A test that needs
a missing tool is skipped with the package to install, so a short run on a laptop says
what to install instead of failing somewhere inside a fixture.
"""

from __future__ import annotations

import glob
import os
import shutil

import pytest

#: The Debian package each tool comes from.
PACKAGES = {
    "promtool": "prometheus",
    "prometheus": "prometheus",
    "amtool": "prometheus-alertmanager",
    "prometheus-alertmanager": "prometheus-alertmanager",
    "alertmanager": "prometheus-alertmanager",
    "chromium": "chromium",
    "chromedriver": "chromium-driver",
    "redis-server": "redis-server",
    "initdb": "postgresql",
}

#: Where Debian keeps PostgreSQL's server programs (``initdb``, ``postgres``).
POSTGRES_BIN_GLOB = "/usr/lib/postgresql/*/bin"


def require_tool(*names: str) -> str:
    """The path of the first of ``names`` found, else skip the test naming the package.

    Args:
        names: The tool's names, the usual one first (keys of :data:`PACKAGES`).

    Returns:
        The tool's path.
    """
    search = os.pathsep.join([os.environ.get("PATH", ""), *sorted(glob.glob(POSTGRES_BIN_GLOB))])
    for name in names:
        found = shutil.which(name, path=search)
        if found:
            return found
    pytest.skip(f"{names[0]} is missing: apt-get install {PACKAGES[names[0]]} "
                "(.ci/run installs it)")
