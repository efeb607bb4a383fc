"""The helpers every stage shares: atomic writes and finding the reference data."""

from __future__ import annotations

from pathlib import Path

import pytest
from core_parts import missing

from forklift.atomic import write_text_atomically, written_atomically
from forklift.errors import ForkliftError
from forklift.shared_data import ENVIRONMENT, shared_data_path, shared_data_root


def test_a_failed_write_leaves_the_old_file_and_no_partial(tmp_path: Path) -> None:
    target = tmp_path / "deep" / "state.json"
    write_text_atomically(target, "old")
    with pytest.raises(RuntimeError), written_atomically(target) as partial:
        partial.write_text("half of the new")
        raise RuntimeError("disk full")
    assert target.read_text() == "old"
    assert [p.name for p in target.parent.iterdir()] == ["state.json"]
    write_text_atomically(target, "new")
    assert target.read_text() == "new" and [p.name for p in target.parent.iterdir()] == ["state.json"]


def test_shared_data_follows_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "images").mkdir()
    (tmp_path / "images" / "dog.jpg").write_bytes(b"not really")
    monkeypatch.setenv(ENVIRONMENT, str(tmp_path))
    assert shared_data_root() == tmp_path
    assert shared_data_path("images/dog.jpg") == tmp_path / "images" / "dog.jpg"
    with pytest.raises(ForkliftError, match=f"images/cat.jpg: not found; set {ENVIRONMENT}"):
        shared_data_path("images/cat.jpg")


def test_shared_data_is_found_beside_the_checkout_from_any_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(ENVIRONMENT, raising=False)
    monkeypatch.chdir(tmp_path)  # no ../shared/data here
    root = shared_data_root()
    if not root.is_dir():
        missing(f"no shared/data beside this checkout ({root})")
    assert root.resolve() == (Path(__file__).resolve().parents[2] / "shared" / "data").resolve()
