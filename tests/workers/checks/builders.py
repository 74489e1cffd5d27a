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
