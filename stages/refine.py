"""Stage `refine`: fit the refinements of `refine.methods` (RepAL, whitening) around one encoder
(no training).

    python stages/refine.py --model models/trained --out refined/trained

English: the λs are searched on STS-B dev; v̂ and the whitening kernel come from the first
`refine.corpus_size` training sentences (`refine.fit_on: corpus`) or from the sentences being
scored (`eval`). Chinese: per set, on its valid split (no Chinese training corpus ships; with
`fit_on: corpus` v̂ and the kernel come from that split too). Writes the fitted refinements (the
evaluate stage applies them), `metrics/refine.json` (the chosen λs, dev scores and mean cosine of
random pairs before and after) and each refinement's figures (RepAL's Fig. 2: the eigenvalue bound
of eq. 5 against λ2) as `<figure>.json` and `.png`.
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
from sentemb.refine.fit import fit_refinements
from sentemb.refine.store import save_refinement
from sentemb.registry import REFINEMENTS
from sentemb.report.plots import dev_curve, save
from sentemb.tracking import mlflow_run

log = logging.getLogger("refine")
FIGURES = [name for entry in REFINEMENTS.values() for name in entry.cls.figures]


def parser() -> Parser:
    parser = Parser(__doc__)
    parser.model("--model", help="HF name or local folder (default: params)")
    parser.output("--out", required=True)
    parser.output("--metrics", required=True)
    parser.outputs("--plots", required=True, help="folder for the figures")
    parser.input("--data", default="data/raw", folder=True)
    parser.input("--corpus", default="data/corpus.txt", folder=False, always=False)  # fit_on
    parser.input("--phrases", default="data/phrases", folder=True, always=False)  # RepAL's IDF
    parser.input("--params", default="params.yaml", folder=False)
    return parser


def main() -> None:
    args = parser().parse_args()
    plots = [args.plots / f"{name}.{kind}" for name in FIGURES for kind in ("json", "png")]
    check_output(args.out, folder=True)  # refused now, not after the fitting
    for output in (args.metrics, *plots):
        check_output(output)
    params = load_params(args.params)
    use_nltk_data(section(params, "data", DataConfig), args.params)
    model, chinese_model = model_names(params, args.model)
    run_params = {"model": model, "refine": params.get("refine", {})}
    with mlflow_run("refine", run_params, run_name=f"refine:{model}") as run:
        fit = fit_refinements(params, model, chinese_model, args.corpus, args.data, args.phrases)
        save_refinement(args.out, fit.config, fit.fitted, fit.idf, fit.models)
        for curve in fit.curves:
            write_json(args.plots / f"{curve.name}.json", curve.points)
            figure = dev_curve(
                curve.points, f"{curve.title}: {model}", curve.x, curve.left, curve.right
            )
            save(figure, args.plots / f"{curve.name}.png")
        run.write_metrics(args.metrics, {"fit_on": fit.config.fit_on, **fit.metrics})
    for scope, values in fit.metrics.items():
        log.info("%s: %s", scope, {k: round(v, 3) for k, v in values.items()})


if __name__ == "__main__":
    run_stage(main)
