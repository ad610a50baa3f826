"""The papers' training setting on a CUDA device: each method's step through the train stage's
trainer, beside the bare floor, the stock sentence-transformers recipe and the device's peak.

    python benchmarks/gpu.py                                   # BERT-base shape, every method
    python benchmarks/gpu.py --methods simcse paser --steps 20 --loop-steps 0
    python benchmarks/gpu.py --processes 1 2 4 8               # DDP scaling, where lent 8 GPUs

The papers' setting: a BERT-base-shaped model (`BertConfig`'s defaults: 12 layers, hidden 768,
110M weights) with random weights and the tokenizer of `model.name_or_path` (bert-base-uncased's
vocabulary), batch 64, max length 32, bf16 autocast, the mirror's Wikipedia head cycled to
`--corpus-size` sentences (SimCSE's wiki1m: 1,000,000). Measured in one run, on one GPU:

* peak: the best of bf16 matmuls of 8192 x 8192 (TFLOP/s; fp32 under `--smoke`), MFU's denominator;
* tokenize: the corpus tokenized once, as the train stage does (`training.data`);
* floor: `train_step.floor_step` on one pre-tokenized batch (InfoNCE inline, fused AdamW, no
  checks), eager and compiled (inductor); its FLOPs per step (forward and backward) over time
  x peak are the MFU of every row;
* sentence-transformers: `train_step.sentence_transformers_seconds` (MultipleNegativesRankingLoss
  on (s, s), default arguments plus bf16);
* each method: `train_step.pipeline_seconds` (the trainer with `train`'s defaults: compiled on
  CUDA, 4 data loader workers, pinned memory, fused AdamW), `--steps` timed steps in one window
  ended by a synchronisation; peak memory;
* the loop: SimCSE for `--loop-steps` steps at the stage's defaults (STS-B dev every 125 steps,
  a checkpoint every 2 minutes, a log line every 10), whose wall time beyond its steps' is the
  loop's share; with the tokenizing, the dev scorings and checkpoints it gives one epoch;
* `--processes`: SimCSE's sentences per second with 64 per GPU under torchrun (DDP), each
  against one process.

Without a CUDA device it records {"skipped": "no CUDA device"}, unless `--out` already holds a
GPU measurement, which it keeps; `--smoke` runs it on the CPU instead, in fp32, to try the
script before a GPU's minutes are spent on it (`--shape model --steps 1 --loop-steps 3
--corpus-size 2000`). Writes `benchmarks/gpu.json` after each part.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import torch
from collect import machine
from train_step import (
    CORPUS,
    ROOT,
    bench_job,
    cycled,
    epoch_batches,
    floor_step,
    pipeline_seconds,
    sentence_transformers_seconds,
    step_gflops,
    window,
)

from sentemb.config import load_params, section
from sentemb.encoder import Encoder
from sentemb.model_config import ModelConfig
from sentemb.model_files import resolve_model
from sentemb.precision import autocast_dtype
from sentemb.registry import METHODS
from sentemb.training.config import TrainConfig
from sentemb.training.data import training_dataset
from sentemb.training.selection import selection_of

MIRROR = (ROOT / "../shared/datasets").resolve()


def random_bert_base(tokenizer_from: str, folder: Path) -> str:
    """A BERT-base-shaped model (`BertConfig`'s defaults, the vocabulary of the tokenizer of
    `tokenizer_from`) with random weights (seed 0), saved with that tokenizer to `folder`."""
    from transformers import AutoTokenizer, BertConfig, BertModel

    tokenizer = AutoTokenizer.from_pretrained(resolve_model(tokenizer_from))
    torch.manual_seed(0)
    BertModel(BertConfig(vocab_size=len(tokenizer))).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return str(folder)


def sync() -> None:
    """Wait for the GPU (nothing on the CPU of a `--smoke` run)."""
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def matmul_peak(device: str, dtype: torch.dtype, size: int = 8192, repeats: int = 20) -> float:
    """The device's matmul rate in `dtype` (the steps'), TFLOP/s: the best of `repeats`
    products of two `size` x `size` matrices."""
    a, b = (torch.randn(size, size, device=device, dtype=dtype) for _ in range(2))
    best = math.inf
    for _ in range(repeats):
        sync()
        started = time.perf_counter()
        a @ b
        sync()
        best = min(best, time.perf_counter() - started)
    return 2 * size**3 / best / 1e12


def floors(params: dict, config: TrainConfig, sentences: list[str], steps: int) -> dict:
    """The floor eager and compiled, on the first batch tokenized once, with its GFLOP/step."""
    tau = params.get("simcse", {}).get("temperature", 0.05)
    batch = epoch_batches(sentences[: config.batch_size * 2], config.batch_size, 0)[:1]
    model = section(params, "model", ModelConfig).name_or_path
    rows: dict[str, Any] = {}
    for compiled in (False, True):
        torch.manual_seed(0)
        encoder = Encoder.from_pretrained(model, config.pooler, None, False, config.precision)
        step = floor_step(encoder, config, batch, tau, compiled)
        started = time.perf_counter()
        name = "floor_compiled" if compiled else "floor"
        rows[name] = {"mean": window(step, steps)}
        rows[name]["wall_seconds"] = time.perf_counter() - started  # compiling included
        if not compiled:
            rows[name]["gflops"] = step_gflops(step, 0)
    return rows


def loop(params: dict, sentences: list[str], steps: int, data: Path, folder: Path) -> dict:
    """SimCSE for `steps` steps at the stage's defaults (dev scorings, checkpoints, logs): the
    wall time, and each dev scoring's and checkpoint's seconds."""
    from transformers import TrainerCallback

    job = bench_job(params, "simcse", sentences, folder / "ck")
    config = job.config
    job.config.max_steps = steps
    job.dev = selection_of(params, data, section(params, "model", ModelConfig).batch_size)
    spent: dict[str, list[float]] = {"dev": [], "checkpoint": []}
    marks: dict[str, float] = {}

    class Spent(TrainerCallback):
        """The seconds from a step's end to its dev score, and on to its checkpoint."""

        def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            marks["last"] = time.perf_counter()

        def on_evaluate(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            spent["dev"].append(time.perf_counter() - marks["last"])
            marks["last"] = time.perf_counter()

        def on_save(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            spent["checkpoint"].append(time.perf_counter() - marks["last"])

    sync()
    started = time.perf_counter()
    job.train(folder / "model", folder / "ck", callbacks=[Spent()])
    sync()
    return {
        "steps": steps,
        "wall_seconds": time.perf_counter() - started,
        "dev_seconds": spent["dev"],
        "checkpoint_seconds": spent["checkpoint"],
        "eval_steps": config.eval_steps,
        "checkpoint_minutes": config.checkpoint_minutes,
    }


def scaling(args: argparse.Namespace, model: str) -> dict[str, Any]:
    """SimCSE's sentences per second on 1, 2, 4, 8 processes (64 per GPU), each by torchrun."""
    rows: dict[str, Any] = {}
    for processes in args.processes:
        if processes > torch.cuda.device_count():
            rows[str(processes)] = {"skipped": f"{torch.cuda.device_count()} GPUs here"}
            continue
        with tempfile.TemporaryDirectory() as folder:
            out = Path(folder) / "worker.json"
            command = [sys.executable, "-m", "torch.distributed.run", "--standalone"]
            command += [f"--nproc-per-node={processes}", __file__, "--worker", str(out)]
            command += ["--model", model, "--steps", str(args.steps)]
            done = subprocess.run(command, capture_output=True, text=True)
            if done.returncode:
                rows[str(processes)] = {"failed": done.stderr[-2000:]}
                continue
            row = json.loads(out.read_text())
        row["sentences_per_second"] = 64 * processes / row["mean"]
        rows[str(processes)] = row
    one = rows.get("1", {}).get("sentences_per_second")
    for row in rows.values():
        if one and "sentences_per_second" in row:
            row["vs_one"] = row["sentences_per_second"] / one
    return rows


def worker(args: argparse.Namespace) -> None:
    """One process of `scaling`: SimCSE with 64 sentences per process; rank 0 writes its timing."""
    params = load_params(args.params)
    world = int(os.environ.get("WORLD_SIZE", "1"))
    sentences = cycled(CORPUS, 64 * world * (args.steps + 4))
    with tempfile.TemporaryDirectory() as folder:
        job = bench_job(
            params, "simcse", sentences, Path(folder) / "ck", args.model, batch_size=64 * world
        )
        row = pipeline_seconds(job, args.steps, Path(folder))
    if int(os.environ.get("RANK", "0")) == 0:
        args.worker.write_text(json.dumps(row))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--methods", nargs="+", default=list(METHODS))
    parser.add_argument("--steps", type=int, default=50, help="timed steps per row")
    parser.add_argument("--loop-steps", type=int, default=300, help="0: no loop run")
    parser.add_argument("--corpus-size", type=int, default=1_000_000)
    parser.add_argument("--shape", choices=("bert-base", "model"), default="bert-base")
    parser.add_argument("--processes", type=int, nargs="*", default=[])
    parser.add_argument("--params", default=str(ROOT / "params.yaml"))
    parser.add_argument("--data", type=Path, default=MIRROR, help="holds senteval/ (STS-B dev)")
    parser.add_argument("--out", type=Path, default=Path(__file__).with_name("gpu.json"))
    parser.add_argument(
        "--smoke", action="store_true", help="on the CPU, to try the script (figures meaningless)"
    )
    parser.add_argument("--worker", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--model", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args)
        return
    device = "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cpu" and not args.smoke:
        kept = json.loads(args.out.read_text()) if args.out.is_file() else {}
        if "device" in kept:  # a CPU run never erases a GPU measurement
            print(f"skipped: no CUDA device; {args.out} keeps {kept['device']}, {kept['date']}")
            return
        args.out.write_text(json.dumps({"skipped": "no CUDA device"}, indent=2) + "\n")
        print("skipped: no CUDA device")
        return
    params = load_params(args.params)
    precision = "bf16" if device == "cuda" else "fp32"
    params["train"] = {**params.get("train", {}), "device": device, "precision": precision}
    config = section(params, "train", TrainConfig)
    results: dict[str, Any] = {}
    report: dict[str, Any] = {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": machine(),
        "device": torch.cuda.get_device_name() if device == "cuda" else "cpu (--smoke)",
        "precision": precision,
        "devices": torch.cuda.device_count(),
        "cuda": torch.version.cuda,
        "torch": torch.__version__,
        "shape": args.shape,
        "batch_size": config.batch_size,
        "max_length": config.max_length,
        "results": results,
    }

    def write() -> None:
        args.out.write_text(json.dumps(report, indent=2) + "\n")

    with tempfile.TemporaryDirectory() as folder:
        model = section(params, "model", ModelConfig).name_or_path
        if args.shape == "bert-base":
            model = random_bert_base(model, Path(folder) / "bert-base")
            params["model"] = {**params.get("model", {}), "name_or_path": model}
        dtype = autocast_dtype(precision, torch.device(device)) or torch.float32
        report["peak_tflops"] = matmul_peak(device, dtype, 8192 if device == "cuda" else 512)
        sentences = cycled(CORPUS, args.corpus_size)
        tokenizer = Encoder.from_pretrained(model).tokenizer
        started = time.perf_counter()
        training_dataset(sentences, tokenizer, config.max_length)
        report["tokenize_seconds"] = time.perf_counter() - started
        report["corpus_size"] = len(sentences)
        results |= floors(params, config, sentences, args.steps)
        write()
        tau = params.get("simcse", {}).get("temperature", 0.05)
        head = sentences[: config.batch_size * (args.steps + 4)]
        with tempfile.TemporaryDirectory() as work:
            results["sentence-transformers"] = sentence_transformers_seconds(
                model, config, head, args.steps, tau, Path(work)
            )
        write()
        for spec in args.methods:
            with tempfile.TemporaryDirectory() as work:
                job = bench_job(params, spec, head, Path(work) / "ck")
                results[spec] = pipeline_seconds(job, args.steps, Path(work))
            print(spec, results[spec]["mean"], flush=True)
            write()
        if args.loop_steps:
            with tempfile.TemporaryDirectory() as work:
                report["loop"] = loop(params, sentences, args.loop_steps, args.data, Path(work))
            write()
        if args.processes:
            report["scaling"] = scaling(args, model)
    summarise(report)
    write()
    print(table(report))


def summarise(report: dict[str, Any]) -> None:
    """Ratios, MFU and the epoch estimate, from the measured rows."""
    results, peak = report["results"], report["peak_tflops"]
    gflops = results["floor"]["gflops"]
    for row in results.values():
        row["mfu"] = gflops / row["mean"] / (peak * 1000)
        row["vs_floor_compiled"] = row["mean"] / results["floor_compiled"]["mean"]
        row["vs_sentence_transformers"] = row["mean"] / results["sentence-transformers"]["mean"]
    steps = report["corpus_size"] // report["batch_size"]
    loop = report.get("loop")
    if loop is None or "simcse" not in results:
        return
    step = results["simcse"]["mean"]
    loop["loop_share"] = (loop["wall_seconds"] - loop["steps"] * step) / (loop["steps"] * step)
    epoch_steps = steps * step
    dev = statistics.mean(loop["dev_seconds"]) * (steps // loop["eval_steps"])
    checkpoints = math.floor(epoch_steps / 60 / loop["checkpoint_minutes"])
    checkpoint = statistics.mean(loop["checkpoint_seconds"] or [0.0]) * checkpoints
    report["epoch"] = {
        "steps": steps,
        "tokenize_seconds": report["tokenize_seconds"],
        "step_seconds": epoch_steps,
        "dev_seconds": dev,
        "checkpoint_seconds": checkpoint,
        "seconds": report["tokenize_seconds"] + epoch_steps + dev + checkpoint,
    }


def table(report: dict[str, Any]) -> str:
    """The table of benchmarks/README.md: per row, ms per step, the ratios and MFU."""
    if "results" not in report:
        return f"{report}"
    rows = [
        "| row | ms/step | x compiled floor | x sentence-transformers | MFU | peak GiB |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for name, row in report["results"].items():
        memory = row.get("peak_memory_mib", math.nan) / 1024
        rows.append(
            f"| {name} | {1000 * row['mean']:.1f} | {row['vs_floor_compiled']:.2f} "
            f"| {row['vs_sentence_transformers']:.2f} | {100 * row['mfu']:.0f}% | {memory:.1f} |"
        )
    epoch = report.get("epoch")
    precision = report.get("precision", "bf16")  # not recorded before: always bf16 then
    tail = f"\n\n{report['device']}, {precision}, peak {report['peak_tflops']:.2f} TFLOP/s"
    if epoch:
        tail += (
            f"; one epoch ({epoch['steps']:,} steps): {epoch['seconds'] / 60:.1f} min, of it "
            f"tokenizing {epoch['tokenize_seconds']:.0f} s, dev {epoch['dev_seconds']:.0f} s, "
            f"checkpoints {epoch['checkpoint_seconds']:.0f} s; the loop "
            f"{100 * report['loop']['loop_share']:.0f}% of the steps"
        )
    return "\n".join(rows) + tail


if __name__ == "__main__":
    main()
