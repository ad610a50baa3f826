"""What makes a checkpoint the pipeline's: the run key, the lock, and which folder resumes.

The trainer writes each checkpoint (`checkpoint-<step>/`: the model, optimizer, scheduler,
random states, trainer state); the pipeline's callback adds the loss's state (`LOSS_FILE`) and
then the run's (`STATE_FILE`: step, run key, curves, best score), whose presence says the
checkpoint is complete, so a run killed while writing one resumes from the one before. A run's
checkpoints live in `<folder>/<run key hash>/`, the run key being everything that defines the
run (params, data and model hashes, code); one process at a time holds `<folder>`
(`exclusive`), and leaves no lock file behind unless it is killed.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import logging
import os
import pickle
import shutil
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import IO, Any

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file

from sentemb.io import CheckpointError

log = logging.getLogger(__name__)
LOCK_FILE = ".lock"
STATE_FILE = "sentemb_state.json"  # written last: a checkpoint folder without it is incomplete
LOSS_FILE = "sentemb_loss.pt"  # the loss's state: buffers (IS-CSE's), step, random draws


def params_hash(params: dict[str, Any]) -> str:
    """A stable hash of the params a run depends on: a checkpoint resumes only the same run."""
    return hashlib.sha256(json.dumps(params, sort_keys=True, default=str).encode()).hexdigest()


def lines_hash(lines: Iterable[str]) -> str:
    """The sha256 of `lines` (a corpus as it is trained on), one line each."""
    digest = hashlib.sha256()
    for line in lines:
        digest.update(line.encode())
        digest.update(b"\n")
    return digest.hexdigest()


def files_hash(paths: Iterable[Path]) -> str:
    """The sha256 of the contents of `paths`, in order."""
    digest = hashlib.sha256()
    for path in paths:
        with path.open("rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                digest.update(block)
    return digest.hexdigest()


def source_hash() -> str:
    """The sha256 of the `sentemb` package's code (every .py file, by relative path)."""
    root = Path(__file__).resolve().parents[1]
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*.py")):
        digest.update(f"{path.relative_to(root).as_posix()}\n".encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()


def key_differences(old: Any, new: Any, prefix: str = "") -> list[str]:
    """The dotted names at which two run keys differ (`['data.corpus', 'train.batch_size']`)."""
    if isinstance(old, dict) and isinstance(new, dict):
        return [
            name
            for key in sorted(set(old) | set(new), key=str)
            for name in key_differences(old.get(key), new.get(key), f"{prefix}{key}.")
        ]
    return [] if old == new else [prefix.removesuffix(".")]


@contextlib.contextmanager
def exclusive(folder: Path) -> Iterator[None]:
    """Hold `folder` for one training process: an exclusive `flock` on `<folder>/.lock`.

    A second process is refused with one `CheckpointError` naming the folder. On leaving, by
    success or error, the holder removes the file while it still holds the lock, then the
    folders it made that are left empty. A process that opened the file just before that takes
    its lock on a file no longer at the path: it sees so (`os.path.samestat`) and locks the
    path anew, so two processes never hold two different files. The kernel drops the lock when
    its holder dies, so a killed run never blocks the next (its file stays until a run ends).
    """
    handle, made = _lock(folder)
    try:
        yield
    finally:
        if _holds(handle, folder / LOCK_FILE):  # not if someone else removed or replaced it
            (folder / LOCK_FILE).unlink()
        handle.close()
        for path in made:
            try:
                path.rmdir()
            except OSError:  # holds a checkpoint, or another run's lock: it stays
                break


def _holds(handle: IO[str], path: Path) -> bool:
    """Whether `path` is the file open as `handle`."""
    try:
        return os.path.samestat(os.fstat(handle.fileno()), os.stat(path))
    except FileNotFoundError:
        return False


def _lock(folder: Path) -> tuple[IO[str], list[Path]]:
    """`<folder>/.lock`, made if need be, open and locked by this process alone, and the folders
    this process made for it (deepest first)."""
    path = folder / LOCK_FILE
    while True:
        made = [parent for parent in (folder, *folder.parents) if not parent.exists()]
        folder.mkdir(parents=True, exist_ok=True)
        try:
            handle = path.open("a")
        except FileNotFoundError:  # a holder leaving removed the folder after `mkdir`: again
            continue
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError as err:
            handle.close()
            raise CheckpointError(
                f"{folder}: another training process is using this checkpoint folder; wait for "
                "it to end or give this run another one (--checkpoints)"
            ) from err
        if _holds(handle, path):
            return handle, made
        handle.close()  # its holder removed the file this process locked: lock the path anew


def checkpoints_of(run_dir: Path) -> list[Path]:
    """The trainer's checkpoint folders of a run, oldest first (`checkpoint-<step>`)."""
    found = [f for f in run_dir.glob("checkpoint-*") if f.name.split("-", 1)[1].isdigit()]
    return sorted(found, key=lambda f: int(f.name.split("-", 1)[1]))


def latest_checkpoint(run_dir: Path, tidy: bool = True) -> Path | None:
    """The run's newest complete checkpoint (its `STATE_FILE`, written last, is there). With
    `tidy` (the one process that holds the folder), its files are checked (`verify`) and newer,
    incomplete ones (a run killed while writing) are removed."""
    folders = checkpoints_of(run_dir)
    complete = [f for f in folders if (f / STATE_FILE).is_file()]
    last = complete[-1] if complete else None
    if tidy:
        for folder in folders[folders.index(last) + 1 :] if last is not None else folders:
            shutil.rmtree(folder)
        if last is not None:
            verify(last)
    return last


def verify(folder: Path) -> None:
    """Load every file of a checkpoint as resuming would, safely: weights as safetensors, the
    rest as tensors, numbers and numpy's random state only (`torch.load(weights_only=True)`
    refuses to unpickle anything else, so a tampered file runs no code). A damaged or unsafe
    file is one `CheckpointError` naming the folder."""
    from transformers.trainer_pt_utils import safe_globals  # numpy's random state, as HF does

    try:
        for path in sorted(folder.rglob("*.safetensors")):
            load_file(path)
        with safe_globals():
            for path in sorted(folder.glob("*.pt")) + sorted(folder.glob("*.pth")):
                torch.load(path, map_location="cpu", weights_only=True)
        for path in sorted(folder.rglob("*.json")):  # the trainer's state, the model's config
            json.loads(path.read_text())
    except (OSError, RuntimeError, ValueError, pickle.UnpicklingError, SafetensorError) as err:
        raise CheckpointError(
            f"{folder}: checkpoint damaged or unsafe to load ({type(err).__name__}: {err}); "
            "delete it to train from the start"
        ) from err


def explain_fresh_start(folder: Path, run_dir: Path, run_key: dict[str, Any]) -> None:
    """Say which part of the run key differs from the newest checkpoint of another run in
    `folder`, the one this run would have resumed before (it is left in place)."""
    others = [
        state
        for state in folder.glob(f"*/checkpoint-*/{STATE_FILE}")
        if state.parent.parent != run_dir
    ]
    if not others:
        return
    newest = max(others, key=lambda state: state.stat().st_mtime)
    try:
        old_key = json.loads(newest.read_text()).get("run_key")
    except (OSError, ValueError, AttributeError):
        old_key = None
    differs = (
        ", ".join(key_differences(old_key, run_key))
        if isinstance(old_key, dict)
        else "unknown parts: it records no run key"
    )
    log.warning(
        "starting afresh, not resuming %s: that checkpoint is of another run (it differs in "
        "%s); it is left in place",
        newest.parent,
        differs,
    )
