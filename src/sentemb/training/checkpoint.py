"""Checkpoints as safetensors plus JSON; optimiser tensors via `torch.load(weights_only=True)`.

A checkpoint folder holds `model.safetensors` (encoder, head, method buffers), `optimizer.pt`
(tensors and numbers only), `rng.safetensors` (every rank's RNG) and `state.json` (step, curves,
best score). It is written to a temporary folder and renamed, so a killed run leaves the previous
checkpoint intact. A run's checkpoints live in `<folder>/<run key hash>/`, the run key being
everything that defines the run (params, data and model hashes); one process at a time holds
`<folder>` (`exclusive`), and leaves no lock file behind unless it is killed.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import pickle
import random
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import IO, Any

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file

from sentemb.io import CheckpointError, atomic_path

LOCK_FILE = ".lock"


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


def rng_state(generator: torch.Generator) -> dict[str, torch.Tensor]:
    state = {"torch": torch.get_rng_state(), "method": generator.get_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state()
    return state


def set_rng_state(state: dict[str, torch.Tensor], generator: torch.Generator) -> None:
    torch.set_rng_state(state["torch"])
    generator.set_state(state["method"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state(state["cuda"])


def save_checkpoint(
    folder: Path,
    modules: dict[str, torch.nn.Module],
    optimizer: torch.optim.Optimizer,
    rngs: list[dict[str, torch.Tensor]],
    state: dict[str, Any],
) -> None:
    """Write a complete checkpoint atomically; `rngs` holds the RNG state of every rank."""
    with atomic_path(folder, folder=True) as tmp:
        tmp.mkdir()
        tensors = {
            f"{name}.{key}": value.detach().contiguous().cpu()
            for name, module in modules.items()
            for key, value in module.state_dict().items()
        }
        save_file(tensors, tmp / "model.safetensors")
        torch.save(optimizer.state_dict(), tmp / "optimizer.pt")
        flat = {
            f"{rank}.{key}": value for rank, rng in enumerate(rngs) for key, value in rng.items()
        }
        save_file(flat, tmp / "rng.safetensors")
        (tmp / "state.json").write_text(json.dumps(state, indent=1))


def load_checkpoint(
    folder: Path,
    modules: dict[str, torch.nn.Module],
    optimizer: torch.optim.Optimizer,
    rank: int = 0,
) -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
    """Restore modules and optimiser in place; return the JSON state and this rank's RNG state.

    A damaged checkpoint, or an `optimizer.pt` holding anything but tensors and numbers (which
    `weights_only=True` refuses to unpickle), is one `CheckpointError` naming the folder.
    """
    try:
        tensors = load_file(folder / "model.safetensors")
        for name, module in modules.items():
            prefix = f"{name}."
            module.load_state_dict(
                {k[len(prefix) :]: v for k, v in tensors.items() if k.startswith(prefix)}
            )
        optimizer.load_state_dict(torch.load(folder / "optimizer.pt", weights_only=True))
        prefix = f"{rank}."
        rngs = load_file(folder / "rng.safetensors")
        rng = {k[len(prefix) :]: v for k, v in rngs.items() if k.startswith(prefix)}
        return json.loads((folder / "state.json").read_text()), rng
    except (OSError, RuntimeError, ValueError, pickle.UnpicklingError, SafetensorError) as err:
        raise CheckpointError(
            f"{folder}: checkpoint damaged or unsafe to load ({type(err).__name__}: {err}); "
            "delete it to train from the start"
        ) from err


def seed_everything(seed: int) -> None:
    random.seed(seed)
    torch.manual_seed(seed)
