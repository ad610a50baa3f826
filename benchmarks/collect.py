"""Merge the JSON of each benchmark script into one results file (`benchmarks/run.sh` calls it).

    python benchmarks/collect.py --out benchmarks/results.json --mode full \\
        --part scale benchmarks/scale.json 212 "python benchmarks/scale.py"

Each `--part NAME JSON SECONDS COMMAND` becomes `parts[NAME]`: the command that produced it, its
wall-clock seconds and the script's own JSON. The file also records the date and the machine.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
from datetime import UTC, datetime
from pathlib import Path
from typing import Any


def cpu_name() -> str:
    """The CPU's model name (from /proc/cpuinfo on Linux)."""
    cpuinfo = Path("/proc/cpuinfo")
    for line in cpuinfo.read_text().splitlines() if cpuinfo.is_file() else []:
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def machine() -> dict[str, Any]:
    """CPU model name, the vector instructions torch uses (AVX2, AVX512), whether the CPU has
    bf16 ones (AVX512-BF16, AMX: bf16 autocast is emulated without), cores and torch version."""
    import torch

    from sentemb.precision import native_bf16

    return {
        "cpu": cpu_name(),
        "isa": torch.backends.cpu.get_cpu_capability(),
        "bf16": native_bf16(),
        "cores": os.cpu_count(),
        "torch": torch.__version__,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--mode", required=True)
    parser.add_argument(
        "--part",
        nargs=4,
        action="append",
        required=True,
        metavar=("NAME", "JSON", "SECONDS", "COMMAND"),
    )
    args = parser.parse_args()
    parts = {
        name: {
            "command": command,
            "seconds": float(seconds),
            "result": json.loads(Path(path).read_text()),
        }
        for name, path, seconds, command in args.part
    }
    report = {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": machine(),
        "mode": args.mode,
        "total_seconds": sum(part["seconds"] for part in parts.values()),
        "parts": parts,
    }
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"{args.out}: {len(parts)} parts in {report['total_seconds']:.0f} s")


if __name__ == "__main__":
    main()
