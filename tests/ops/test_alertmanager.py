"""The shipped Alertmanager config passes amtool, and routes evalfleet's alerts as documented."""

from __future__ import annotations

import subprocess

import pytest

from tests.ops.dashboard import ROOT
from tests.ops.servers import binary

CONFIG = ROOT / "ops" / "alertmanager" / "alertmanager.yml"


def amtool(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([binary("amtool"), *args], capture_output=True, text=True,
                          timeout=60, check=False)


def test_config_passes_amtool() -> None:
    result = amtool("check-config", str(CONFIG))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "1 inhibit rules" in result.stdout


def test_a_broken_config_fails_amtool(tmp_path: pytest.TempPathFactory) -> None:
    broken = tmp_path / "am.yml"  # type: ignore[operator]
    broken.write_text(CONFIG.read_text().replace("receiver: quality-oncall", "receiver: nobody"))
    assert amtool("check-config", str(broken)).returncode != 0


@pytest.mark.parametrize("labels", [
    ["alertname=faithfulness_drop", "metric=rag_qa", "score=faithfulness", "app=bot"],
    ["alertname=faithfulness_drop", "metric=rag_qa", "score=faithfulness"],
    ["alertname=faithfulness_drop_no_data", "metric=rag_qa"],
])
def test_every_quality_alert_reaches_the_oncall_receiver(labels: list[str]) -> None:
    result = amtool("config", "routes", "test", f"--config.file={CONFIG}", *labels)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "quality-oncall"
