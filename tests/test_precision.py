"""The precision policy: `auto` is bf16 only where the CPU runs it natively."""

from __future__ import annotations

import pytest
import torch

from sentemb import precision
from sentemb.precision import autocast_dtype


@pytest.mark.parametrize(
    ("machine", "probes", "native"),
    [
        ("x86_64", {"_is_avx512_bf16_supported": True, "_is_amx_tile_supported": False}, True),
        ("x86_64", {"_is_avx512_bf16_supported": False, "_is_amx_tile_supported": True}, True),
        ("AMD64", {"_is_avx512_bf16_supported": False, "_is_amx_tile_supported": False}, False),
        ("x86_64", {}, True),  # a torch without the probes: assumed, as before
        ("aarch64", {"_is_avx512_bf16_supported": False, "_is_amx_tile_supported": False}, True),
    ],
)
def test_native_bf16_reads_the_cpu(
    monkeypatch: pytest.MonkeyPatch, machine: str, probes: dict[str, bool], native: bool
) -> None:
    """x86 without AVX512-BF16 or AMX emulates bf16 (far slower than fp32:
    benchmarks/README.md); no other CPU was measured, so it keeps bf16."""
    monkeypatch.setattr(precision.platform, "machine", lambda: machine)
    for probe in ("_is_avx512_bf16_supported", "_is_amx_tile_supported"):
        if probe in probes:
            monkeypatch.setattr(torch.cpu, probe, lambda value=probes[probe]: value, raising=False)
        else:
            monkeypatch.delattr(torch.cpu, probe, raising=False)
    assert precision.native_bf16.__wrapped__() is native


@pytest.mark.parametrize(
    ("asked", "native", "expected"),
    [
        ("auto", True, torch.bfloat16),
        ("auto", False, None),  # emulated bf16 would be slower than fp32
        ("bf16", False, torch.bfloat16),  # asked for: kept
        ("fp16", True, torch.float16),
        ("fp32", True, None),
    ],
)
def test_auto_precision_on_cpu_is_bf16_only_where_native(
    monkeypatch: pytest.MonkeyPatch, asked: str, native: bool, expected: torch.dtype | None
) -> None:
    monkeypatch.setattr(precision, "native_bf16", lambda: native)
    assert autocast_dtype(asked, torch.device("cpu")) == expected
