"""Stage `evaluate`: score one encoder on one suite and write its metrics JSON.

    python stages/evaluate.py --suite sts --model sentence-transformers/all-MiniLM-L6-v2 --out F

works outside DVC too. `--model tfidf` scores the TF-IDF bag-of-words baseline. With
`--refined DIR` (a refine stage output) the suite is also scored after each refinement fitted
there, and those metrics go beside the plain ones under the refinement's name (`repal`,
`whitening`); every sentence is encoded once for all of them. `--predictions F.npz` keeps the
plain model's score and the gold score of every pair of a suite scored by Spearman (sts,
chinese) as arrays `<set>/predicted`, `<set>/gold`.

A dataset missing from `--data` is skipped, and listed under `skipped` with its reason, only when
the download manifest explains it (not obtainable, or left out of `data.datasets`); any other
absence, a suite with no task scored, vectors that cannot be scored (non-finite, or the same for
every sentence), a NaN or infinite score, and a refinement fitted on another model are each one
error, and nothing is written.
"""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

import numpy as np

from sentemb.cli import run_stage
from sentemb.config import ConfigError, load_params, section
from sentemb.encoder import ModelConfig, model_identity
from sentemb.evaluation.base import SentenceEncoder, require_complete, require_finite, scoring
from sentemb.evaluation.suites import (
    PAIR_SUITES,
    SUITES,
    build_evaluator,
    load_encoder,
    model_names,
)
from sentemb.io import atomic_path, check_output, write_json
from sentemb.refine import (
    CHINESE,
    ENGLISH,
    CachedEncoder,
    load_refinement,
    refinements,
)
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
    for output in (args.out, args.predictions):  # refused now, not after the scoring
        if output is not None:
            check_output(output)
    if args.predictions is not None and args.suite not in PAIR_SUITES:
        raise ConfigError(f"--predictions: only for the suites {list(PAIR_SUITES)}")
    params = load_params(args.params)
    model, chinese_model = model_names(params, args.model)
    if args.refined is not None and "tfidf" in (model, chinese_model):
        raise ConfigError("--refined: the TF-IDF baseline is never refined (no mask token)")
    batch_size = section(params, "model", ModelConfig).batch_size
    evaluator = build_evaluator(args.suite, params, args.data, batch_size)
    tracked = {"model": model, "eval": {args.suite: params.get("eval", {}).get(args.suite, {})}}
    with mlflow_run(f"evaluate@{args.suite}", tracked, run_name=f"{args.suite}:{model}") as run:
        names = {ENGLISH: model, CHINESE: chinese_model}
        raw: dict[str, SentenceEncoder] = {}
        if args.suite != "chinese":
            raw[ENGLISH] = load_encoder(model, "en", params, args.data)
        if args.suite == "chinese" or (
            args.suite == "retrieval" and (chinese_model != model or model == "tfidf")
        ):
            raw[CHINESE] = load_encoder(chinese_model, "zh", params, args.data)
        label = ", ".join(dict.fromkeys(names[language] for language in raw))
        if args.refined is not None:
            if args.suite == "retrieval" and CHINESE not in raw:
                raw[CHINESE] = raw[ENGLISH]  # the Chinese sets still take their own fits
            identities = {lang: model_identity(names[lang], enc) for lang, enc in raw.items()}
            config, fitted, idf = load_refinement(args.refined, identities)
            # plain and refined scoring share one encode per sentence (one cache per encoder)
            cached = {id(encoder): CachedEncoder(encoder) for encoder in raw.values()}
            raw = {language: cached[id(encoder)] for language, encoder in raw.items()}
        with scoring(label):
            metrics = evaluator(*raw.values())
        require_complete(evaluator, args.suite, metrics)
        require_finite(f"{label}, suite {args.suite}", metrics)
        pairs = dict(evaluator.pairs)
        result: dict = dict(metrics)
        for dataset, reason in evaluator.skipped.items():
            log.warning("%s: skipped: %s", dataset, reason)
        if evaluator.skipped:
            result["skipped"] = evaluator.skipped
        if args.refined is not None:
            refined = {
                language: refinements(
                    config, fitted, idf, encoder, encoder.mask_token, language == CHINESE
                )
                for language, encoder in raw.items()
            }
            for name in config.methods if args.suite in config.suites else []:
                with scoring(f"{label} + {name}"):
                    result[name] = evaluator(*(r[name] for r in refined.values()))
                require_finite(f"{label} + {name}, suite {args.suite}", result[name])
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
