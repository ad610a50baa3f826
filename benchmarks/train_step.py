"""Seconds per training step: each method of the pipeline against a bare SimCSE step.

    python benchmarks/train_step.py                    # simcse sscl iscse dclr paser, 5 steps each
    python benchmarks/train_step.py --methods simcse --steps 10

Same encoder (`model.name_or_path` of params.yaml), batch 64, max length 32, the precision the
pipeline picks (`train.precision`; bf16 autocast by default, the floor under the same autocast),
the same sentences. The floor is SimCSE without the pipeline:
one forward of the two dropout views, [CLS] through a dense + tanh head, InfoNCE written
inline (cross-entropy over the cosine matrix / τ), backward, AdamW. Each configuration runs two
warm-up steps, then `--steps` timed steps (tokenization included) on the batches the pipeline
draws (same sentences, same padding for every configuration); the floor runs before and
after the methods and its median is over both runs. Ratios are against the floor and against
the pipeline's SimCSE measured in the same run. PaSeR reads `paser.phrases` (run the phrases
stage first). One more step per configuration is counted in FLOPs (torch's FlopCounterMode,
forward and backward): the ratio of FLOPs is what a method must cost on any machine, so a time
ratio above it is overhead to find. Writes `benchmarks/train_step.json`.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

import torch
import torch.nn.functional as F
from collect import machine
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from sentemb.config import load_params, section
from sentemb.data.readers import read_corpus
from sentemb.encoder import Encoder, autocast
from sentemb.methods.base import CombinedMethod
from sentemb.model_config import ModelConfig
from sentemb.model_files import resolve_model
from sentemb.registry import METHODS
from sentemb.training.config import TrainConfig
from sentemb.training.loop import Trainer

ROOT = Path(__file__).resolve().parents[1]
WARMUP = 2
CORPUS = (ROOT / "../shared/datasets/corpus/wiki1m_for_simcse.head.txt").resolve()


def timed(step: Callable[[int], object], steps: int) -> list[float]:
    """Seconds of each of `steps` calls after `WARMUP` untimed calls."""
    for i in range(WARMUP):
        step(i)
    seconds = []
    for i in range(WARMUP, WARMUP + steps):
        started = time.perf_counter()
        step(i)
        seconds.append(time.perf_counter() - started)
    return seconds


def step_gflops(step: Callable[[int], object], i: int) -> float:
    """Floating-point operations of call `i` (forward and backward, counted by torch), in GFLOP:
    what a step costs whatever the machine, to tell compute from overhead."""
    with FlopCounterMode(display=False) as counter:
        step(i)
    return counter.get_total_flops() / 1e9


def floor_step(
    encoder: Encoder, config: TrainConfig, batches: list[list[str]], tau: float
) -> Callable[[int], None]:
    """A bare SimCSE step on `encoder`'s backbone: no pipeline code past tokenization."""
    backbone = encoder.backbone
    hidden = backbone.config.hidden_size
    head = nn.Sequential(nn.Linear(hidden, hidden), nn.Tanh())
    parameters = [*backbone.parameters(), *head.parameters()]
    optimizer = torch.optim.AdamW(parameters, lr=config.learning_rate)
    backbone.train()

    def step(i: int) -> None:
        batch = encoder.tokenize(batches[i], config.max_length)
        ids = batch["input_ids"].repeat(2, 1)
        mask = batch["attention_mask"].repeat(2, 1)
        with encoder.autocast():
            cls = backbone(input_ids=ids, attention_mask=mask).last_hidden_state[:, 0]
            first, second = head(cls).chunk(2)
            similarity = F.normalize(first, dim=-1) @ F.normalize(second, dim=-1).T / tau
        loss = F.cross_entropy(similarity.float(), torch.arange(len(first)))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()

    return step


def pipeline_trainer(
    params: dict, spec: str, config: TrainConfig, sentences: list[str], checkpoints: Path
) -> Trainer:
    """The pipeline's trainer for `spec` on `model.name_or_path` from the first of `seeds`, no
    dev scoring; `config.precision` picks the autocast of training and of `encode`."""
    seed = params["seeds"][0]
    model = section(params, "model", ModelConfig).name_or_path
    encoder = Encoder.from_pretrained(model, config.pooler, None, False, config.precision)
    torch.manual_seed(seed)
    method = CombinedMethod(spec, params, encoder, seed)
    return Trainer(encoder, method, config, sentences, lambda e: 0.0, seed, checkpoints, {})


def sentence_transformers_step(
    model: str, config: TrainConfig, batches: list[list[str]], tau: float
) -> Callable[[int], None]:
    """The SimCSE step users write with sentence-transformers: [CLS] pooling,
    `MultipleNegativesRankingLoss` (scale 1/τ) over each sentence paired with itself (two
    forward passes, two dropout views), AdamW, under the pipeline's autocast."""
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer import losses, modules

    transformer = modules.Transformer(resolve_model(model), max_seq_length=config.max_length)
    pooling = modules.Pooling(transformer.get_embedding_dimension(), "cls")
    network = SentenceTransformer(modules=[transformer, pooling], device="cpu")
    objective = losses.MultipleNegativesRankingLoss(network, scale=1.0 / tau)
    optimizer = torch.optim.AdamW(network.parameters(), lr=config.learning_rate)
    network.train()

    def step(i: int) -> None:
        features = network.tokenize(batches[i])
        with autocast(config.precision, torch.device("cpu")):
            loss = objective([features, dict(features)], None)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()

    return step


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--methods", nargs="+", default=list(METHODS))
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--params", default=str(ROOT / "params.yaml"))
    parser.add_argument("--out", type=Path, default=Path(__file__).with_name("train_step.json"))
    args = parser.parse_args()
    params = load_params(args.params)
    model = section(params, "model", ModelConfig).name_or_path
    config = replace(section(params, "train", TrainConfig), max_steps=1000, checkpoint_steps=10**9)
    calls = WARMUP + args.steps + 1  # the last call counts FLOPs
    sentences = list(read_corpus(CORPUS, limit=config.batch_size * calls))
    seed = params["seeds"][0]
    with tempfile.TemporaryDirectory() as checkpoints:  # the batches every trainer will see
        order = pipeline_trainer(params, "simcse", config, sentences, Path(checkpoints))
        batches = [order.batch_sentences(i) for i in range(calls)]
    results: dict[str, dict[str, float]] = {}
    tau = params.get("simcse", {}).get("temperature", 0.05)

    def measure(step: Callable[[int], object]) -> dict[str, list[float] | float]:
        return {"seconds": timed(step, args.steps), "gflops": step_gflops(step, calls - 1)}

    def floor() -> dict[str, list[float] | float]:
        torch.manual_seed(seed)
        encoder = Encoder.from_pretrained(model, config.pooler, None, False, config.precision)
        return measure(floor_step(encoder, config, batches, tau))

    floor_first = floor()
    torch.manual_seed(seed)
    results["sentence-transformers"] = measure(
        sentence_transformers_step(model, config, batches, tau)
    )
    for spec in args.methods:
        with tempfile.TemporaryDirectory() as checkpoints:
            trainer = pipeline_trainer(params, spec, config, sentences, Path(checkpoints))
            results[spec] = measure(trainer.step)
        print(spec, statistics.median(results[spec]["seconds"]))
    # the floor runs first and last, so drift within the run shows and is averaged out
    floor_last = floor()
    results["floor"] = {
        "seconds": floor_first["seconds"] + floor_last["seconds"],
        "gflops": floor_last["gflops"],
    }
    for row in results.values():
        row["median"] = statistics.median(row["seconds"])
    for row in results.values():
        row["vs_floor"] = row["median"] / results["floor"]["median"]
        if "simcse" in results:
            row["vs_simcse"] = row["median"] / results["simcse"]["median"]
            row["gflops_vs_simcse"] = row["gflops"] / results["simcse"]["gflops"]
    report = {
        "date": datetime.now(UTC).strftime("%Y-%m-%d"),
        "machine": machine(),
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
