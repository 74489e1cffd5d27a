"""What the check tests share: the example check metric in a metrics folder of its own."""

from __future__ import annotations

import shutil
from importlib import resources
from pathlib import Path

EXAMPLES = Path(str(resources.files("prompts"))) / "examples"


def contract_metrics(tmp_path: Path) -> Path:
    """A metrics folder under ``tmp_path`` holding the example check metric and its schema."""
    folder = tmp_path / "metrics"
    folder.mkdir()
    for name in ("output_contract.yaml", "answer.schema.json"):
        shutil.copy(EXAMPLES / name, folder / name)
    return folder


#: The team check package's distribution name and entry points.
TEAM_PACKAGE = "acme-checks"
TEAM_ENTRY_POINTS = ("polite", "raises", "sleeps", "spins", "seven", "exits")


def install_team_package(folder: Path, *, version: str = "1.0") -> Path:
    """Install the team check package into ``folder`` as pip would (module, dist-info
    with ``evalfleet.checks`` entry points); put ``folder`` on the path to use it."""
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copy(Path(__file__).parent / "team_package" / "acme_checks.py", folder)
    for old in folder.glob("acme_checks-*.dist-info"):
        shutil.rmtree(old)
    info = folder / f"acme_checks-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {TEAM_PACKAGE}\n"
                                   f"Version: {version}\n")
    (info / "top_level.txt").write_text("acme_checks\n")
    (info / "RECORD").write_text("acme_checks.py,,\n")
    (info / "entry_points.txt").write_text("[evalfleet.checks]\n" + "".join(
        f"{name} = acme_checks:{name}\n" for name in TEAM_ENTRY_POINTS))
    return folder
