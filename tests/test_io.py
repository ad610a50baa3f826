"""Atomic outputs: a full disk, a read-only folder or a killed writer leave nothing half-written,
and an output never replaces anything the pipeline did not write."""

from __future__ import annotations

import errno
import json
import os
import re
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import save_file

from sentemb.io import (
    MARKER,
    MARKER_HEADER,
    PARTIAL_MARKER,
    OutputError,
    atomic_path,
    check_folder,
    check_output,
    flatten,
    numbers,
    write_json,
)

from support.stages import snapshot, user_folder


def leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.startswith(".partial-"))


def test_replaces_file_and_folder_in_one_rename(tmp_path: Path) -> None:
    write_json(tmp_path / "m.json", {"a": 1})
    write_json(tmp_path / "m.json", {"a": 2})
    assert json.loads((tmp_path / "m.json").read_text()) == {"a": 2}
    for value in ("first", "second"):
        with atomic_path(tmp_path / "model", folder=True) as tmp:
            tmp.mkdir()
            (tmp / "weights").write_text(value)
    assert (tmp_path / "model" / "weights").read_text() == "second"
    assert leftovers(tmp_path) == []


def test_an_atomic_write_into_another_s_temporary_ends(tmp_path: Path) -> None:
    """`write_json(tmp)` inside `atomic_path`'s body: the inner rename used to wait forever
    for the lock the outer writer holds on its own temporary folder."""
    out = tmp_path / "board.json"
    with atomic_path(out) as tmp:
        write_json(tmp, {"rows": 1})
    assert json.loads(out.read_text()) == {"rows": 1}
    assert [p.name for p in tmp_path.iterdir()] == ["board.json"]


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
    """A killed writer's temporary (marked) goes, as does one it made and died before marking
    (empty); a user's own folder of that name, another output's temporary, stay."""
    stale = tmp_path / ".partial-m.json.abc123"
    stale.mkdir()
    (stale / PARTIAL_MARKER).touch()
    (stale / "tmp").write_text("half")
    (tmp_path / ".partial-m.json.unmarked").mkdir()
    users = tmp_path / ".partial-m.json.mine"
    users.mkdir()
    (users / "notes.txt").write_text("mine")
    (tmp_path / ".partial-other.json.x").mkdir()
    write_json(tmp_path / "m.json", {"a": 1})
    assert leftovers(tmp_path) == [".partial-m.json.mine", ".partial-other.json.x"]
    assert (users / "notes.txt").read_text() == "mine"


HOLDER = """import fcntl, os, sys
fd = os.open(sys.argv[1], os.O_RDONLY | os.O_DIRECTORY)
fcntl.flock(fd, fcntl.LOCK_EX)
print("held", flush=True)
sys.stdin.readline()
"""


def test_a_folder_named_like_a_temporary_still_gets_one_rename_at_a_time(tmp_path: Path) -> None:
    """Only the temporaries this process holds skip the rename lock (a write into its own would
    wait for itself): an output in a user's folder named `.partial-x` waits for the lock as in
    any other folder."""
    folder = tmp_path / ".partial-x"
    folder.mkdir()
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(folder)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        writer = threading.Thread(target=write_json, args=(folder / "m.json", {"a": 1}))
        writer.start()
        writer.join(0.5)
        assert writer.is_alive() and not (folder / "m.json").exists()
        holder.communicate("go\n", timeout=30)
        writer.join(30)
        assert not writer.is_alive()
    finally:
        holder.kill()
    assert json.loads((folder / "m.json").read_text()) == {"a": 1}


WRITER = """import sys, time
from sentemb.io import atomic_path
with atomic_path(sys.argv[1]) as tmp:
    tmp.write_text("half")
    print("writing", flush=True)
    time.sleep(60)
"""


def test_live_writer_temporary_is_kept_and_removed_once_it_is_killed(tmp_path: Path) -> None:
    """A writer holds a lock on its temporary while it lives; the kernel drops it on kill -9."""
    writer = subprocess.Popen(
        [sys.executable, "-c", WRITER, str(tmp_path / "m.json")], stdout=subprocess.PIPE, text=True
    )
    try:
        assert writer.stdout is not None and writer.stdout.readline() == "writing\n"
        live = leftovers(tmp_path)
        write_json(tmp_path / "m.json", {"a": 1})
        assert leftovers(tmp_path) == live and len(live) == 1
        assert (tmp_path / live[0] / "tmp").read_text() == "half"
    finally:
        writer.kill()
        writer.wait()
    write_json(tmp_path / "m.json", {"a": 2})
    assert leftovers(tmp_path) == []


def test_concurrent_writers_of_a_folder_each_publish_it_whole(tmp_path: Path) -> None:
    """Two writers of one folder output (one process can stand for two: a lock is per open file),
    each writing files into its temporary one by one as the download stage does: the second
    leaves the first's temporary alone, and the last rename wins with its folder complete."""
    out = tmp_path / "raw"
    with atomic_path(out, folder=True) as first:
        write_json(first / "sub" / "a.json", "first")
        with atomic_path(out, folder=True) as second:
            write_json(second / "sub" / "a.json", "second")
        assert json.loads((out / "sub" / "a.json").read_text()) == "second"
        write_json(first / "sub" / "b.json", "first")
    files = snapshot(out)
    assert sorted(files) == [MARKER, "sub/a.json", "sub/b.json"]
    assert files["sub/a.json"] == files["sub/b.json"] == b'"first"\n'
    assert leftovers(tmp_path) == []


@pytest.mark.parametrize("kind", ["file", "link to nothing"])
@pytest.mark.parametrize("folder", [False, True])
def test_output_below_a_file_is_refused(tmp_path: Path, kind: str, folder: bool) -> None:
    """`plots/a.json` with `plots` a file once failed half-way with `Not a directory`."""
    above = tmp_path / "plots"
    if kind == "file":
        above.write_text("mine")
    else:
        above.symlink_to(tmp_path / "nothing")
    before = snapshot(tmp_path)
    for path in (above / "a.json", above / "sub" / "a.json"):
        why = rf"^{re.escape(str(path))}: not written: {re.escape(str(above))} is a file, not a"
        with pytest.raises(OutputError, match=why):
            check_output(path, folder=folder)
        with pytest.raises(OutputError, match=why), atomic_path(path, folder=folder):
            pass
    with pytest.raises(OutputError, match=rf"^{re.escape(str(above))}: not written: "):
        check_folder(above)
    check_folder(tmp_path / "new" / "plots")
    assert snapshot(tmp_path) == before and leftovers(tmp_path) == []


def pipeline_folder(path: Path) -> Path:
    """A folder output as `atomic_path` writes it."""
    with atomic_path(path, folder=True) as tmp:
        (tmp / "sub").mkdir(parents=True)
        (tmp / "weights").write_text("w")
        (tmp / "sub" / "config.json").write_text("{}")
    return path


@pytest.mark.parametrize("kind", ["folder with files", "empty folder", "link to a folder"])
def test_file_output_never_replaces_a_folder(tmp_path: Path, kind: str) -> None:
    target = tmp_path / "metrics"
    if kind == "folder with files":
        user_folder(target)
    elif kind == "empty folder":
        target.mkdir()
    else:
        target.symlink_to(user_folder(tmp_path / "elsewhere"))
    before = snapshot(tmp_path)
    refused = rf"^{re.escape(str(target))}: not written: it would replace a folder, and this output"
    with pytest.raises(OutputError, match=refused):
        write_json(target, {"a": 1})
    ran = []
    with pytest.raises(OutputError, match=refused), atomic_path(target) as tmp:
        ran.append(tmp)  # refused before the body runs: no work is done for nothing
    assert ran == [] and snapshot(tmp_path) == before and target.exists()


@pytest.mark.parametrize("kind", ["user folder", "pipeline folder + user file", "file", "link"])
def test_folder_output_replaces_only_what_the_pipeline_wrote(tmp_path: Path, kind: str) -> None:
    target = tmp_path / "model"
    if kind == "user folder":
        user_folder(target)
        reason = f"a folder the pipeline did not write \\(no {MARKER}\\)"
    elif kind == "pipeline folder + user file":
        (pipeline_folder(target) / "sub" / "mine.txt").write_text("mine")
        reason = r"files the pipeline did not write \(sub/mine\.txt\)"
    elif kind == "file":
        target.write_text("mine")
        reason = "a file or link, and this output is a folder"
    else:
        target.symlink_to(pipeline_folder(tmp_path / "elsewhere"))
        reason = "a file or link, and this output is a folder"
    before = snapshot(tmp_path)
    refused = rf"^{re.escape(str(target))}: not written: it would replace {reason}"
    with pytest.raises(OutputError, match=refused):
        pipeline_folder(target)
    assert snapshot(tmp_path) == before and leftovers(tmp_path) == []


def test_persisted_dvc_output_without_marker_is_replaced_under_dvc(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A folder output from before the marker existed, kept by DVC's `persist: true`: DVC runs
    the stage that declares it (DVC_STAGE set) and holds the earlier one in its cache."""
    target = user_folder(tmp_path / "model")
    with pytest.raises(OutputError, match="did not write"):
        pipeline_folder(target)
    monkeypatch.setenv("DVC_STAGE", "train@simcse-42")
    pipeline_folder(target)
    assert (target / MARKER).is_file() and (target / "weights").read_text() == "w"


def test_folder_output_replaces_its_own_or_an_empty_folder(tmp_path: Path) -> None:
    (tmp_path / "empty" / "sub").mkdir(parents=True)
    for target in (tmp_path / "empty", pipeline_folder(tmp_path / "model")):
        with atomic_path(target, folder=True) as tmp:
            tmp.mkdir()
            (tmp / "weights").write_text("new")
        assert snapshot(target) == {
            MARKER: f"{MARKER_HEADER}\nweights\n".encode(),
            "weights": b"new",
        }
    assert leftovers(tmp_path) == []


def test_marker_lists_every_file_in_order(tmp_path: Path) -> None:
    marker = (pipeline_folder(tmp_path / "model") / MARKER).read_text()
    assert marker.splitlines() == [MARKER_HEADER, "sub/config.json", "weights"]


def test_user_file_added_while_writing_is_kept(tmp_path: Path) -> None:
    """Checked again before the rename: a file the user put there meanwhile is never removed."""
    target = pipeline_folder(tmp_path / "model")
    late = pytest.raises(OutputError, match=r"files the pipeline did not write \(late\.txt\)")
    with late, atomic_path(target, folder=True) as tmp:
        tmp.mkdir()
        (target / "late.txt").write_text("mine")
    assert (target / "late.txt").read_text() == "mine" and (target / "weights").is_file()
    assert leftovers(tmp_path) == []


def test_folder_written_as_a_file_output_is_a_bug(tmp_path: Path) -> None:
    with pytest.raises(TypeError, match="pass folder=True"), atomic_path(tmp_path / "m") as tmp:
        tmp.mkdir()
    assert not (tmp_path / "m").exists() and leftovers(tmp_path) == []


def test_folder_that_cannot_be_listed_is_not_replaced(tmp_path: Path, monkeypatch) -> None:
    """A subfolder that cannot be listed (another user's; injected, as root reads any) looks
    empty to a walk that skips errors: the folder is refused, not replaced."""
    target = tmp_path / "model"
    (target / "sub").mkdir(parents=True)
    (target / "sub" / "result.json").write_text("{}")
    listing = os.scandir

    def denied(path):
        if Path(path) == target / "sub":
            raise PermissionError(13, "Permission denied", str(path))
        return listing(path)

    monkeypatch.setattr(os, "scandir", denied)
    with pytest.raises(OutputError, match=r"a folder that cannot be listed \(.*Permission denied"):
        pipeline_folder(target)
    monkeypatch.undo()
    assert snapshot(target) == {"sub/result.json": b"{}"}


def test_one_flattener_for_params_and_metrics() -> None:
    """Dotted keys for nested mappings; list items as `[i]` only where asked (metrics files'
    per-layer lists); an empty mapping is a leaf, so no key is lost."""
    params = {"eval": {"transfer": {"kfold": 10, "tasks": ["MR", "CR"]}}, "lr": 3e-5, "empty": {}}
    assert flatten(params) == {
        "eval.transfer.kfold": 10,
        "eval.transfer.tasks": ["MR", "CR"],
        "lr": 3e-5,
        "empty": {},
    }
    assert flatten({"a": [1, {"b": [2.5]}], "c": []}, lists=True) == {"a[0]": 1, "a[1].b[0]": 2.5}
    assert flatten({"a": (1, {"b": (2.5,)})}, lists=True) == {"a[0]": 1, "a[1].b[0]": 2.5}
    assert flatten({"a": (1, 2)}) == {"a": (1, 2)}  # a leaf where lists are not asked for
    assert numbers({"a": [1, True, "x", None], "b": {"c": 2}}, lists=True) == {
        "a[0]": 1.0,
        "b.c": 2.0,
    }
    assert numbers({"a": [1], "b": 2}) == {"b": 2.0}
    assert flatten({}) == {}
