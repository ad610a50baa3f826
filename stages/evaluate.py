"""Stage `evaluate`: score one encoder on one suite and write its metrics JSON.

    python stages/evaluate.py --suite sts --model sentence-transformers/all-MiniLM-L6-v2 --out F

works outside DVC too. `--model tfidf` scores the TF-IDF bag-of-words baseline. With
`--refined DIR` (a refine stage output) the suite is also scored after each refinement fitted
there, and those metrics go beside the plain ones under the refinement's name (`repal`,
`whitening`); every sentence is encoded once for all of them. `--predictions F.npz` keeps the
plain model's score and the gold score of every pair of a suite scored by Spearman (sts,
chinese) as arrays `<set>/predicted`, `<set>/gold`. Datasets missing from `--data` are skipped
and listed under `skipped` with the reason.
"""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

import numpy as np

from sentemb.cli import run_stage
from sentemb.config import ConfigError, load_params, section
from sentemb.encoder import ModelConfig
from sentemb.evaluation.base import SentenceEncoder
from sentemb.evaluation.suites import (
    PAIR_SUITES,
    SUITES,
    build_evaluator,
    load_encoder,
    model_names,
)
from sentemb.io import atomic_path, write_json
from sentemb.refine import CachedEncoder, load_refinement, refinements
from sentemb.tracking import flatten, mlflow_run

log = logging.getLogger("evaluate")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--suite", choices=SUITES, required=True)
    parser.add_argument("--model", help="HF name, local folder or 'tfidf' (default: params)")
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--data", default="data/raw", type=Path)
    parser.add_argument("--params", default="params.yaml")
    parser.add_argument("--refined", type=Path, help="a refine stage output folder")
    parser.add_argument("--predictions", type=Path, help="an .npz file for every pair's scores")
    args = parser.parse_args()
    if args.refined is not None and args.model == "tfidf":
        raise ConfigError("--refined: the TF-IDF baseline is never refined (no mask token)")
    if args.predictions is not None and args.suite not in PAIR_SUITES:
        raise ConfigError(f"--predictions: only for the suites {list(PAIR_SUITES)}")
    params = load_params(args.params)
    model, chinese_model = model_names(params, args.model)
    batch_size = section(params, "model", ModelConfig).batch_size
    evaluator = build_evaluator(args.suite, params, args.data, batch_size)
    tracked = {"model": model, "eval": {args.suite: params.get("eval", {}).get(args.suite, {})}}
    with mlflow_run(f"evaluate@{args.suite}", tracked, run_name=f"{args.suite}:{model}") as run:
        raw: dict[str, SentenceEncoder] = {}
        if args.suite != "chinese":
            raw["en"] = load_encoder(model, "en", params, args.data)
        if args.suite == "chinese" or (
            args.suite == "retrieval" and (chinese_model != model or model == "tfidf")
        ):
            raw["zh"] = load_encoder(chinese_model, "zh", params, args.data)
        if args.refined is not None:  # plain and refined scoring share one encode per sentence
            raw = {language: CachedEncoder(encoder) for language, encoder in raw.items()}
        metrics = evaluator(*raw.values())
        pairs = dict(evaluator.pairs)
        result: dict = dict(metrics)
        if evaluator.skipped:
            result["skipped"] = evaluator.skipped
        if args.refined is not None:
            config, fitted, idf = load_refinement(args.refined)
            if args.suite == "retrieval" and "zh" not in raw:
                raw["zh"] = raw["en"]  # the Chinese sets still take their own fits
            refined = {
                language: refinements(
                    config, fitted, idf, encoder, encoder.mask_token, language == "zh"
                )
                for language, encoder in raw.items()
            }
            for name in config.methods if args.suite in config.suites else []:
                result[name] = evaluator(*(r[name] for r in refined.values()))
        if args.predictions is not None:
            write_predictions(args.predictions, pairs)
        write_json(args.out, result)
        run.log_metrics({k: v for k, v in flatten(result).items() if "skipped" not in k})
        run.log_artifact(args.out)
    log.info("%s: %s", args.suite, {k: round(v, 2) for k, v in metrics.items() if "/" not in k})


def write_predictions(path: Path, pairs: dict[str, tuple[np.ndarray, np.ndarray]]) -> None:
    """Every pair's predicted and gold score, per set, as one .npz (written atomically)."""
    arrays = {
        f"{name}/{kind}": values
        for name, scored in pairs.items()
        for kind, values in zip(("predicted", "gold"), scored, strict=True)
    }
    with atomic_path(path) as tmp, tmp.open("wb") as handle:
        np.savez(handle, **arrays)


if __name__ == "__main__":
    run_stage(main)
