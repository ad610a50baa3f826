"""Stage `train`: train the encoder with one method and seed (DVC runs one per `methods` x `seeds`).

    python stages/train.py --method iscse+dclr --seed 42 --out models/iscse+dclr-42

`--method` is simcse, sscl, iscse, dclr, paser or a '+' join. Writes the best checkpoint (by the
dev selection metric) to `--out` with `save_pretrained`, its tokenizer and pooler config, which
is also a sentence-transformers folder (MLflow artifact `model/<folder>`); the metrics
file; the loss and dev curves as DVC plots. Runs under `torchrun --nproc_per_node=K` as well. A
killed run restarted with the same params resumes from its last checkpoint.
"""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

import numpy as np

from sentemb.cli import run_stage
from sentemb.config import ConfigError, load_params, run_plan, section
from sentemb.data.readers import training_corpus
from sentemb.encoder import Encoder, ModelConfig
from sentemb.evaluation.sts import STSEvaluator
from sentemb.io import write_json
from sentemb.methods import CombinedMethod
from sentemb.plots import training_curves
from sentemb.tracking import mlflow_run
from sentemb.training.config import TrainConfig
from sentemb.training.loop import Trainer

log = logging.getLogger("train")
SELECTION_KEYS = {
    "stsb": ["STSBenchmark/dev"],
    "stsb+sick": ["STSBenchmark/dev", "SICKRelatedness/dev"],
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--method", required=True, help="a name such as simcse or iscse+dclr")
    parser.add_argument("--seed", required=True, type=int)
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--metrics", required=True, type=Path)
    parser.add_argument("--plots", required=True, type=Path)
    parser.add_argument("--checkpoints", required=True, type=Path)
    parser.add_argument("--params", default="params.yaml")
    parser.add_argument("--data", default="data/raw", type=Path)
    args = parser.parse_args()
    params = load_params(args.params)
    run_plan(params)  # a string `methods` would make DVC's matrix run one stage per character
    spec, seed = args.method, args.seed
    if seed < 0:
        raise ConfigError(f"--seed: expected an integer >= 0, got {seed}")
    model_config = section(params, "model", ModelConfig)
    config = section(params, "train", TrainConfig)
    names = spec.split("+")
    run_params = {
        "method": spec,
        "seed": seed,
        **{k: params.get(k) for k in ("model", "train", "simcse", *names)},
    }
    sentences = list(training_corpus(args.data, config.corpus))
    encoder = Encoder.from_pretrained(
        model_config.name_or_path,
        config.pooler,
        None,
        model_config.trust_remote_code,
        model_config.precision,
    )
    method = CombinedMethod(spec, params, encoder, seed)
    dev = STSEvaluator(args.data, model_config.batch_size, split="dev")

    def dev_score(model: Encoder) -> float:
        metrics = dev(model)
        return float(np.mean([metrics[k] for k in SELECTION_KEYS[config.selection]]))

    with mlflow_run("train", run_params, run_name=f"train:{spec}") as run:
        trainer = Trainer(
            encoder,
            method,
            config,
            sentences,
            dev_score,
            seed,
            args.checkpoints,
            run_params,
            on_log=lambda logs, step: run.log_metrics(logs, step=step),
        )
        result = trainer.train(args.out)
        if trainer.rank != 0:
            return
        metrics = {
            "method": spec,
            "best_dev": result.best_score,
            "best_step": result.best_step,
            "steps": result.steps,
            "final_loss": result.loss_curve[-1]["loss"] if result.loss_curve else None,
            "sentences": len(sentences),
            "selection": config.selection,
        }
        write_json(args.plots / "dev_curve.json", result.dev_curve)
        write_json(args.plots / "loss_curve.json", result.loss_curve)
        training_curves(
            result.loss_curve, result.dev_curve, args.plots / "train_curves.png", f"method: {spec}"
        )
        write_json(args.metrics, metrics)
        run.log_metrics({"best_dev": result.best_score, "best_step": result.best_step})
        run.log_artifact(args.metrics)
        run.log_artifact(args.out, "model")
    log.info("best dev %.2f at step %d of %d", result.best_score, result.best_step, result.steps)


if __name__ == "__main__":
    run_stage(main)
