"""Stage `analyze`: alignment, uniformity and over-smoothing of one encoder on STS-B test.

    python stages/analyze.py --model models/simcse-42 --out metrics/runs/simcse-42/analysis.json

Without `--model` it analyses the model training starts from (`model.name_or_path`) with the
pooler training evaluates (`train.eval_pooler`): the "before training" of SSCL Fig. 1 and 4.
Writes `alignment` and `uniformity` (Wang & Isola; IS-CSE Fig. 3) and, per layer, `token_wise`
(SSCL eq. 1; index 0 = the embedding layer) and `inter_layer` (eq. 2; entry i = layers i, i+1),
and the stage's `seconds`. A threshold that selects no positive pair, vectors that cannot be
scored (non-finite, or the same for every sentence) and a NaN or infinite result are each one
error, and nothing is written.
"""

from __future__ import annotations

import logging
from pathlib import Path

from sentemb.analysis import AnalysisConfig, analyze
from sentemb.cli import Parser, run_stage
from sentemb.config import load_params, section
from sentemb.io import check_output
from sentemb.model_config import ModelConfig
from sentemb.model_files import POOLER_FILE
from sentemb.pooling import check_pooler
from sentemb.tracking import mlflow_run
from sentemb.training.config import TrainConfig

log = logging.getLogger("analyze")


def parser() -> Parser:
    parser = Parser(__doc__)
    parser.model("--model", help="a trained model folder (default: before training)")
    parser.output("--out", required=True)
    parser.input("--data", default="data/raw", folder=True)
    parser.input("--params", default="params.yaml", folder=False)
    return parser


def main() -> None:
    args = parser().parse_args()
    check_output(args.out)  # refused now, not after the encoding
    params = load_params(args.params)
    config = section(params, "analysis", AnalysisConfig)
    model = section(params, "model", ModelConfig)
    if args.model is None:  # the untrained model, pooled as training's evaluations pool it
        eval_pooler = section(params, "train", TrainConfig).eval_pooler
        name, pooler = model.name_or_path, check_pooler(eval_pooler, "train.eval_pooler")
        settings = ("model.name_or_path", "train.eval_pooler")
    else:
        name, pooler = args.model, "auto"
        settings = ("--model", str(Path(args.model) / POOLER_FILE))  # where its pooler is set
    tracked = {"model": name, "pooler": pooler, "analysis": params.get("analysis", {})}
    with mlflow_run("analyze", tracked, run_name=f"analyze:{name}") as run:
        values = analyze(name, pooler, config, model, args.data, settings)
        result = run.write_metrics(args.out, values)
    log.info("alignment %.3f, uniformity %.3f", result["alignment"], result["uniformity"])


if __name__ == "__main__":
    run_stage(main)
