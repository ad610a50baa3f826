"""Stage `train`: train the encoder with one method and seed (DVC runs one per `methods` x `seeds`).

    python stages/train.py --method iscse+dclr --seed 42 --out models/iscse+dclr-42

`--method` is simcse, sscl, iscse, dclr, paser or a '+' join. Writes the best checkpoint (by the
dev selection metric) to `--out` with `save_pretrained`, its tokenizer and pooler config, which
is also a sentence-transformers folder (MLflow artifact `model/<folder>`); the metrics
file (with the untrained model's dev score and any warning that the run did not learn); the loss
and dev curves as DVC plots. Runs under `torchrun --nproc_per_node=K` as well. Every input (corpus,
dev sets, PaSeR's phrases) is checked before the model is loaded. A killed run restarted with the
same run key (params, corpus, dev data, phrases, model weights, code) resumes from its last
checkpoint; with another key it starts afresh and says which part differs.
"""

from __future__ import annotations

import argparse
import logging
from dataclasses import asdict
from pathlib import Path

import numpy as np

from sentemb.cli import run_stage
from sentemb.config import ConfigError, load_params, run_plan, section
from sentemb.data.readers import DataFormatError, training_corpus
from sentemb.data.sources import DATASETS
from sentemb.encoder import Encoder, ModelConfig, model_identity
from sentemb.evaluation.sts import STSEvaluator
from sentemb.io import check_output, write_json
from sentemb.methods import CombinedMethod
from sentemb.methods.base import parse_spec
from sentemb.methods.paser import PaSeRConfig
from sentemb.plots import training_curves
from sentemb.tracking import mlflow_run
from sentemb.training.checkpoint import files_hash, lines_hash, source_hash
from sentemb.training.config import TrainConfig
from sentemb.training.loop import Trainer

log = logging.getLogger("train")
SELECTION = {  # train.selection -> the dev sets averaged: (metric, dataset, its file's name part)
    "stsb": [("STSBenchmark/dev", "STSBenchmark", "sts-dev")],
    "stsb+sick": [
        ("STSBenchmark/dev", "STSBenchmark", "sts-dev"),
        ("SICKRelatedness/dev", "SICK", "SICK_trial"),
    ],
}


def dev_files(root: Path, selection: str) -> list[Path]:
    """The files model selection reads; a missing one is an error before anything is built."""
    files = [
        root / f.path
        for _, dataset, part in SELECTION[selection]
        for f in DATASETS[dataset].files
        if part in Path(f.path).name
    ]
    for path in files:
        if not path.is_file():
            raise DataFormatError(
                f"{path}: not found; train.selection: {selection} selects the model on it "
                "(download it: data.datasets)"
            )
    return files


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
    check_output(args.out, folder=True)  # refused now, not after the training
    check_output(args.metrics)
    params = load_params(args.params)
    run_plan(params)  # a string `methods` would make DVC's matrix run one stage per character
    names, seed = parse_spec(args.method), args.seed
    spec = "+".join(names)
    if seed < 0:
        raise ConfigError(f"--seed: expected an integer >= 0, got {seed}")
    model_config = section(params, "model", ModelConfig)
    config = section(params, "train", TrainConfig)
    sentences = list(training_corpus(args.data, config.corpus))
    corpus = (
        str(args.data / "corpus" / "train.txt")
        if config.corpus == "wiki"
        else f"the STS sets under {args.data} (train.corpus: sts)"
    )
    data = {
        "corpus": lines_hash(sentences),
        "dev": files_hash(dev_files(args.data, config.selection)),
    }
    if "paser" in names:
        phrases = Path(section(params, "paser", PaSeRConfig).phrases)
        if not phrases.is_file():
            raise ConfigError(f"paser.phrases: {phrases}: not found; run the phrases stage first")
        data["phrases"] = files_hash([phrases])
    encoder = Encoder.from_pretrained(
        model_config.name_or_path,
        config.pooler,
        None,
        model_config.trust_remote_code,
        model_config.precision,
    )
    weights = model_identity(model_config.name_or_path, encoder).sha256
    method = CombinedMethod(spec, params, encoder, seed)
    method.check_corpus(sentences)  # PaSeR's phrases must be those of this corpus
    run_key = {  # everything that defines the run: a checkpoint resumes only the same key
        "method": spec,
        "seed": seed,
        "model": {**asdict(model_config), "weights": weights},
        "train": asdict(config),
        "simcse": asdict(method.base),
        **{name: asdict(part.config) for name, part in method.parts.items()},
        "data": data,
        "code": source_hash(),
    }
    dev = STSEvaluator(args.data, model_config.batch_size, split="dev")

    def dev_score(model: Encoder) -> float:
        metrics = dev(model)
        return float(np.mean([metrics[key] for key, _, _ in SELECTION[config.selection]]))

    with mlflow_run("train", run_key, run_name=f"train:{spec}") as run:
        trainer = Trainer(
            encoder,
            method,
            config,
            sentences,
            dev_score,
            seed,
            args.checkpoints,
            run_key,
            on_log=lambda logs, step: run.log_metrics(logs, step=step),
            corpus=corpus,
        )
        result = trainer.train(args.out)
        if trainer.rank != 0:
            return
        metrics = {
            "method": spec,
            "best_dev": result.best_score,
            "best_step": result.best_step,
            "initial_dev": result.initial_dev,
            "steps": result.steps,
            "final_loss": result.loss_curve[-1]["loss"] if result.loss_curve else None,
            "sentences": len(sentences),
            "selection": config.selection,
            "warnings": result.warnings,
        }
        write_json(args.plots / "dev_curve.json", result.dev_curve)
        write_json(args.plots / "loss_curve.json", result.loss_curve)
        training_curves(
            result.loss_curve, result.dev_curve, args.plots / "train_curves.png", f"method: {spec}"
        )
        write_json(args.metrics, metrics)
        run.log_metrics(
            {
                "best_dev": result.best_score,
                "best_step": result.best_step,
                "initial_dev": result.initial_dev,
            }
        )
        run.log_artifact(args.metrics)
        run.log_artifact(args.out, "model")
    log.info(
        "best dev %.2f at step %d of %d (untrained: %.2f)",
        result.best_score,
        result.best_step,
        result.steps,
        result.initial_dev,
    )


if __name__ == "__main__":
    run_stage(main)
