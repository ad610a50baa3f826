"""Stage `refine`: fit the refinements of `refine.methods` (RepAL, whitening) around one encoder
(no training).

    python stages/refine.py --model models/trained --out refined/trained

English: the λs are searched on STS-B dev; v̂ and the whitening kernel come from the first
`refine.corpus_size` training sentences (`refine.fit_on: corpus`) or from the sentences being
scored (`eval`). Chinese: per set, on its valid split (no Chinese training corpus ships; with
`fit_on: corpus` v̂ and the kernel come from that split too). Writes the fitted refinements (the
evaluate stage applies them), `metrics/refine.json` (the chosen λs, dev scores and mean cosine of
random pairs before and after) and the eigenvalue bound of eq. 5 against λ2 (RepAL Fig. 2).
The refinement records the English and Chinese models it was fitted on (name, weights sha256,
pooler, width); evaluate refuses it around any other model. A Chinese set absent from `--data`
without the download manifest saying why, vectors that cannot be scored and a NaN or infinite
fitted value are each one error, and nothing is written.
"""

from __future__ import annotations

import logging

from sentemb.cli import Parser, run_stage
from sentemb.config import load_params, section
from sentemb.data.download import DataConfig, use_nltk_data
from sentemb.evaluation.encoders import model_names
from sentemb.io import check_output, write_json
from sentemb.postprocess import fit_refinements, save_refinement
from sentemb.report.plots import refine_bound, save
from sentemb.tracking import mlflow_run
from sentemb.training.config import TrainConfig

log = logging.getLogger("refine")
PLOTS = ("refine_bound.json", "refine_bound.png")  # written into --plots


def parser() -> Parser:
    parser = Parser(__doc__)
    parser.model("--model", help="HF name or local folder (default: params)")
    parser.output("--out", required=True)
    parser.output("--metrics", required=True)
    parser.outputs("--plots", required=True, help="folder for refine_bound.*")
    parser.input("--data", default="data/raw", folder=True)
    parser.input("--phrases", default="data/phrases", folder=True, always=False)  # RepAL's IDF
    parser.input("--params", default="params.yaml", folder=False)
    return parser


def main() -> None:
    args = parser().parse_args()
    plots = {name: args.plots / name for name in PLOTS}
    check_output(args.out, folder=True)  # refused now, not after the fitting
    for output in (args.metrics, *plots.values()):
        check_output(output)
    params = load_params(args.params)
    use_nltk_data(section(params, "data", DataConfig), args.params)
    model, chinese_model = model_names(params, args.model)
    corpus = section(params, "train", TrainConfig).corpus
    run_params = {"model": model, "refine": params.get("refine", {})}
    with mlflow_run("refine", run_params, run_name=f"refine:{model}") as run:
        fit = fit_refinements(params, model, chinese_model, corpus, args.data, args.phrases)
        save_refinement(args.out, fit.config, fit.fitted, fit.idf, fit.models)
        write_json(plots["refine_bound.json"], fit.curve)
        title = f"RepAL eq. 5 on STS-B dev: {model}"
        save(refine_bound(fit.curve, title), plots["refine_bound.png"])
        run.write_metrics(args.metrics, {"fit_on": fit.config.fit_on, **fit.metrics})
    for scope, values in fit.metrics.items():
        log.info("%s: %s", scope, {k: round(v, 3) for k, v in values.items()})


if __name__ == "__main__":
    run_stage(main)
