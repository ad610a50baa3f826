"""Stage `refine`: fit RepAL and whitening around one encoder (no training).

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

import argparse
import itertools
import logging
from pathlib import Path

import matplotlib.pyplot as plt

from sentemb.cli import run_stage
from sentemb.config import load_params, section
from sentemb.data.readers import read_chinese, read_stsb, training_corpus
from sentemb.encoder import ModelConfig, model_identity
from sentemb.evaluation.base import require_complete, require_finite, scoring
from sentemb.evaluation.chinese import ChineseConfig, ChineseEvaluator, dataset_name
from sentemb.evaluation.retrieval import CHINESE_PAIR_SETS, RetrievalConfig
from sentemb.evaluation.suites import load_encoder, model_names
from sentemb.io import check_output, write_json
from sentemb.phrases import read_idf
from sentemb.plots import save
from sentemb.refine import (
    CHINESE,
    CHINESE_SCOPE,
    ENGLISH,
    ENGLISH_SCOPE,
    CachedEncoder,
    Fitted,
    RefineConfig,
    eigenvalue_bounds,
    fit_scope,
    partial_mask,
    save_refinement,
    unique,
)
from sentemb.tracking import flatten, mlflow_run
from sentemb.training.config import TrainConfig

log = logging.getLogger("refine")


def chinese_sets(params: dict) -> list[str]:
    """The Chinese sets scored anywhere: the Chinese suite's and retrieval's offline ones."""
    retrieval = section(params, "eval.retrieval", RetrievalConfig).offline_sets
    tasks = section(params, "eval.chinese", ChineseConfig).tasks
    return list(dict.fromkeys([*tasks, *(s for s in retrieval if s in CHINESE_PAIR_SETS)]))


def bound_plot(curve: list[dict[str, float]], path: Path, title: str) -> None:
    """RepAL Fig. 2: the eigenvalue bound (eq. 5) and STS-B dev Spearman against λ2."""
    figure, left = plt.subplots(figsize=(6, 3.5))
    lambdas = [p["lambda2"] for p in curve]
    left.plot(lambdas, [p["bound"] for p in curve], color="tab:blue", marker=".")
    left.set(xlabel="λ2 (corpus-level weight)", ylabel="upper bound of largest eigenvalue")
    right = left.twinx()
    right.plot(lambdas, [p["dev"] for p in curve], color="tab:orange", marker=".")
    right.set_ylabel("STS-B dev Spearman x 100", color="tab:orange")
    left.set_title(title)
    save(figure, path)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--model", help="HF name or local folder (default: params)")
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--metrics", required=True, type=Path)
    parser.add_argument("--plots", required=True, type=Path, help="folder for refine_bound.*")
    parser.add_argument("--data", default="data/raw", type=Path)
    parser.add_argument("--phrases", default="data/phrases", type=Path)
    parser.add_argument("--params", default="params.yaml")
    args = parser.parse_args()
    check_output(args.out, folder=True)  # refused now, not after the fitting
    check_output(args.metrics)
    params = load_params(args.params)
    config = section(params, "refine", RefineConfig)
    batch_size = section(params, "model", ModelConfig).batch_size
    model, chinese_model = model_names(params, args.model)
    corpus_name = section(params, "train", TrainConfig).corpus
    idf = read_idf(args.phrases) if "repal" in config.methods else None
    fitted: dict[str, Fitted] = {}
    metrics: dict[str, dict] = {}
    run_params = {"model": model, "refine": params.get("refine", {})}
    with mlflow_run("refine", run_params, run_name=f"refine:{model}") as run:
        english_model = load_encoder(model, "en", params, args.data)
        english = CachedEncoder(english_model)
        mask = partial_mask(config, english.mask_token, False, idf)
        corpus = None
        if config.fit_on == "corpus":
            lines = training_corpus(args.data, corpus_name)
            corpus = list(itertools.islice(lines, config.corpus_size))
        dev = read_stsb(args.data, "dev")
        with scoring(model):
            fit, metrics[ENGLISH_SCOPE], tried = fit_scope(
                english, dev, corpus, mask, config, batch_size
            )
        fitted[ENGLISH_SCOPE] = fit
        searched = "repal" in config.methods and "corpus" in config.repal.levels
        lambdas = config.repal.lambda2 if searched else [0.0]
        dev_at = {t["lambda2"]: t["dev"] for t in tried if t["lambda1"] == 0.0}
        vectors = english.encode(unique([*dev.first, *dev.second]), batch_size)
        bounds = eigenvalue_bounds(vectors, lambdas)
        curve = [
            {
                "lambda2": lam,
                "bound": bound,
                "dev": dev_at.get(lam, metrics[ENGLISH_SCOPE]["dev/none"]),
            }
            for lam, bound in zip(lambdas, bounds, strict=True)
        ]
        lowest = min(curve, key=lambda p: p["bound"])
        metrics[ENGLISH_SCOPE]["bound/argmin_lambda2"] = lowest["lambda2"]
        chinese_encoder = load_encoder(chinese_model, "zh", params, args.data)
        chinese = CachedEncoder(chinese_encoder)
        zh_mask = partial_mask(config, chinese.mask_token, True, None)
        probe = ChineseEvaluator(args.data)
        for name in chinese_sets(params):
            if not probe.available(dataset_name(name), ".valid."):
                require_complete(probe, "chinese")
                log.warning("%s: no refinement fitted: %s", name, probe.skipped[dataset_name(name)])
                continue
            valid = read_chinese(args.data, name, "valid")
            sentences = unique([*valid.first, *valid.second]) if config.fit_on == "corpus" else None
            with scoring(f"{chinese_model}, {name}"):
                fit, metrics[f"{CHINESE_SCOPE}{name}"], _ = fit_scope(
                    chinese, valid, sentences, zh_mask, config, batch_size
                )
            fitted[f"{CHINESE_SCOPE}{name}"] = fit
        require_finite(", ".join(dict.fromkeys([model, chinese_model])), metrics)
        models = {
            ENGLISH: model_identity(model, english_model),
            CHINESE: model_identity(chinese_model, chinese_encoder),
        }
        save_refinement(args.out, config, fitted, idf, models)
        write_json(args.plots / "refine_bound.json", curve)
        bound_plot(curve, args.plots / "refine_bound.png", f"RepAL eq. 5 on STS-B dev: {model}")
        write_json(args.metrics, {"fit_on": config.fit_on, **metrics})
        run.log_metrics(flatten(metrics))
        run.log_artifact(args.metrics)
    for scope, values in metrics.items():
        log.info("%s: %s", scope, {k: round(v, 3) for k, v in values.items()})


if __name__ == "__main__":
    run_stage(main)
