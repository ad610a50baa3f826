"""Stage `evaluate`: score one encoder on one suite and write its metrics JSON.

    python stages/evaluate.py --suite sts --model sentence-transformers/all-MiniLM-L6-v2 --out F

works outside DVC too. `--model tfidf` scores the TF-IDF bag-of-words baseline. With
`--refined DIR` (a refine stage output) the suite is also scored after each refinement fitted
there, and those metrics go beside the plain ones under the refinement's name (`repal`,
`whitening`); every sentence is encoded once for all of them. Datasets missing from `--data` are
skipped and listed under `skipped` with the reason.
"""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

from sentemb.cli import run_stage
from sentemb.config import load_params, section
from sentemb.encoder import ModelConfig
from sentemb.evaluation.base import SentenceEncoder
from sentemb.evaluation.suites import SUITES, build_evaluator, load_encoder, model_names
from sentemb.io import write_json
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
    args = parser.parse_args()
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
        result: dict = dict(metrics)
        if evaluator.skipped:
            result["skipped"] = evaluator.skipped
        if args.refined is not None:
            config, fitted, idf = load_refinement(args.refined)
            if args.suite == "retrieval" and "zh" not in raw:
                raw["zh"] = raw["en"]  # the Chinese sets still take their own fits
            refined = {
                language: refinements(
                    config, fitted, idf, encoder, mask_token(encoder), language == "zh"
                )
                for language, encoder in raw.items()
            }
            for name in config.methods if args.suite in config.suites else []:
                result[name] = evaluator(*(r[name] for r in refined.values()))
        write_json(args.out, result)
        run.log_metrics({k: v for k, v in flatten(result).items() if "skipped" not in k})
        run.log_artifact(args.out)
    log.info("%s: %s", args.suite, {k: round(v, 2) for k, v in metrics.items() if "/" not in k})


def mask_token(encoder: CachedEncoder) -> str | None:
    """The mask token of a neural encoder's tokenizer (None for TF-IDF or a tokenizer without)."""
    return getattr(getattr(encoder.encoder, "tokenizer", None), "mask_token", None)


if __name__ == "__main__":
    run_stage(main)
