"""Follow positions on disk: atomic, durable, and a clear error when unreadable."""

from __future__ import annotations

from pathlib import Path

import pytest

from evalfleet.core.errors import InvalidInput
from producers.offsets import OffsetStore, Position, default_offset_path, file_fingerprint


def test_save_and_load(tmp_path: Path) -> None:
    store = OffsetStore(tmp_path / "follow" / "x.json")
    assert store.load() is None
    position = Position(device=1, inode=2, offset=30, line=3, fingerprint="ab")
    store.save(position)
    assert store.load() == position
    assert not list((tmp_path / "follow").glob("*.tmp"))


def test_corrupt_file_is_a_clear_error(tmp_path: Path) -> None:
    (tmp_path / "x.json").write_text("{not json")
    with pytest.raises(InvalidInput, match="delete it to start"):
        OffsetStore(tmp_path / "x.json").load()


def test_default_path_depends_on_the_followed_path(tmp_path: Path) -> None:
    first = default_offset_path(tmp_path / "data", tmp_path / "a" / "app.log")
    second = default_offset_path(tmp_path / "data", tmp_path / "b" / "app.log")
    assert first != second and first.parent == tmp_path / "data" / "follow"
    assert first.name.startswith("app.log.")


def test_fingerprint_needs_the_bytes(tmp_path: Path) -> None:
    path = tmp_path / "f"
    path.write_bytes(b"hello\n")
    assert file_fingerprint(path, length=6) == file_fingerprint(path, length=6)
    assert file_fingerprint(path, length=7) is None
    assert file_fingerprint(tmp_path / "missing", length=1) is None
