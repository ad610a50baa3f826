"""Training steps per second and peak GPU memory of one method on a CUDA device.

    python benchmarks/gpu.py                          # simcse, bf16 autocast, 50 timed steps
    python benchmarks/gpu.py --method paser --steps 20

The pipeline's trainer (`pipeline_trainer` of train_step.py) for `--method` on
`model.name_or_path` of params.yaml (all-MiniLM-L6-v2 by default), with the batch size and max
length of `train` and `--precision` autocast (bf16 by default). Two warm-up steps, then `--steps`
timed steps, each ended by `torch.cuda.synchronize()` so that it times the GPU's work. Peak memory
is `torch.cuda.max_memory_allocated` over those steps (weights, AdamW state, activations). Without
a CUDA device it records {"skipped": "no CUDA device"}. Writes `benchmarks/gpu.json`.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import torch
from collect import machine
from train_step import CORPUS, ROOT, WARMUP, pipeline_trainer, timed

from sentemb.config import load_params, section
from sentemb.data.readers import read_corpus
from sentemb.encoder import ModelConfig
from sentemb.training.config import TrainConfig


def measure(params: dict, method: str, precision: str, steps: int) -> dict[str, Any]:
    """Seconds per synchronised training step and peak allocated GPU memory of `method`."""
    config = replace(
        section(params, "train", TrainConfig),
        precision=precision,
        device="cuda",
        max_steps=10**6,
        checkpoint_steps=10**9,
    )
    sentences = list(read_corpus(CORPUS, limit=config.batch_size * (steps + WARMUP)))
    with tempfile.TemporaryDirectory() as checkpoints:
        trainer = pipeline_trainer(params, method, config, sentences, Path(checkpoints))
        torch.cuda.reset_peak_memory_stats()

        def step(i: int) -> None:
            trainer.step(i)
            torch.cuda.synchronize()

        seconds = timed(step, steps)
    return {
        "device": torch.cuda.get_device_name(),
        "cuda": torch.version.cuda,
        "model": section(params, "model", ModelConfig).name_or_path,
        "method": method,
        "precision": precision,
        "batch_size": config.batch_size,
        "max_length": config.max_length,
        "steps": steps,
        "median_seconds_per_step": statistics.median(seconds),
        "steps_per_second": steps / sum(seconds),
        "peak_memory_mib": torch.cuda.max_memory_allocated() / 2**20,
        "seconds": seconds,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--method", default="simcse")
    parser.add_argument("--precision", default="bf16", choices=["fp32", "bf16", "fp16"])
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--params", default=str(ROOT / "params.yaml"))
    parser.add_argument("--out", type=Path, default=Path(__file__).with_name("gpu.json"))
    args = parser.parse_args()
    if torch.cuda.is_available():
        report = {
            "date": datetime.now(UTC).isoformat(timespec="seconds"),
            "machine": machine(),
            **measure(load_params(args.params), args.method, args.precision, args.steps),
        }
    else:
        report = {"skipped": "no CUDA device"}
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps({k: v for k, v in report.items() if k != "seconds"}, indent=1))


if __name__ == "__main__":
    main()
