"""Checkpoints as safetensors plus JSON; optimiser tensors via `torch.load(weights_only=True)`.

A checkpoint folder holds `model.safetensors` (encoder, head, method buffers), `optimizer.pt`
(tensors and numbers only), `rng.safetensors` (every rank's RNG) and `state.json` (step, curves,
best score). It is written to a temporary folder and renamed, so a killed run leaves the previous
checkpoint intact.
"""

from __future__ import annotations

import hashlib
import json
import pickle
import random
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file

from sentemb.io import CheckpointError, atomic_path


def params_hash(params: dict[str, Any]) -> str:
    """A stable hash of the params a run depends on: a checkpoint resumes only the same run."""
    return hashlib.sha256(json.dumps(params, sort_keys=True, default=str).encode()).hexdigest()


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
    with atomic_path(folder) as tmp:
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
