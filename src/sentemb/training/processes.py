"""The train stage's processes: how many train, the rank of this one, the device each trains
on, and torchrun starting them for `train.nproc`.

A process that trains alone sees only the GPU `train.device` names (`one_gpu`, before torch
starts CUDA); under torchrun every process sees every GPU and takes its own (`pick_device`).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from typing import Any, NoReturn

import torch

from sentemb.config import ConfigError


def process_rank() -> int:
    """This process's rank under torchrun (0 alone)."""
    return int(os.environ.get("RANK", "0"))


def process_count() -> int:
    """The processes of the run under torchrun (1 alone)."""
    return int(os.environ.get("WORLD_SIZE", "1"))


ONE_GPU = "SENTEMB_ONE_GPU"  # set by `one_gpu` to the `train.device` whose GPU it left visible


def pick_device(name: str, rank: int) -> torch.device:
    """The device `train.device` names for process `rank`; one this machine lacks is an error.
    A `cuda:N` that `one_gpu` left as the one visible GPU is that GPU, `cuda:0`."""
    if name == "cpu" or (name == "auto" and not torch.cuda.is_available()):
        return torch.device("cpu")
    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if count == 0:
        shown = f" (CUDA_VISIBLE_DEVICES={visible})" if visible is not None else ""
        raise ConfigError(
            f"train.device: {name!r}, but torch {torch.__version__} sees no CUDA device on this "
            f"machine{shown}; use auto or cpu"
        )
    device = torch.device(name if name != "auto" else "cuda")
    if device.index is None:
        return torch.device("cuda", rank % count)
    if os.environ.get(ONE_GPU) == name:
        return torch.device("cuda", 0)
    if device.index >= count:
        raise ConfigError(
            f"train.device: {name!r}, but this machine has {count} CUDA device(s), "
            f"cuda:0 to cuda:{count - 1}"
        )
    return device


def one_gpu(params: dict[str, Any]) -> None:
    """Show a process that trains alone only the GPU `train.device` names (`cuda:N`; `auto` and
    `cuda`: the first), before torch starts CUDA: the trainer trains on the first GPU it sees
    and, seeing several, would split each batch across them (DataParallel). `pick_device`
    then reads that `cuda:N` as the one GPU left (`ONE_GPU`). Under torchrun every process
    sees every GPU and takes its own."""
    name = str((params.get("train") or {}).get("device", "auto"))
    if name == "cpu" or "WORLD_SIZE" in os.environ:
        return
    index = int(name[5:]) if name.startswith("cuda:") and name[5:].isdigit() else 0
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    ids = [v for v in visible.split(",") if v] if visible is not None else None
    if ids is not None and index >= len(ids):
        return  # pick_device names the devices there are
    os.environ["CUDA_VISIBLE_DEVICES"] = ids[index] if ids is not None else str(index)
    os.environ[ONE_GPU] = name


def torchrun_command(nproc: int, argv: Sequence[str]) -> list[str]:
    """`argv` (a script and its arguments) run by `nproc` processes under torchrun, on a free
    port of this machine (`--standalone`)."""
    launcher = [sys.executable, "-m", "torch.distributed.run", "--standalone"]
    return [*launcher, f"--nproc-per-node={nproc}", *argv]


def torchrun(nproc: int) -> NoReturn:
    """Replace this process by `torchrun_command` running the same command (signals and the
    exit status are then torchrun's): `train.nproc` launches the processes itself, so DVC
    records the stage as usual."""
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(sys.executable, torchrun_command(nproc, sys.argv))
