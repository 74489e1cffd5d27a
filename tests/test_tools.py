"""A test whose machine tool is missing says which Debian package to install."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.tools import PACKAGES, require_tool

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize(("tool", "package"), [
    ("promtool", "prometheus"), ("amtool", "prometheus-alertmanager"),
    ("chromedriver", "chromium-driver"), ("redis-server", "redis-server"),
    ("initdb", "postgresql")])
def test_a_missing_tool_skips_naming_its_package(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path, tool: str, package: str) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr("tests.tools.POSTGRES_BIN_GLOB", str(tmp_path / "none"))
    with pytest.raises(pytest.skip.Exception,
                       match=re.escape(f"{tool} is missing: apt-get install {package} ")):
        require_tool(tool)


def test_every_package_ci_installs_is_named() -> None:
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    installed = set(re.findall(r"missing\+=\(([\w-]+)\)", ci))
    assert installed and installed <= set(PACKAGES.values())
