"""Stage `train`: train the encoder with the experiment's method and one seed (DVC runs one per
seed: `train@42` writes models/42).

    python stages/train.py --seed 42 --out models/42 --metrics metrics/runs/42/train.json \
        --plots plots/runs/42 --checkpoints checkpoints/42

`--method` (default: params' `method`) is simcse, sscl, iscse, dclr, paser or a '+' join,
trained by sentence-transformers' trainer with the loss of `sentemb.losses`. Writes the best
model (by the dev selection metric) to `--out`: `save_pretrained` weights, tokenizer, pooler
config and a model card (`README.md`), a sentence-transformers folder logged to MLflow as a
model; the metrics file (with the untrained model's dev score, any warning that the run did not
learn, and the stage's `seconds`); the loss and dev curves as DVC plots. `train.nproc: K` runs
it under `torchrun --nproc-per-node=K` (DDP); several machines run the torchrun command of
docs/operations.md. Every input (corpus, dev sets, PaSeR's phrases) is checked before the
model is loaded, and the model with its poolers (and its vectors of a few dev sentences)
before the checkpoint folder is locked; a run that fails leaves no lock file, nor a checkpoint
folder it made empty. A killed run restarted with the same run key (params, corpus, dev data,
phrases, model weights, code) resumes from its last checkpoint; with another key it starts
afresh and says which part differs.
"""

from __future__ import annotations

import logging
import os

from sentemb.cli import Parser, run_stage
from sentemb.config import load_params, run_plan, section
from sentemb.data.download import DataConfig, use_nltk_data
from sentemb.io import check_folder, check_output, write_json
from sentemb.report.plots import save, training_curves
from sentemb.tracking import mlflow_run
from sentemb.training.processes import one_gpu, torchrun
from sentemb.training.run import check_params, prepare

log = logging.getLogger("train")
PLOTS = ("dev_curve.json", "loss_curve.json", "train_curves.png")  # written into --plots


def parser() -> Parser:
    parser = Parser(__doc__)
    parser.add_argument("--method", help="simcse, iscse+dclr, ... (default: params' method)")
    parser.add_argument("--seed", required=True, type=int)
    parser.output("--out", required=True)
    parser.output("--metrics", required=True)
    parser.outputs("--plots", required=True)
    parser.outputs("--checkpoints", required=True)
    parser.input("--params", default="params.yaml", folder=False)
    parser.input("--data", default="data/raw", folder=True)
    parser.input("--corpus", default="data/corpus.txt", folder=False)
    return parser


def main() -> None:
    args = parser().parse_args()
    plots = {name: args.plots / name for name in PLOTS}
    check_output(args.out, folder=True)  # refused now, not after the training
    for output in (args.metrics, *plots.values()):
        check_output(output)
    check_folder(args.checkpoints)
    params = load_params(args.params)
    use_nltk_data(section(params, "data", DataConfig), args.params)
    method = args.method or run_plan(params)[0]
    nproc = check_params(params, method)[0].nproc  # once, before torchrun starts processes
    if nproc > 1 and "WORLD_SIZE" not in os.environ:  # not yet under torchrun
        torchrun(nproc)
    one_gpu(params)  # alone: the GPU train.device names, no other
    job = prepare(
        method, args.seed, params, args.data, args.corpus
    )  # every input checked: no run yet
    with mlflow_run("train", {}, run_name=f"train:{job.spec}") as run:
        run.log_params(job.run_key)
        result = job.train(args.out, args.checkpoints, on_log=run.log_metrics)
        if result is None:  # not rank 0 under torchrun
            return
        write_json(plots["dev_curve.json"], result.dev_curve)
        write_json(plots["loss_curve.json"], result.loss_curve)
        curves = training_curves(result.loss_curve, result.dev_curve, job.spec)
        save(curves, plots["train_curves.png"])
        run.write_metrics(args.metrics, job.metrics(result))
        run.log_model(args.out)
    log.info(
        "best dev %.2f at step %d of %d (untrained: %.2f)",
        result.best_score,
        result.best_step,
        result.steps,
        result.initial_dev,
    )


if __name__ == "__main__":
    run_stage(main)
