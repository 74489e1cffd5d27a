"""The documentation stays true: the settings table matches the settings, the README
stays short, and every relative link leads somewhere."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from pydantic import BaseModel

from evalfleet import docs
from evalfleet.core.settings import Settings

ROOT = Path(__file__).resolve().parents[1]
CONFIGURATION = ROOT / "docs" / "configuration.md"

#: A newcomer reads the README in five minutes: about 12 KB at most.
README_MAX_BYTES = 12_288

_FENCE = re.compile(r"^```.*?^```", re.M | re.S)
_LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
_HEADING = re.compile(r"^#{1,6} (.+)$", re.M)
_CODE = re.compile(r"`([^`\s]+)`")
_REPO_PATH = re.compile(r"[A-Za-z_.][\w.\-]*/[\w.\-/*]*")

#: Paths the docs name that are made at run time, not shipped in the tree.
_RUNTIME_PATHS = {".evalfleet/demo/", "EVALFLEET_DATA_DIR/follow/", "test-artifacts/screenshots/"}


class _FrobnicateSettings(BaseModel):
    """Frobnication."""

    frobnicate_s: float = 2.5
    """How long to frobnicate, a ``judge_model`` side | the other side."""

    hidden: str | None = None
    """Unset means none."""


class _Extended(_FrobnicateSettings, Settings):
    pass


class _Ungrouped(Settings):
    loose: int = 3
    """A setting in no group."""


class _Undocumented(Settings):
    no_doc: int = 3


def _markdown_files() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), ROOT / "ops" / "runbook.md"]


def _anchor(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces as '-'."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def broken_links(files: list[Path]) -> list[str]:
    """Every relative link in ``files`` whose file, or heading anchor in a Markdown
    file, does not exist, as ``file: target``."""
    broken = []
    for path in files:
        for target in _LINK.findall(_FENCE.sub("", path.read_text(encoding="utf-8"))):
            if re.match(r"[a-z][a-z0-9+.-]*:", target):  # https:, mailto:...
                continue
            name, _, anchor = target.partition("#")
            linked = (path.parent / name).resolve() if name else path
            if not linked.exists():
                broken.append(f"{path.name}: {target}")
            elif anchor and linked.suffix == ".md":
                text = _FENCE.sub("", linked.read_text(encoding="utf-8"))
                if anchor not in {_anchor(h) for h in _HEADING.findall(text)}:
                    broken.append(f"{path.name}: {target} (no such heading)")
    return broken


def missing_paths(files: list[Path], root: Path) -> list[str]:
    """Every repository path written as code (`evalfleet/store/`, `ops/runbook.md`) in
    ``files``, outside code blocks, that matches nothing under ``root``."""
    missing = []
    for path in files:
        for token in _CODE.findall(_FENCE.sub("", path.read_text(encoding="utf-8"))):
            if (_REPO_PATH.fullmatch(token) and token not in _RUNTIME_PATHS
                    and not any(root.glob(token.rstrip("/")))):
                missing.append(f"{path.name}: {token}")
    return missing


def test_the_configuration_reference_matches_the_settings() -> None:
    current = CONFIGURATION.read_text(encoding="utf-8")
    assert docs.render(current) == current, (
        f"docs/configuration.md is out of date with evalfleet/core/settings.py: "
        f"run `{docs.REGENERATE}` and commit the result")


def test_every_setting_is_in_the_reference_under_its_environment_name() -> None:
    text = CONFIGURATION.read_text(encoding="utf-8")
    for name, variable in Settings.environment_names().items():
        assert f"| `{variable}` |" in text, name
    assert "| `OPENAI_BASE_URL` | unset |" in text
    assert "| `EVALFLEET_JUDGE_TIMEOUT_S` | `60` |" in text
    assert '| `EVALFLEET_METRICS_SEGMENT_KEYS` | `["app"]` |' in text


def test_a_new_setting_makes_the_reference_out_of_date() -> None:
    current = CONFIGURATION.read_text(encoding="utf-8")
    rendered = docs.render(current, _Extended)
    assert rendered != current
    row = ("| `EVALFLEET_FROBNICATE_S` | `2.5` | How long to frobnicate, a "
           "`EVALFLEET_JUDGE_MODEL` side \\| the other side. |")
    assert row in rendered.splitlines()
    assert "| `EVALFLEET_HIDDEN` | unset | Unset means none. |" in rendered
    # Everything outside the markers is kept as it was.
    before, after = current.split(docs.BEGIN)[0], current.split(docs.END)[1]
    assert rendered.startswith(before) and rendered.endswith(after)


def test_a_setting_without_a_docstring_is_refused() -> None:
    with pytest.raises(ValueError, match="no_doc"):
        docs.settings_table(_Undocumented)


def test_a_setting_in_no_group_is_refused() -> None:
    with pytest.raises(ValueError, match="loose"):
        docs.settings_table(_Ungrouped)


def test_each_group_is_a_section_and_a_value() -> None:
    text = CONFIGURATION.read_text(encoding="utf-8")
    judge = text.index("### The judge")
    assert text.index("| `EVALFLEET_JUDGE_RPM` |") > judge > text.index("### The broker")
    settings = Settings(judge_model="judge-x", alert_tick_s=3.0)
    assert settings.judge.judge_model == "judge-x" and settings.alerts.alert_tick_s == 3.0
    assert set(settings.retention.model_dump()) == {
        "verdict_retention_days", "raw_output_retention_days", "sample_retention_days",
        "dataset_retention_days"}


@pytest.mark.parametrize("document", [
    "no markers at all\n",
    f"{docs.END}\n{docs.BEGIN}\n",
    f"{docs.BEGIN}\n{docs.END}\n{docs.BEGIN}\n{docs.END}\n",
])
def test_markers_missing_repeated_or_reversed_are_refused(document: str) -> None:
    with pytest.raises(ValueError, match="once each"):
        docs.render(document)


def test_the_command_checks_and_rewrites_the_table(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    copy = tmp_path / "configuration.md"
    current = CONFIGURATION.read_text(encoding="utf-8")
    copy.write_text(current.replace("| `EVALFLEET_JUDGE_TIMEOUT_S` | `60` |",
                                    "| `EVALFLEET_JUDGE_TIMEOUT_S` | `61` |"))
    assert docs.main([str(copy), "--check"]) == 1
    assert docs.REGENERATE in capsys.readouterr().err
    assert docs.main([str(copy)]) == 0
    assert copy.read_text() == current
    assert docs.main([str(copy), "--check"]) == 0


def test_the_readme_stays_short() -> None:
    size = len((ROOT / "README.md").read_bytes())
    assert size <= README_MAX_BYTES, (
        f"README.md is {size:,} bytes, over {README_MAX_BYTES:,}: move detail to docs/")


def test_every_relative_link_leads_to_a_file_and_heading() -> None:
    assert broken_links(_markdown_files()) == []


def test_a_broken_link_is_reported(tmp_path: Path) -> None:
    (tmp_path / "there.md").write_text("# A heading\n\n```\n# not a heading\n```\n")
    page = tmp_path / "page.md"
    page.write_text(
        "[ok](there.md) [ok](there.md#a-heading) [web](https://example.com/x.md)\n"
        "[gone](missing.md) [no anchor](there.md#not-a-heading) [self](#nowhere)\n"
        "```\n[in code](also-missing.md)\n```\n")
    assert broken_links([page]) == [
        "page.md: missing.md",
        "page.md: there.md#not-a-heading (no such heading)",
        "page.md: #nowhere (no such heading)",
    ]


def test_every_path_the_docs_name_exists() -> None:
    """The module walk and the topic files name real files: a move updates them too."""
    assert missing_paths(_markdown_files(), ROOT) == []


def test_a_missing_path_is_reported(tmp_path: Path) -> None:
    (tmp_path / "evalfleet" / "store").mkdir(parents=True)
    (tmp_path / "workers").mkdir()
    (tmp_path / "workers" / "app.py").write_text("")
    page = tmp_path / "page.md"
    page.write_text("`evalfleet/store/`, `workers/app.py`, `workers/*.py`, `redis://x/0`,\n"
                    "`/v1/samples`, `workers/gone.py`, `.evalfleet/demo/`\n"
                    "```\nworkers/also_gone.py `workers/also_gone.py`\n```\n")
    assert missing_paths([page], tmp_path) == ["page.md: workers/gone.py"]
