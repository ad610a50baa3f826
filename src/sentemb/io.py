"""Writing outputs so that a reader never sees a half-written file: temp file, then rename;
and the errors of our own files that cannot be written or read back."""

from __future__ import annotations

import contextlib
import errno
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from sentemb.config import UserError


class CheckpointError(UserError, ValueError):
    """A checkpoint cannot be resumed: damaged files or a payload that is not plain tensors."""


class OutputError(OSError):
    """An output could not be written (disk full, read-only folder); nothing was left behind."""


DISK_FULL = (errno.ENOSPC, errno.EDQUOT)
PARTIAL = ".partial-"


def _disk_full(folder: Path) -> bool:
    return shutil.disk_usage(folder).free < 1 << 20


def _kept(path: Path) -> str:
    return "; the earlier one is untouched" if path.exists() else ""


@contextlib.contextmanager
def atomic_path(path: str | Path) -> Iterator[Path]:
    """Yield a temporary path beside `path`; on success it replaces `path` in one rename.

    Works for a file or a folder. On error the temporary path is removed and `path` is untouched;
    a full disk or a folder that cannot be written is one `OutputError` naming `path`. A
    temporary left by a killed writer (`.partial-<name>.*`) is removed by the next write.
    """
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        for stale in path.parent.glob(f"{PARTIAL}{path.name}.*"):
            shutil.rmtree(stale, ignore_errors=True)
        tmp = Path(tempfile.mkdtemp(prefix=f"{PARTIAL}{path.name}.", dir=path.parent)) / "tmp"
    except OSError as err:
        raise OutputError(f"{path}: not written: {err}{_kept(path)}") from err
    try:
        yield tmp
        if path.is_dir() and not path.is_symlink():
            old = tmp.parent / "old"
            path.rename(old)
            tmp.rename(path)
        else:
            os.replace(tmp, path)
    except Exception as err:
        disk_full = getattr(err, "errno", None) in DISK_FULL or _disk_full(path.parent)
        if not disk_full:
            raise
        raise OutputError(f"{path}: not written, the disk is full ({err}){_kept(path)}") from err
    finally:
        shutil.rmtree(tmp.parent, ignore_errors=True)


def write_json(path: str | Path, data: Any) -> None:
    """Write `data` as indented JSON, atomically."""
    with atomic_path(path) as tmp:
        tmp.write_text(json.dumps(data, indent=2, sort_keys=False) + "\n", encoding="utf-8")
