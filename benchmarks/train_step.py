"""Seconds per training step, on this machine's device: the pipeline's step of each method (the
train stage's trainer), against the bare floor and the stock sentence-transformers recipe.

    python benchmarks/train_step.py                    # every method, 8 timed steps each
    python benchmarks/train_step.py --methods simcse --steps 10 --compile

Same encoder (`model.name_or_path` of params.yaml), batch 64, max length 32, the precision the
pipeline picks (`train.precision`; bf16 autocast where the device has it), the same sentences
(the mirror's Wikipedia head). Measured in one run, each after `WARMUP` untimed steps:

* each method: `TrainingJob.train` (sentence-transformers' trainer with the method's loss), no
  dev scoring or checkpoint inside the timed steps; a step is the time between two
  `on_step_end`s of the trainer (the loop as it runs: data loader, forward, backward, clipping,
  AdamW, callbacks); on CUDA the timed steps are one window ended by a synchronisation, so a
  host that queues work ahead of the GPU shows;
* the floor: SimCSE without the pipeline: one fixed batch tokenized beforehand, one forward
  of both dropout views, [CLS] through a dense + tanh head, InfoNCE written inline, backward,
  fused AdamW; eager, and with `--compile` also through `torch.compile` (inductor);
* sentence-transformers: the SimCSE recipe of its docs, `MultipleNegativesRankingLoss` (scale
  1/τ) on each sentence paired with itself (two forward passes), the model as
  `SentenceTransformer(path)` loads it, default `SentenceTransformerTrainingArguments` plus
  the pipeline's bf16.

FLOPs of one floor step (torch's FlopCounterMode, forward and backward) give the rate each
time stands for. Writes `benchmarks/train_step.json`.
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from unittest import mock

import torch
import torch.nn.functional as F
from collect import machine
from torch import nn
from torch.utils.flop_counter import FlopCounterMode
from transformers import TrainerCallback

from sentemb.config import load_params, section
from sentemb.data.readers import read_corpus
from sentemb.encoder import Encoder
from sentemb.losses import method_loss
from sentemb.methods.paser import PaSeRConfig
from sentemb.model_config import ModelConfig
from sentemb.model_files import resolve_model
from sentemb.phrases import PhrasesConfig, extract
from sentemb.precision import autocast_dtype
from sentemb.registry import METHODS
from sentemb.st_model import st_model
from sentemb.training.config import TrainConfig
from sentemb.training.processes import pick_device
from sentemb.training.run import TrainingJob
from sentemb.training.selection import Selection
from sentemb.training.trainer import Trainer

ROOT = Path(__file__).resolve().parents[1]
WARMUP = 2
CORPUS = (ROOT / "../shared/datasets/corpus/wiki1m_for_simcse.head.txt").resolve()


def timed(step: Callable[[int], object], steps: int) -> list[float]:
    """Seconds of each of `steps` calls after `WARMUP` untimed calls (CUDA: each synchronised)."""
    sync = torch.cuda.synchronize if torch.cuda.is_available() else lambda: None
    for i in range(WARMUP):
        step(i)
    seconds = []
    for i in range(WARMUP, WARMUP + steps):
        sync()
        started = time.perf_counter()
        step(i)
        sync()
        seconds.append(time.perf_counter() - started)
    return seconds


def window(step: Callable[[int], object], steps: int) -> float:
    """Mean seconds of `steps` calls after `WARMUP` untimed ones, timed as one window (CUDA:
    synchronised at its ends only, so work the host queues ahead overlaps as in training)."""
    sync = torch.cuda.synchronize if torch.cuda.is_available() else lambda: None
    for i in range(WARMUP):
        step(i)
    sync()
    started = time.perf_counter()
    for i in range(WARMUP, WARMUP + steps):
        step(i)
    sync()
    return (time.perf_counter() - started) / steps


def step_gflops(step: Callable[[int], object], i: int) -> float:
    """Floating-point operations of call `i` (forward and backward, counted by torch), in GFLOP:
    what a step costs whatever the machine, to tell compute from overhead."""
    with FlopCounterMode(display=False) as counter:
        step(i)
    return counter.get_total_flops() / 1e9


def cycled(path: Path, size: int) -> list[str]:
    """The sentences of the corpus at `path`, repeated in order up to `size`."""
    return list(itertools.islice(itertools.cycle(read_corpus(path)), size))


def epoch_batches(sentences: list[str], size: int, seed: int, epoch: int = 0) -> list[list[str]]:
    """The batches of epoch `epoch` as the trainer draws them: consecutive rows of
    randperm(seed + epoch), the last partial batch dropped."""
    order = torch.randperm(len(sentences), generator=torch.Generator().manual_seed(seed + epoch))
    rows = order.tolist()
    return [
        [sentences[i] for i in rows[s : s + size]] for s in range(0, len(rows) - size + 1, size)
    ]


def bench_job(
    params: dict,
    spec: str,
    sentences: list[str],
    checkpoints: Path,
    model: str | None = None,
    **train: Any,
) -> TrainingJob:
    """The train stage's job for `spec` on `sentences` (the params' model, or `model`), with the
    `train` params overridden by `train`; its dev score is a constant (no dev set is encoded)."""
    seed = params["seeds"][0]
    config = section(
        {**params, "train": {**params.get("train", {}), **train}}, "train", TrainConfig
    )
    model_config = section(params, "model", ModelConfig)
    name = model or model_config.name_or_path
    st = st_model(name, config.pooler, config.max_length, attention=config.attention)
    data = {}
    sections = dict(params)
    if "paser" in spec:
        folder = checkpoints.parent / f"phrases-{checkpoints.name}"
        extract(
            lambda: iter(dict.fromkeys(sentences)), len(set(sentences)), PhrasesConfig(), folder
        )
        sections["paser"] = {**params.get("paser", {}), "phrases": str(folder / "rake.jsonl")}
        data["paser"] = section(sections, "paser", PaSeRConfig).sentence_data(sections, sentences)
    loss = method_loss(spec, st, sections, seed=seed, mlp_head=config.mlp_head)
    encoder = Encoder(st[0].auto_model, st[0].tokenizer, config.eval_pooler, name=name)
    return TrainingJob(
        spec,
        seed,
        model_config,
        config,
        sentences,
        "the benchmark's sentences",
        st,
        encoder,
        loss,
        {
            "method": spec,
            "model": name,
            "train": asdict(config),
            "simcse": asdict(loss.base),
            **{part: asdict(loss.parts[part].config) for part in loss.parts},
        },
        Selection("stsb", lambda encoder: {"STSBenchmark/dev": 0.0}, ["STSBenchmark/dev"], []),
        data,
    )


class Clock(TrainerCallback):
    """The wall time of every step's end (CUDA: synchronised at the window's ends only)."""

    def __init__(self, first: int, last: int) -> None:
        self.first, self.last, self.ends = first, last, {}
        self.sync = torch.cuda.synchronize if torch.cuda.is_available() else lambda: None

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if state.global_step in (self.first, self.last):
            self.sync()
        self.ends[state.global_step] = time.perf_counter()

    def seconds(self) -> dict[str, Any]:
        steps = [self.ends[i + 1] - self.ends[i] for i in range(self.first, self.last)]
        return {
            "seconds": steps,
            "mean": (self.ends[self.last] - self.ends[self.first]) / (self.last - self.first),
            "median": statistics.median(steps),
        }


def pipeline_seconds(job: TrainingJob, steps: int, folder: Path) -> dict[str, Any]:
    """Seconds per step of `job` run by the trainer for `WARMUP + steps` steps, with no dev
    scoring or checkpoint inside them, the peak CUDA memory, and the median seconds of the
    non-finite guard (`Trainer.check_step`: the loss flag and one gradient norm), alone and as
    a share of a step (each call synchronised, so on CUDA it is an upper bound)."""
    total = WARMUP + steps
    job.config.max_steps, job.config.eval_steps = total, 10**6
    job.config.checkpoint_minutes = 10**6
    clock = Clock(WARMUP, total)
    if torch.cuda.is_available():
        torch.cuda.reset_peak_memory_stats()
    checks: dict[int, float] = {}
    check_step = Trainer.check_step

    def timed_check(trainer: Trainer) -> None:
        clock.sync()
        started = time.perf_counter()
        check_step(trainer)
        clock.sync()
        checks[trainer.state.global_step] = time.perf_counter() - started

    with mock.patch.object(Trainer, "check_step", timed_check):
        job.train(folder / "model", folder / "checkpoints", callbacks=[clock])
    timing = clock.seconds()
    check = statistics.median(checks[i] for i in range(WARMUP, total))
    timing |= {"check_median": check, "check_share": check / timing["median"]}
    if torch.cuda.is_available():
        timing["peak_memory_mib"] = torch.cuda.max_memory_allocated() / 2**20
    return timing


class Floor(nn.Module):
    """SimCSE's objective on a backbone, nothing else: both views in one forward, [CLS], a
    dense + tanh head, InfoNCE inline."""

    def __init__(self, backbone: nn.Module, tau: float) -> None:
        super().__init__()
        hidden = backbone.config.hidden_size
        self.backbone, self.head, self.tau = (
            backbone,
            nn.Sequential(nn.Linear(hidden, hidden), nn.Tanh()),
            tau,
        )

    def forward(self, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        cls = self.backbone(input_ids=ids, attention_mask=mask).last_hidden_state[:, 0]
        first, second = self.head(cls).chunk(2)
        similarity = F.normalize(first, dim=-1) @ F.normalize(second, dim=-1).T / self.tau
        return F.cross_entropy(similarity.float(), torch.arange(len(first), device=ids.device))


def floor_step(
    encoder: Encoder,
    config: TrainConfig,
    batches: list[list[str]],
    tau: float,
    compiled: bool = False,
) -> Callable[[int], None]:
    """A bare SimCSE step on `encoder`'s backbone over `batches`, tokenized beforehand (both
    views: each batch fed twice), fused AdamW, under `train.precision`'s autocast."""
    device = pick_device(config.device, 0)
    floor = Floor(encoder.backbone, tau).to(device).train()
    optimizer = torch.optim.AdamW(floor.parameters(), lr=config.learning_rate, fused=True)
    run = torch.compile(floor) if compiled else floor
    dtype = autocast_dtype(config.precision, device)
    inputs = []
    for batch in batches:
        tokens = encoder.tokenize(batch, config.max_length).to(device)
        inputs.append((tokens["input_ids"].repeat(2, 1), tokens["attention_mask"].repeat(2, 1)))

    def step(i: int) -> None:
        with torch.autocast(device.type, dtype or torch.float32, enabled=dtype is not None):
            loss = run(*inputs[i % len(inputs)])
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()

    return step


def sentence_transformers_seconds(
    model: str, config: TrainConfig, sentences: list[str], steps: int, tau: float, folder: Path
) -> dict[str, Any]:
    """Seconds per step of the SimCSE recipe of sentence-transformers' docs (module docstring)."""
    from datasets import Dataset
    from sentence_transformers import (
        SentenceTransformer,
        SentenceTransformerTrainer,
        SentenceTransformerTrainingArguments,
    )
    from sentence_transformers.sentence_transformer.losses import MultipleNegativesRankingLoss

    device = pick_device(config.device, 0)
    dtype = autocast_dtype(config.precision, device)
    network = SentenceTransformer(resolve_model(model), device=str(device))
    network.max_seq_length = config.max_length
    total = WARMUP + steps
    args = SentenceTransformerTrainingArguments(
        output_dir=str(folder),
        per_device_train_batch_size=config.batch_size,
        learning_rate=config.learning_rate,
        max_steps=total,
        bf16=dtype == torch.bfloat16,
        fp16=dtype == torch.float16,
        use_cpu=device.type == "cpu",
        report_to="none",
        save_strategy="no",
        disable_tqdm=True,
    )
    data = Dataset.from_dict({"anchor": sentences, "positive": sentences})
    clock = Clock(WARMUP, total)
    trainer = SentenceTransformerTrainer(
        model=network,
        args=args,
        train_dataset=data,
        loss=MultipleNegativesRankingLoss(network, scale=1.0 / tau),
        callbacks=[clock],
    )
    trainer.train()
    return clock.seconds() | {"optim": str(args.optim)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--methods", nargs="+", default=list(METHODS))
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--compile", action="store_true", help="also the compiled floor")
    parser.add_argument("--params", default=str(ROOT / "params.yaml"))
    parser.add_argument("--out", type=Path, default=Path(__file__).with_name("train_step.json"))
    args = parser.parse_args()
    params = load_params(args.params)
    model = section(params, "model", ModelConfig).name_or_path
    config = section(params, "train", TrainConfig)
    tau = params.get("simcse", {}).get("temperature", 0.05)
    sentences = cycled(CORPUS, config.batch_size * (WARMUP + args.steps + 1))
    batches = epoch_batches(sentences, config.batch_size, params["seeds"][0])
    results: dict[str, dict[str, Any]] = {}

    def floor(compiled: bool) -> dict[str, Any]:
        torch.manual_seed(params["seeds"][0])
        encoder = Encoder.from_pretrained(model, config.pooler, None, False, config.precision)
        step = floor_step(encoder, config, batches, tau, compiled)
        seconds = timed(step, args.steps)
        return {"seconds": seconds, "median": statistics.median(seconds)}

    results["floor"] = floor(False)
    results["floor"]["gflops"] = step_gflops(
        floor_step(
            Encoder.from_pretrained(model, config.pooler, None, False, config.precision),
            config,
            batches,
            tau,
        ),
        0,
    )
    if args.compile:
        started = time.perf_counter()
        results["floor_compiled"] = floor(True)
        results["floor_compiled"]["seconds_with_compilation"] = time.perf_counter() - started
    with tempfile.TemporaryDirectory() as folder:
        results["sentence-transformers"] = sentence_transformers_seconds(
            model, config, sentences, args.steps, tau, Path(folder)
        )
    for spec in args.methods:
        with tempfile.TemporaryDirectory() as folder:
            job = bench_job(params, spec, sentences, Path(folder) / "checkpoints")
            results[spec] = pipeline_seconds(job, args.steps, Path(folder))
        print(spec, results[spec]["median"])
    for row in results.values():
        row["vs_floor"] = row["median"] / results["floor"]["median"]
        if "simcse" in results:
            row["vs_simcse"] = row["median"] / results["simcse"]["median"]
    device = pick_device(config.device, 0)
    report = {
        "date": datetime.now(UTC).strftime("%Y-%m-%d"),
        "machine": machine(),
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "autocast": str(autocast_dtype(config.precision, device)),
        "model": model,
        "batch_size": config.batch_size,
        "max_length": config.max_length,
        "steps": args.steps,
        "results": results,
    }
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps({k: (v["median"], v["vs_floor"]) for k, v in results.items()}, indent=1))


if __name__ == "__main__":
    main()
