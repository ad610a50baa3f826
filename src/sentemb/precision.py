"""The precision policy of encoding and training: what `model.precision` and `train.precision`
(`auto`, `fp32`, `bf16`, `fp16`) run as on a device, and the autocast context of it.

`auto` is bf16 where the hardware runs it natively (CUDA with bf16, else fp16; a CPU with bf16
instructions) and fp32 on an x86 CPU that would emulate bf16; an explicit choice is kept. What
each costs on which CPU is measured in benchmarks/README.md (`benchmarks/precision.py`).
"""

from __future__ import annotations

import functools
import platform

import torch


@functools.cache
def native_bf16() -> bool:
    """Whether this CPU runs bf16 matrix products natively: not an x86 CPU, or one with bf16
    instructions (AVX512-BF16, AMX), by torch's own probes (where a torch lacks them, assumed).
    An x86 CPU without them emulates bf16, far slower than fp32."""
    if platform.machine().lower() not in ("x86_64", "amd64"):
        return True  # no other CPU was measured: bf16 as before
    probes = ("_is_avx512_bf16_supported", "_is_amx_tile_supported")
    return any(getattr(torch.cpu, probe, lambda: True)() for probe in probes)


def autocast_dtype(precision: str, device: torch.device) -> torch.dtype | None:
    """The autocast dtype of `precision` on `device`, None for fp32. `auto` is bf16 on CUDA
    (fp16 on a GPU without bf16) and on a CPU with bf16 instructions (`native_bf16`); fp32 on a
    CPU without them."""
    if precision == "auto":
        if device.type == "cuda":
            return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
        return torch.bfloat16 if native_bf16() else None
    return {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}[precision]


def precision_used(precision: str, device: torch.device) -> str:
    """What `precision` runs as on `device`: `fp32`, `bf16` or `fp16` (`auto` resolved)."""
    return {None: "fp32", torch.bfloat16: "bf16", torch.float16: "fp16"}[
        autocast_dtype(precision, device)
    ]


def autocast(precision: str, device: torch.device) -> torch.autocast:
    """The autocast context of `precision` on `device` (disabled for fp32)."""
    dtype = autocast_dtype(precision, device)
    return torch.autocast(device.type, dtype or torch.float32, enabled=dtype is not None)
