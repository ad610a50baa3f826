"""Every method on a CUDA device: training steps per second, peak GPU memory, a short training.

    python benchmarks/gpu.py                                  # all five methods, bf16 autocast
    python benchmarks/gpu.py --methods simcse paser --steps 20 --train-steps 0
    python benchmarks/gpu.py --shape bert-base --corpus-size 1000000 --steps 300 \
        --methods simcse sscl iscse dclr paser iscse+dclr --out benchmarks/gpu_bert_base.json

For each of `--methods`, the pipeline's trainer (`pipeline_trainer` of train_step.py) on
`model.name_or_path` of `--params` (all-MiniLM-L6-v2 by default), with the batch size and max
length of `train` and `--precision` autocast (bf16 by default), on `--corpus`. `--shape bert-base`
trains the papers' backbone shape instead: a BERT built from transformers' `BertConfig` defaults
(bert-base-uncased's 12 layers, hidden size 768, 12 heads, 110M parameters) with random weights
and the tokenizer of `model.name_or_path` (all-MiniLM-L6-v2's is bert-base-uncased's WordPiece
vocabulary). `--corpus-size N` cycles the corpus to N sentences (SimCSE's wiki1m has 1,000,000),
so that an epoch has the papers' number of steps. Measured:

* steps: two warm-up steps, then `--steps` timed steps, each ended by `torch.cuda.synchronize()`
  so that it times the GPU's work; peak memory is `torch.cuda.max_memory_allocated` over them
  (weights, AdamW state, activations);
* training: a fresh trainer's `Trainer.train` (the loop of stage `train`) for `--train-steps`
  steps, scored on STS-B dev of `--data` at the middle and at the end, with a checkpoint at the
  middle: every step's loss must be finite, else the script exits with 1. The dtype of the
  training head's output under the trainer's autocast shows that the AMP path ran. The loop's
  other work is timed apiece: a dev scoring, a checkpoint (`last`: weights, AdamW state, random
  states), a save of the best model; seconds per step leave them out, not the first steps' CUDA
  start-up;
* one epoch, estimated: the trainer's steps per epoch (`--corpus-size` / batch) times the median
  timed step, plus, where the short training ran, the dev scorings (every `train.eval_steps`),
  checkpoints (every `train.checkpoint_steps`) and best-model saves the loop makes in it, the
  saves counted as if every scoring found a new best (an upper bound).

Without a CUDA device it records {"skipped": "no CUDA device"}, unless `--out` already holds a
GPU measurement, which it keeps. Writes `benchmarks/gpu.json`.
"""

from __future__ import annotations

import argparse
import gc
import itertools
import json
import math
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import torch
from collect import machine
from train_step import CORPUS, ROOT, pipeline_trainer, timed

from sentemb.config import load_params, section
from sentemb.data.readers import read_corpus
from sentemb.encoder import autocast, autocast_dtype
from sentemb.model_config import ModelConfig
from sentemb.model_files import resolve_model
from sentemb.registry import METHODS
from sentemb.training.config import TrainConfig
from sentemb.training.run import dev_scorer

MIRROR = (ROOT / "../shared/datasets").resolve()
SHAPES = ("model", "bert-base")  # the params' model with its weights | BERT-base, random weights


def random_bert_base(tokenizer_from: str, folder: Path) -> str:
    """A BERT-base-shaped model (`BertConfig`'s defaults, the vocabulary of the tokenizer of
    `tokenizer_from`) with random weights (seed 0), saved with that tokenizer to `folder`."""
    from transformers import AutoTokenizer, BertConfig, BertModel

    tokenizer = AutoTokenizer.from_pretrained(resolve_model(tokenizer_from))
    torch.manual_seed(0)
    BertModel(BertConfig(vocab_size=len(tokenizer))).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return str(folder)


def cycled(path: Path, size: int | None) -> list[str]:
    """The sentences of the corpus at `path`, repeated in order up to `size` (None: as they are)."""
    sentences = list(read_corpus(path))
    return sentences if size is None else list(itertools.islice(itertools.cycle(sentences), size))


def timing(function: Callable[..., Any], seconds: list[float]) -> Callable[..., Any]:
    """`function`, appending the seconds of each call to `seconds`."""

    def timed_call(*args: Any, **kwargs: Any) -> Any:
        started = time.perf_counter()
        try:
            return function(*args, **kwargs)
        finally:
            torch.cuda.synchronize()
            seconds.append(time.perf_counter() - started)

    return timed_call


def fresh_peak() -> float:
    """Free what earlier trainers left and restart the peak count; MiB still allocated."""
    gc.collect()
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    return torch.cuda.memory_allocated() / 2**20


def timed_steps(
    params: dict, method: str, config: TrainConfig, sentences: list[str], steps: int
) -> dict[str, Any]:
    """Seconds per synchronised training step and peak allocated GPU memory of `method`, and the
    steps of one epoch of `sentences`."""
    config = replace(config, max_steps=10**6, checkpoint_steps=10**9)
    before = fresh_peak()
    with tempfile.TemporaryDirectory() as checkpoints:
        trainer = pipeline_trainer(params, method, config, sentences, Path(checkpoints))

        def step(i: int) -> None:
            trainer.step(i)
            torch.cuda.synchronize()

        seconds = timed(step, steps)
    return {
        "steps": steps,
        "steps_per_epoch": trainer.steps_per_epoch,
        "median_seconds_per_step": statistics.median(seconds),
        "steps_per_second": steps / sum(seconds),
        "peak_memory_mib": torch.cuda.max_memory_allocated() / 2**20,
        "memory_before_mib": before,
        "seconds": seconds,
    }


def short_training(
    params: dict, method: str, config: TrainConfig, sentences: list[str], data: Path, steps: int
) -> dict[str, Any]:
    """`Trainer.train` for `steps` steps with dev scoring: losses, dev scores, time, memory, and
    the seconds of each dev scoring, checkpoint and best-model save."""
    half = max(1, steps // 2)
    config = replace(config, max_steps=steps, eval_steps=half, checkpoint_steps=half, log_steps=1)
    dev = dev_scorer(data, section(params, "model", ModelConfig).batch_size, config.selection)
    dev_seconds: list[float] = []
    checkpoint_seconds: list[float] = []
    save_seconds: list[float] = []
    before = fresh_peak()
    with tempfile.TemporaryDirectory() as folder:
        trainer = pipeline_trainer(params, method, config, sentences, Path(folder) / "ck")
        trainer.evaluate = timing(lambda encoder: dev(encoder)["STSBenchmark/dev"], dev_seconds)
        trainer._checkpoint = timing(trainer._checkpoint, checkpoint_seconds)
        trainer.save_best = timing(trainer.save_best, save_seconds)
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
        "seconds_per_step": (seconds - sum(dev_seconds + checkpoint_seconds + save_seconds))
        / result.steps,
        "seconds_per_dev_scoring": statistics.mean(dev_seconds),
        "seconds_per_checkpoint": statistics.mean(checkpoint_seconds),
        "seconds_per_best_save": statistics.mean(save_seconds),
        "peak_memory_mib": torch.cuda.max_memory_allocated() / 2**20,
        "memory_before_mib": before,
        "loss_curve": losses,
    }


def epoch_estimate(row: dict[str, Any], config: TrainConfig) -> dict[str, Any]:
    """Seconds of one epoch: its steps at the median timed step, plus (with a short training)
    the loop's dev scorings, checkpoints and best-model saves in it (every scoring a new best)."""
    steps = row["steps"]["steps_per_epoch"]
    estimate: dict[str, Any] = {
        "steps": steps,
        "step_seconds": steps * row["steps"]["median_seconds_per_step"],
    }
    if "training" in row:
        training = row["training"]
        scorings, checkpoints = steps // config.eval_steps, steps // config.checkpoint_steps
        scoring = training["seconds_per_dev_scoring"] + training["seconds_per_best_save"]
        estimate |= {
            "dev_scorings": scorings,
            "checkpoints": checkpoints,
            "loop_seconds": scorings * scoring + checkpoints * training["seconds_per_checkpoint"],
        }
    estimate["seconds"] = estimate["step_seconds"] + estimate.get("loop_seconds", 0.0)
    return estimate


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--methods", nargs="+", default=list(METHODS))
    parser.add_argument("--precision", default="bf16", choices=["fp32", "bf16", "fp16"])
    parser.add_argument("--steps", type=int, default=50, help="timed steps per method")
    parser.add_argument("--train-steps", type=int, default=50, help="0 = no short training")
    parser.add_argument("--params", default=str(ROOT / "params.yaml"))
    parser.add_argument("--corpus", type=Path, default=CORPUS)
    parser.add_argument(
        "--corpus-size", type=int, help="cycle the corpus to this many sentences (wiki1m: 1000000)"
    )
    parser.add_argument(
        "--shape", choices=SHAPES, default="model", help="bert-base: random weights"
    )
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
    sentences = cycled(args.corpus, args.corpus_size)
    model = section(params, "model", ModelConfig).name_or_path
    results: dict[str, dict[str, Any]] = {}
    report = {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": machine(),
        "device": torch.cuda.get_device_name(),
        "cuda": torch.version.cuda,
        "model": model
        if args.shape == "model"
        else f"BERT-base, random weights; {model}'s tokenizer",
        "corpus": f"{args.corpus}, cycled to {len(sentences)} sentences",
        "precision": args.precision,
        "batch_size": config.batch_size,
        "max_length": config.max_length,
        "results": results,
    }
    with tempfile.TemporaryDirectory() as folder:
        if args.shape == "bert-base":
            params["model"]["name_or_path"] = random_bert_base(model, Path(folder))
        for method in args.methods:  # the file is written after each, so a cut run keeps some
            results[method] = measure(params, method, config, sentences, args)
            if "simcse" in results:
                simcse = results["simcse"]["steps"]["median_seconds_per_step"]
                for row in results.values():
                    row["steps"]["vs_simcse"] = row["steps"]["median_seconds_per_step"] / simcse
            args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(table(report))
    if not all(row["training"]["losses_finite"] for row in results.values() if "training" in row):
        sys.exit("error: a non-finite training loss (see the loss_curve in " + str(args.out) + ")")


def table(report: dict[str, Any]) -> str:
    """The table of benchmarks/README.md: per method, the timed steps, peak memory and the
    estimated epoch (minutes), the loop's part in it and its seconds per checkpoint."""
    rows = [
        "| method | ms/step | steps/s | x SimCSE | peak GiB | epoch: steps | epoch: + loop "
        "| in all | s per checkpoint |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for method, row in report["results"].items():
        steps, epoch = row["steps"], row["epoch"]
        checkpoint = row.get("training", {}).get("seconds_per_checkpoint", math.nan)
        minutes = [epoch.get(part, math.nan) / 60 for part in ("step_seconds", "loop_seconds")]
        rows.append(
            f"| {method} | {1000 * steps['median_seconds_per_step']:.1f} "
            f"| {steps['steps_per_second']:.1f} | {steps.get('vs_simcse', math.nan):.2f} "
            f"| {steps['peak_memory_mib'] / 1024:.1f} | {minutes[0]:.1f} min "
            f"| {minutes[1]:.1f} min | {epoch['seconds'] / 60:.1f} min | {checkpoint:.2f} |"
        )
    first = next(iter(report["results"].values()))["epoch"]
    return "\n".join(rows) + (
        f"\n\n{report['device']}, {report['precision']} autocast, batch {report['batch_size']}, "
        f"max length {report['max_length']}: one epoch is {first['steps']:,} steps."
    )


def measure(
    params: dict, method: str, config: TrainConfig, sentences: list[str], args: argparse.Namespace
) -> dict[str, Any]:
    """Timed steps of `method`, its short training (unless `--train-steps 0`) and its epoch."""
    row = {"steps": timed_steps(params, method, config, sentences, args.steps)}
    if args.train_steps:
        row["training"] = short_training(
            params, method, config, sentences, args.data, args.train_steps
        )
    row["epoch"] = epoch_estimate(row, config)
    print(method, json.dumps({k: _summary(v) for k, v in row.items()}), flush=True)
    return row


def _summary(part: dict[str, Any]) -> dict[str, Any]:
    """`part` without its per-step lists, for the console."""
    return {k: v for k, v in part.items() if k not in ("seconds", "loss_curve")}


if __name__ == "__main__":
    main()
