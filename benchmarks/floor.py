"""The default run's compute floor: how long its FLOPs take at this machine's bare rates, against
issue 17's 45 minutes.

    python benchmarks/floor.py     # after eval_compute.py (its JSON); about a minute

Two rates, measured here: a bare SimCSE training step (`train_step.floor_step`: batch 64, max
length 32, `train.precision`'s autocast, the pipeline's batches) and a bare inference forward
(the backbone alone under `model.precision`'s autocast and `inference_mode`, on STS-B test's
distinct sentences batched by token count as `Encoder.encode` batches them, `model.batch_size`
rows). FLOPs: `eval_compute.gflops` on the shapes, the training step counted by torch. The run's
FLOPs are one run's training and evaluation from `eval_compute.json`, times the runs of
params.yaml (one run per seed); the untrained reference row, start-up, hashing, reading and the
transfer classifiers are left out, so every real run takes longer than this floor. Each rate is
the best of `--rounds`. Writes `benchmarks/floor.json`.
"""

from __future__ import annotations

import argparse
import json
import time
from datetime import UTC, datetime
from pathlib import Path

import torch
from collect import machine
from eval_compute import gflops
from train_step import CORPUS, WARMUP, epoch_batches, floor_step, step_gflops, timed

from sentemb.config import load_params, run_plan, section
from sentemb.data.readers import read_corpus, read_stsb
from sentemb.encoder import Encoder
from sentemb.model_config import ModelConfig
from sentemb.training.config import TrainConfig

ROOT = Path(__file__).resolve().parents[1]
TARGET_MINUTES = 45


def train_rate(params: dict, steps: int, rounds: int) -> float:
    """GFLOP/s of the bare training step, the best of `rounds` means of `steps` steps."""
    model = section(params, "model", ModelConfig).name_or_path
    config = section(params, "train", TrainConfig)
    calls = WARMUP + steps + 1
    sentences = list(read_corpus(CORPUS, limit=config.batch_size * calls))
    batches = epoch_batches(sentences, config.batch_size, params["seeds"][0])
    tau = params.get("simcse", {}).get("temperature", 0.05)
    torch.manual_seed(params["seeds"][0])
    encoder = Encoder.from_pretrained(model, config.pooler, None, False, config.precision)
    step = floor_step(encoder, config, batches, tau)
    seconds = min(sum(timed(step, steps)) / steps for _ in range(rounds))
    return step_gflops(step, calls - 1) / seconds


def forward_rate(params: dict, data: Path, rounds: int) -> float:
    """GFLOP/s of bare forwards over STS-B test's distinct sentences, the best of `rounds`."""
    model = section(params, "model", ModelConfig)
    encoder = Encoder.from_pretrained(
        model.name_or_path, "cls_before_pooler", model.max_length, False, model.precision
    )
    pairs = read_stsb(data, "test")
    sentences = list(dict.fromkeys([*pairs.first, *pairs.second]))
    best = float("inf")
    with torch.inference_mode():
        for _ in range(rounds):
            shapes = []
            started = time.perf_counter()
            for _, batch in encoder.batches(sentences, model.batch_size):
                with encoder.autocast():
                    encoder.backbone(**batch)
                shapes.append((*batch["input_ids"].shape, 0))
            best = min(best, time.perf_counter() - started)
    return gflops(shapes, encoder.backbone.config) / best


def floor(params: dict, compute: dict, train: float, forward: float) -> dict:
    """Minutes the default run's FLOPs take at the bare rates (training at `train`, evaluation at
    `forward` GFLOP/s), against the target."""
    runs = len(run_plan(params)[1])
    seconds = runs * (compute["training_gflops"] / train + compute["evaluation_gflops"] / forward)
    return {
        "runs": runs,
        "train_gflops_per_s": train,
        "forward_gflops_per_s": forward,
        "minutes": seconds / 60,
        "target_minutes": TARGET_MINUTES,
    }


def table(result: dict, compute: dict) -> str:
    """The table of benchmarks/README.md: the two rates, and the run's floor against the target."""
    return "\n".join(
        [
            "| bare rate on this machine | GFLOP/s |",
            "|---|---:|",
            f"| training step (forward, backward, AdamW) | {result['train_gflops_per_s']:.0f} |",
            f"| inference forward | {result['forward_gflops_per_s']:.0f} |",
            "",
            f"{result['runs']} runs x ({compute['training_gflops'] / 1000:.1f} TFLOP training + "
            f"{compute['evaluation_gflops'] / 1000:.1f} TFLOP evaluation) at these rates: "
            f"**{result['minutes']:.0f} min**, against {result['target_minutes']}.",
        ]
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--params", default=str(ROOT / "params.yaml"))
    parser.add_argument("--data", default=ROOT / "data/raw", type=Path)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--out", type=Path, default=Path(__file__).with_name("floor.json"))
    args = parser.parse_args()
    params = load_params(args.params)
    compute = json.loads(Path(__file__).with_name("eval_compute.json").read_text())
    train = train_rate(params, args.steps, args.rounds)
    forward = forward_rate(params, args.data, args.rounds)
    result = {
        "date": datetime.now(UTC).strftime("%Y-%m-%d"),
        "machine": machine(),
        **floor(params, compute, train, forward),
    }
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(table(result, compute))


if __name__ == "__main__":
    main()
