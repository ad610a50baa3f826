"""Every method on a CUDA device: training steps per second, peak GPU memory, a short training.

    python benchmarks/gpu.py                                  # all five methods, bf16 autocast
    python benchmarks/gpu.py --methods simcse paser --steps 20 --train-steps 0

For each of `--methods`, the pipeline's trainer (`pipeline_trainer` of train_step.py) on
`model.name_or_path` of `--params` (all-MiniLM-L6-v2 by default), with the batch size and max
length of `train` and `--precision` autocast (bf16 by default), on `--corpus`:

* steps: two warm-up steps, then `--steps` timed steps, each ended by `torch.cuda.synchronize()`
  so that it times the GPU's work; peak memory is `torch.cuda.max_memory_allocated` over them
  (weights, AdamW state, activations);
* training: a fresh trainer's `Trainer.train` (the loop of stage `train`) for `--train-steps`
  steps, scored on STS-B dev of `--data` at the middle and at the end, with a checkpoint at the
  middle: every step's loss must be finite, else the script exits with 1. Seconds per step leave
  out the two dev evaluations, not the first steps' CUDA start-up. The dtype of the training
  head's output under the trainer's autocast shows that the AMP path ran.

Without a CUDA device it records {"skipped": "no CUDA device"}, unless `--out` already holds a
GPU measurement, which it keeps. Writes `benchmarks/gpu.json`.
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import statistics
import sys
import tempfile
import time
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import torch
from collect import machine
from train_step import CORPUS, ROOT, WARMUP, pipeline_trainer, timed

from sentemb.config import load_params, section
from sentemb.data.readers import read_corpus
from sentemb.encoder import Encoder, autocast, autocast_dtype
from sentemb.model_config import ModelConfig
from sentemb.registry import METHODS
from sentemb.training.config import TrainConfig
from sentemb.training.run import dev_scorer

MIRROR = (ROOT / "../shared/datasets").resolve()


def fresh_peak() -> float:
    """Free what earlier trainers left and restart the peak count; MiB still allocated."""
    gc.collect()
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    return torch.cuda.memory_allocated() / 2**20


def timed_steps(
    params: dict, method: str, config: TrainConfig, corpus: Path, steps: int
) -> dict[str, Any]:
    """Seconds per synchronised training step and peak allocated GPU memory of `method`."""
    config = replace(config, max_steps=10**6, checkpoint_steps=10**9)
    sentences = list(read_corpus(corpus, limit=config.batch_size * (steps + WARMUP)))
    before = fresh_peak()
    with tempfile.TemporaryDirectory() as checkpoints:
        trainer = pipeline_trainer(params, method, config, sentences, Path(checkpoints))

        def step(i: int) -> None:
            trainer.step(i)
            torch.cuda.synchronize()

        seconds = timed(step, steps)
    return {
        "steps": steps,
        "median_seconds_per_step": statistics.median(seconds),
        "steps_per_second": steps / sum(seconds),
        "peak_memory_mib": torch.cuda.max_memory_allocated() / 2**20,
        "memory_before_mib": before,
        "seconds": seconds,
    }


def short_training(
    params: dict, method: str, config: TrainConfig, corpus: Path, data: Path, steps: int
) -> dict[str, Any]:
    """`Trainer.train` for `steps` steps with dev scoring: losses, dev scores, time, memory."""
    half = max(1, steps // 2)
    config = replace(config, max_steps=steps, eval_steps=half, checkpoint_steps=half, log_steps=1)
    sentences = list(read_corpus(corpus))
    dev = dev_scorer(data, section(params, "model", ModelConfig).batch_size, config.selection)
    dev_seconds: list[float] = []

    def dev_score(encoder: Encoder) -> float:
        started = time.perf_counter()
        score = dev(encoder)["STSBenchmark/dev"]
        dev_seconds.append(time.perf_counter() - started)
        return score

    before = fresh_peak()
    with tempfile.TemporaryDirectory() as folder:
        trainer = pipeline_trainer(params, method, config, sentences, Path(folder) / "ck")
        trainer.evaluate = dev_score
        torch.cuda.synchronize()
        started = time.perf_counter()
        result = trainer.train(Path(folder) / "model")
        torch.cuda.synchronize()
        seconds = time.perf_counter() - started
        with torch.no_grad(), autocast(config.precision, trainer.device):
            batch = trainer.tokenize(sentences[:2])
            pooled = trainer.encoder(batch["input_ids"], batch["attention_mask"]).pooled
            head_dtype = trainer.head(pooled).dtype
    losses = [point["loss"] for point in result.loss_curve]
    return {
        "steps": result.steps,
        "sentences": len(sentences),
        "device": str(next(trainer.encoder.parameters()).device),
        "autocast": str(autocast_dtype(config.precision, trainer.device)),
        "head_dtype_under_autocast": str(head_dtype),
        "grad_scaler": trainer.scaler.is_enabled(),
        "losses_finite": all(math.isfinite(loss) for loss in losses),
        "first_loss": losses[0],
        "final_loss": losses[-1],
        "dev_curve": result.dev_curve,
        "best_dev": result.best_score,
        "train_seconds": seconds,
        "dev_seconds": sum(dev_seconds),
        "seconds_per_step": (seconds - sum(dev_seconds)) / result.steps,
        "peak_memory_mib": torch.cuda.max_memory_allocated() / 2**20,
        "memory_before_mib": before,
        "loss_curve": losses,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--methods", nargs="+", default=list(METHODS))
    parser.add_argument("--precision", default="bf16", choices=["fp32", "bf16", "fp16"])
    parser.add_argument("--steps", type=int, default=50, help="timed steps per method")
    parser.add_argument("--train-steps", type=int, default=50, help="0 = no short training")
    parser.add_argument("--params", default=str(ROOT / "params.yaml"))
    parser.add_argument("--corpus", type=Path, default=CORPUS)
    parser.add_argument("--data", type=Path, default=MIRROR, help="holds senteval/ (STS-B dev)")
    parser.add_argument("--out", type=Path, default=Path(__file__).with_name("gpu.json"))
    args = parser.parse_args()
    if not torch.cuda.is_available():
        kept = json.loads(args.out.read_text()) if args.out.is_file() else {}
        if "device" in kept:  # a CPU run never erases a GPU measurement
            print(f"skipped: no CUDA device; {args.out} keeps {kept['device']}, {kept['date']}")
            return
        args.out.write_text(json.dumps({"skipped": "no CUDA device"}, indent=2) + "\n")
        print("skipped: no CUDA device")
        return
    params = load_params(args.params)
    config = replace(section(params, "train", TrainConfig), precision=args.precision, device="cuda")
    results: dict[str, dict[str, Any]] = {}
    for method in args.methods:
        results[method] = {"steps": timed_steps(params, method, config, args.corpus, args.steps)}
        if args.train_steps:
            results[method]["training"] = short_training(
                params, method, config, args.corpus, args.data, args.train_steps
            )
        print(method, json.dumps({k: _summary(v) for k, v in results[method].items()}))
    for row in results.values():
        if "simcse" in results:
            row["steps"]["vs_simcse"] = (
                row["steps"]["median_seconds_per_step"]
                / results["simcse"]["steps"]["median_seconds_per_step"]
            )
    report = {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": machine(),
        "device": torch.cuda.get_device_name(),
        "cuda": torch.version.cuda,
        "model": section(params, "model", ModelConfig).name_or_path,
        "precision": args.precision,
        "batch_size": config.batch_size,
        "max_length": config.max_length,
        "results": results,
    }
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    if not all(row["training"]["losses_finite"] for row in results.values() if "training" in row):
        sys.exit("error: a non-finite training loss (see the loss_curve in " + str(args.out) + ")")


def _summary(part: dict[str, Any]) -> dict[str, Any]:
    """`part` without its per-step lists, for the console."""
    return {k: v for k, v in part.items() if k not in ("seconds", "loss_curve")}


if __name__ == "__main__":
    main()
