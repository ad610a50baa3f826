"""Writing outputs so that a reader never sees a half-written file: temp file, then rename;
and the errors of our own files that cannot be written or read back.

An output replaces only what the pipeline wrote: a file output never replaces a folder, and a
folder output replaces an existing folder only when it is empty or holds nothing but the files
listed in its `.sentemb-output` (the list `atomic_path` writes into every folder output).
Concurrent writers of one output coordinate through `flock` on folders, which locks on local
Linux filesystems; on a network filesystem (NFS) it may not, so run one writer per output there.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import shutil
import tempfile
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

from sentemb.config import UserError


class CheckpointError(UserError, ValueError):
    """A checkpoint cannot be resumed: damaged files or a payload that is not plain tensors."""


class OutputError(OSError):
    """An output could not be written (disk full, read-only folder, or it would replace something
    the pipeline did not write); nothing was left behind."""


DISK_FULL = (errno.ENOSPC, errno.EDQUOT)
PARTIAL = ".partial-"
PARTIAL_MARKER = ".sentemb-partial"  # in each temporary made here; others are removed only empty
MARKER = ".sentemb-output"
UNTOUCHED = "; it is untouched: move it away or choose another output path"
MARKER_HEADER = "# written by sentemb; a later run may replace this folder while it holds only:"


def _disk_full(folder: Path) -> bool:
    return shutil.disk_usage(folder).free < 1 << 20


def _kept(path: Path) -> str:
    return "; the earlier one is untouched" if path.exists() else ""


def _raise(err: OSError) -> None:
    raise err


def _contents(folder: Path) -> set[str]:
    """Every file and link under `folder` (links to folders not followed), as relative paths;
    a folder that cannot be listed raises `OSError`."""
    found = set()
    for root, dirs, files in os.walk(folder, onerror=_raise):
        links = [d for d in dirs if os.path.islink(os.path.join(root, d))]
        found.update(Path(root, name).relative_to(folder).as_posix() for name in files + links)
    return found


def _refuse_file_above(path: Path, folders: Iterable[Path]) -> None:
    """Raise `OutputError` naming `path` when the first of `folders` (a folder, then those above
    it) that exists is no folder: writing `path` would fail half-way with `Not a directory`."""
    for folder in folders:
        if folder.is_dir():
            return
        if folder.exists() or folder.is_symlink():
            raise OutputError(f"{path}: not written: {folder} is a file, not a folder{UNTOUCHED}")


def check_folder(path: str | Path) -> None:
    """Raise `OutputError` naming `path`, a folder whose files are written one by one (plots,
    checkpoints), when it or a folder above it is an existing file."""
    path = Path(path)
    _refuse_file_above(path, (path, *path.parents))


def check_output(path: str | Path, *, folder: bool = False) -> None:
    """Raise `OutputError` naming `path` when writing it would remove something the pipeline
    did not write: a folder where a file goes, a file or link where a folder goes, a folder
    holding files its `.sentemb-output` does not list, or a file where a folder above it goes."""
    path = Path(path)
    _refuse_file_above(path, path.parents)
    refused = f"{path}: not written: it would replace "
    if not folder:
        if path.is_dir():
            raise OutputError(f"{refused}a folder, and this output is a file{UNTOUCHED}")
        return
    if path.is_symlink() or (path.exists() and not path.is_dir()):
        raise OutputError(f"{refused}a file or link, and this output is a folder{UNTOUCHED}")
    try:
        present = _contents(path) if path.is_dir() else set()
    except OSError as err:
        raise OutputError(f"{refused}a folder that cannot be listed ({err}){UNTOUCHED}") from err
    if not present:
        return
    marker = path / MARKER
    if not marker.is_file():
        if os.environ.get("DVC_STAGE"):
            return  # a persisted output of the stage DVC runs: DVC's cache holds the earlier one
        raise OutputError(f"{refused}a folder the pipeline did not write (no {MARKER}){UNTOUCHED}")
    extra = sorted(present - {MARKER} - set(marker.read_text(encoding="utf-8").splitlines()))
    if extra:
        more = f" and {len(extra) - 3} more" if len(extra) > 3 else ""
        files = ", ".join(extra[:3]) + more
        raise OutputError(f"{refused}files the pipeline did not write ({files}){UNTOUCHED}")


def _seal(tmp: Path, folder: bool) -> None:
    """A folder output gets its `.sentemb-output` list; a file output must be a file."""
    if not folder:
        if tmp.is_dir():
            raise TypeError("atomic_path: a folder was written; pass folder=True")
        return
    tmp.mkdir(exist_ok=True)
    listed = sorted(_contents(tmp) - {MARKER})
    (tmp / MARKER).write_text("\n".join([MARKER_HEADER, *listed]) + "\n", encoding="utf-8")


_held: set[tuple[int, int]] = set()  # (device, inode) of the temporaries this process locks


def _identity(folder: Path | int) -> tuple[int, int]:
    found = os.fstat(folder) if isinstance(folder, int) else os.stat(folder)
    return found.st_dev, found.st_ino


def _new_temporary(path: Path) -> tuple[Path, int]:
    """A new `.partial-<name>.*` folder beside `path`, marked as this module's, and the
    descriptor by which this process holds its lock until it closes. A writer cleaning up may
    take a fresh folder before it is locked and remove it; then another is made."""
    while True:
        folder = Path(tempfile.mkdtemp(prefix=f"{PARTIAL}{path.name}.", dir=path.parent))
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
        fcntl.flock(fd, fcntl.LOCK_EX)
        try:
            if os.path.samestat(os.fstat(fd), os.stat(folder)):
                (folder / PARTIAL_MARKER).touch()
                return folder, fd
        except FileNotFoundError:  # removed by a writer cleaning up before this one locked it
            pass
        except OSError:
            os.close(fd)
            shutil.rmtree(folder, ignore_errors=True)
            raise
        os.close(fd)


def _remove_if_dead(stale: Path) -> None:
    """Remove a `.partial-` temporary of this module's unless a live writer holds its lock. A
    folder without the mark is removed only when empty (made by a writer killed before marking
    it); a user's own `.partial-` folder with anything in it is kept."""
    try:
        fd = os.open(stale, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return  # gone already, or not a folder
    try:
        with contextlib.suppress(BlockingIOError):  # a live writer's: left to it
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            if (stale / PARTIAL_MARKER).is_file():
                shutil.rmtree(stale, ignore_errors=True)
            else:
                with contextlib.suppress(OSError):  # not empty: not ours
                    stale.rmdir()
    finally:
        os.close(fd)


@contextlib.contextmanager
def _locked(folder: Path) -> Iterator[None]:
    """Hold an exclusive `flock` on `folder` itself (no lock file is added to it)."""
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


@contextlib.contextmanager
def atomic_path(path: str | Path, *, folder: bool = False) -> Iterator[Path]:
    """Yield a temporary path beside `path`; on success it replaces `path` in one rename.

    `folder=True` for a folder output (the body creates it or fills it; `.sentemb-output` is added),
    otherwise the body writes one file. What `check_output` refuses is refused before the body
    runs and again before the rename. On error the temporary path is removed and `path` is
    untouched; a full disk or a folder that cannot be written is one `OutputError` naming `path`.
    A temporary left by a killed writer (`.partial-<name>.*`) is removed by the next write; one
    that a live writer holds (an exclusive `flock`, which the kernel drops when its holder dies)
    is left to it. Of two processes writing `path` at once, the one that renames last wins.
    """
    path = Path(path)
    check_output(path, folder=folder)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        for stale in path.parent.glob(f"{PARTIAL}{path.name}.*"):
            _remove_if_dead(stale)
        partial, fd = _new_temporary(path)
    except OSError as err:
        raise OutputError(f"{path}: not written: {err}{_kept(path)}") from err
    tmp = partial / "tmp"
    _held.add(_identity(fd))
    try:
        try:
            yield tmp
            _seal(tmp, folder)
        except Exception as err:
            disk_full = getattr(err, "errno", None) in DISK_FULL or _disk_full(path.parent)
            if not disk_full:
                raise
            raise OutputError(
                f"{path}: not written, the disk is full ({err}){_kept(path)}"
            ) from err
        # one rename at a time: the last writer's output stays. A write into a temporary this
        # process holds (write_json(tmp) inside atomic_path) takes no second lock: it would wait
        # for itself.
        mine = _identity(path.parent) in _held
        with contextlib.nullcontext() if mine else _locked(path.parent):
            check_output(path, folder=folder)
            if path.is_dir():
                path.rename(partial / "old")
            os.replace(tmp, path)
    finally:
        _held.discard(_identity(fd))
        shutil.rmtree(partial, ignore_errors=True)
        os.close(fd)


def read_json(path: Path) -> Any:
    """A JSON file of the pipeline's; one `UserError` naming it when it is not JSON."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except ValueError as err:  # JSONDecodeError and UnicodeDecodeError
        raise UserError(
            f"{path}: not valid JSON ({err}); it was damaged: restore it, or delete it and run "
            "the stage that writes it"
        ) from err


def write_json(path: str | Path, data: Any) -> None:
    """Write `data` as indented JSON, atomically (a file output)."""
    with atomic_path(path) as tmp:
        tmp.write_text(json.dumps(data, indent=2, sort_keys=False) + "\n", encoding="utf-8")


def flatten(value: Mapping[str, Any], lists: bool = False, key: str = "") -> dict[str, Any]:
    """Nested mappings as one mapping of dotted keys (``{"a": {"b": 1}}`` -> ``{"a.b": 1}``),
    and, where `lists`, nested lists and tuples too (``{"a": [1]}`` -> ``{"a[0]": 1}``); other
    values, and an empty mapping, are leaves."""
    flat: dict[str, Any] = {}
    if isinstance(value, list | tuple):
        items = [(f"{key}[{i}]", item) for i, item in enumerate(value)]
    else:
        items = [(f"{key}.{name}" if key else str(name), item) for name, item in value.items()]
    for where, item in items:
        if (isinstance(item, Mapping) and item) or (lists and isinstance(item, list | tuple)):
            flat.update(flatten(item, lists, where))
        else:
            flat[where] = item
    return flat


def numbers(value: Mapping[str, Any], lists: bool = False) -> dict[str, float]:
    """The numbers among `flatten(value, lists)`, as floats (booleans are not numbers)."""
    return {
        key: float(item)
        for key, item in flatten(value, lists).items()
        if isinstance(item, int | float) and not isinstance(item, bool)
    }
