"""Stage `evaluate`: score one encoder on every suite and write one metrics JSON per suite.

    python stages/evaluate.py --model sentence-transformers/all-MiniLM-L6-v2 --out-dir D

works outside DVC too; `--suites sts chinese` scores only those (default: all). `--model tfidf`
scores the TF-IDF bag-of-words baseline. With `--refined DIR` (a refine stage output) the suites
of `refine.suites` are also scored after each refinement fitted there, and those metrics go
beside the plain ones under the refinement's name (`repal`, `whitening`). Every sentence is
encoded once per model for all suites and refinements. `--predictions-dir D` keeps, for each
suite scored by Spearman over pairs (sts, chinese, own, mteb's STS tasks), the plain model's
score and the gold score of every pair as arrays `<set>/predicted`, `<set>/gold` in
`D/<suite>.npz`, and for a set scored as a mean over items (own reranking and retrieval) each
item's headline score as `<set>/items`. `--results-dir D` keeps the result files a suite's
library writes in its own format under `D/<suite>/` (MTEB's, plain and refined:
`mteb.ResultCache("D/mteb")` reads them). Each metrics file records its suite's wall time under
`seconds` (the first suite's includes loading the model).

A dataset missing from `--data` is skipped, and listed under `skipped` with its reason, only when
the download manifest explains it (not obtainable, or left out of `data.datasets`); any other
absence, a suite with no task scored, vectors that cannot be scored (non-finite, or the same for
every sentence), a NaN or infinite score, and a refinement fitted on another model are each one
error, and nothing is written. A model and pooler certain to give unusable vectors (a decoder-only
LM pooled by its first token, an encoder-decoder) are refused before a sentence is encoded, any
other model with unusable vectors on a probe of a few sentences, naming the likely cause.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from sentemb.cli import Parser, run_stage
from sentemb.config import ConfigError, load_params, section
from sentemb.data.download import DataConfig, use_nltk_data
from sentemb.evaluate import SuiteResult, evaluate_model, keeping_pairs
from sentemb.evaluation.encoders import model_names
from sentemb.io import atomic_path, check_output
from sentemb.registry import SUITES
from sentemb.tracking import mlflow_run


def parser() -> Parser:
    parser = Parser(__doc__)
    parser.add_argument("--suites", nargs="+", choices=list(SUITES), default=list(SUITES))
    parser.model("--model", help="HF name, local folder or 'tfidf' (default: params)")
    parser.outputs("--out-dir", required=True, help="for <suite>.json")
    parser.input("--data", default="data/raw", folder=True)
    parser.input("--params", default="params.yaml", folder=False)
    parser.input("--refined", folder=True, help="a refine stage output folder")
    parser.input("--corpus", folder=False, help="the TF-IDF baseline's English IDF corpus")
    parser.outputs("--predictions-dir", help="for <suite>.npz of the pair suites")
    parser.output("--results-dir", help="for <suite>/: a library's own result files (MTEB's)")
    return parser


def main() -> None:
    args = parser().parse_args()
    suites = list(dict.fromkeys(args.suites))
    pair_suites = keeping_pairs(suites)
    if args.predictions_dir is not None and not pair_suites:
        raise ConfigError(f"--predictions-dir: only for the suites {keeping_pairs()}")
    outputs = {suite: args.out_dir / f"{suite}.json" for suite in suites}
    predictions = {}
    if args.predictions_dir is not None:
        predictions = {suite: args.predictions_dir / f"{suite}.npz" for suite in pair_suites}
    for output in (*outputs.values(), *predictions.values()):  # refused now, not after scoring
        check_output(output)
    if args.results_dir is not None:
        check_output(args.results_dir, folder=True)
    params = load_params(args.params)
    use_nltk_data(section(params, "data", DataConfig), args.params)
    model = model_names(params, args.model)[0]
    tracked = {"model": model, "eval": {s: params.get("eval", {}).get(s, {}) for s in suites}}
    with mlflow_run("evaluate", tracked, run_name=f"evaluate:{model}") as run:
        results = evaluate_model(suites, params, args.data, args.model, args.refined, args.corpus)
        for suite, path in predictions.items():
            write_predictions(path, results[suite])
        if args.results_dir is not None:
            write_files(args.results_dir, {suite: results[suite].files for suite in suites})
        for suite, path in outputs.items():
            run.write_metrics(path, results[suite].metrics, results[suite].seconds, suite)


def write_predictions(path: Path, result: SuiteResult) -> None:
    """Every pair's predicted and gold score per set, and every item's score, as one .npz
    (written atomically)."""
    arrays = {
        f"{name}/{kind}": values
        for name, scored in result.pairs.items()
        for kind, values in zip(("predicted", "gold"), scored, strict=True)
    } | result.per_item
    with atomic_path(path) as tmp, tmp.open("wb") as handle:
        np.savez(handle, **arrays)


def write_files(folder: Path, files: dict[str, dict[str, bytes]]) -> None:
    """Each suite's own result files under `folder/<suite>/` (the folder written atomically;
    empty where no suite has any)."""
    with atomic_path(folder, folder=True) as tmp:
        tmp.mkdir(exist_ok=True)
        for suite, found in files.items():
            for name, data in found.items():
                path = tmp / suite / name
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_bytes(data)


if __name__ == "__main__":
    run_stage(main)
