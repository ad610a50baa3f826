"""Atomic outputs: a full disk, a read-only folder or a killed writer leave nothing half-written."""

from __future__ import annotations

import errno
import json
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import save_file

from sentemb.io import OutputError, atomic_path, write_json


def leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.startswith(".partial-"))


def test_replaces_file_and_folder_in_one_rename(tmp_path: Path) -> None:
    write_json(tmp_path / "m.json", {"a": 1})
    write_json(tmp_path / "m.json", {"a": 2})
    assert json.loads((tmp_path / "m.json").read_text()) == {"a": 2}
    for value in ("first", "second"):
        with atomic_path(tmp_path / "model") as tmp:
            tmp.mkdir()
            (tmp / "weights").write_text(value)
    assert (tmp_path / "model" / "weights").read_text() == "second"
    assert leftovers(tmp_path) == []


def test_error_in_body_keeps_earlier_output(tmp_path: Path) -> None:
    write_json(tmp_path / "m.json", {"a": 1})
    with pytest.raises(KeyError), atomic_path(tmp_path / "m.json") as tmp:
        tmp.write_text("half")
        raise KeyError("boom")
    assert json.loads((tmp_path / "m.json").read_text()) == {"a": 1}
    assert leftovers(tmp_path) == []


def test_no_space_error_names_the_output(tmp_path: Path) -> None:
    """Portable: the errno a full disk raises, injected."""
    full = pytest.raises(OutputError, match=r"m\.json: not written, the disk is full")
    with full, atomic_path(tmp_path / "m.json") as tmp:
        tmp.write_text("half")
        raise OSError(errno.ENOSPC, "No space left on device")
    assert not (tmp_path / "m.json").exists() and leftovers(tmp_path) == []


@pytest.mark.parametrize("writer", ["json", "safetensors"])
def test_real_full_disk(full_disk: Path, writer: str) -> None:
    """A 4 MiB filesystem with 64 KiB free: JSON raises OSError, safetensors its own error."""
    write_json(full_disk / "out", {"earlier": True})
    big = np.zeros(1 << 18, dtype=np.float32)  # 1 MiB
    full = pytest.raises(OutputError, match="not written, the disk is full")
    with full as info, atomic_path(full_disk / "out") as tmp:
        if writer == "json":
            tmp.write_text(json.dumps(big.tolist()))
        else:
            save_file({"w": big}, tmp)
    assert "the earlier one is untouched" in str(info.value)
    assert json.loads((full_disk / "out").read_text()) == {"earlier": True}
    assert leftovers(full_disk) == []


def test_read_only_folder(read_only: Path) -> None:
    with pytest.raises(OutputError, match=r"earlier\.json: not written: .*(Read-only|denied)"):
        write_json(read_only / "earlier.json", {"new": True})
    with pytest.raises(OutputError, match=r"sub/new\.json: not written"):
        write_json(read_only / "sub" / "new.json", {"new": True})
    assert (read_only / "earlier.json").read_text() == "{}\n"


def test_killed_writer_temporary_is_removed_by_next_write(tmp_path: Path) -> None:
    stale = tmp_path / ".partial-m.json.abc123"
    stale.mkdir()
    (stale / "tmp").write_text("half")
    (tmp_path / ".partial-other.json.x").mkdir()
    write_json(tmp_path / "m.json", {"a": 1})
    assert leftovers(tmp_path) == [".partial-other.json.x"]
