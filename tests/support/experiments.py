"""An experiment's results made up in memory (`fake_experiment`) and written as the pipeline lays
them out (`write_experiment`), for the compare, summary and leaderboard tests."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import yaml
from scipy.stats import spearmanr

from sentemb.config import load_params
from sentemb.io import write_json
from sentemb.registry import SUITES
from sentemb.report.summary import scores
from sentemb.results.runs import SCORES, TFIDF, UNTRAINED, Experiment
from sentemb.review.paired import pair_tasks

from support import REPO


def fake_experiment(method: str, seeds: list[int], noise: int, sizes: int = 0) -> Experiment:
    """An experiment in memory: two STS tasks (STS12 of two subsets, STS-B), one Chinese set and
    two own sets (`mine`: STS; `faq`: reranking, 25 items), scores computed from synthetic
    predictions with noise `noise / 10` (`sizes` adds pairs to every set: other test pairs)."""
    params = load_params(REPO / "params.yaml")
    params.update(method=method, seeds=seeds)
    params["compare"]["resamples"] = 50
    params["eval"]["own"] = [
        {"name": "mine", "kind": "sts", "path": "data/own/mine.tsv"},
        {"name": "faq", "kind": "reranking", "path": "data/own/faq.jsonl"},
    ]
    sets = {
        "sts": {"STS12/a": 30, "STS12/b": 20, "STSBenchmark": 40},
        "chinese": {"ATEC": 30},
        "own": {"mine": 25},
    }
    files: list[dict] = []
    predictions: dict[str, list[dict]] = {s: [] for s in sets}
    for seed in seeds:
        rng = np.random.default_rng(seed)
        run: dict = {s: {"avg": 50.0} for s in SUITES if s != "own"}
        for suite, set_sizes in sets.items():
            arrays = {}
            for name, size in set_sizes.items():
                gold = np.random.default_rng(size).uniform(0, 5, size + sizes)
                arrays[f"{name}/gold"] = gold
                arrays[f"{name}/predicted"] = gold / 5 + rng.normal(0, noise / 10, size + sizes)
            predictions[suite].append(arrays)
            tasks = pair_tasks({method: [arrays]})
            run[suite] = {
                t: 100 * spearmanr(task.predicted[method][0], task.gold).statistic
                for t, task in tasks.items()
            }
            if suite != "own":
                run[suite]["avg"] = float(np.mean(list(run[suite].values())))
        items = np.clip(0.5 + rng.normal(0, noise / 10, 25), 0, 1) * 100
        predictions["own"][-1]["faq/items"] = items
        run["own"] |= {"faq": float(items.mean()), "faq/map": float(items.mean())}
        run["sts"]["repal"] = {"avg": run["sts"]["avg"] + seed % 2}
        run["train"] = {"sentences": 100, "autocast": "bf16", "seconds": 1.0}
        run["refine"] = {"fit_on": "corpus"}
        run["analysis"] = {
            "alignment": 0.1 * noise,
            "uniformity": -2.0 - noise,
            "inter_layer": [0.9, 0.8],
            "token_wise": [0.1, 0.2, 0.3],
        }
        files.append(run)
    curves = {"loss": [{"step": 1, "loss": 1.0}], "dev": [{"step": 1, "dev": 80.0}]}
    singles = {row: {s: {"avg": 40.0} for s in SUITES} for row in (UNTRAINED, TFIDF)}
    for row in singles.values():
        row["own"] = {"mine": 30.0, "faq": 35.0}
    before = {"alignment": 0.05, "uniformity": -1.5, "inter_layer": [1, 1], "token_wise": [0, 0, 0]}
    return Experiment(method, params, method, seeds, files, predictions, curves, singles, before)


def write_experiment(root: Path, experiment: Experiment) -> None:
    """`experiment` as the pipeline lays it out under `root` (params.yaml included)."""
    (root / "params.yaml").write_text(yaml.safe_dump(experiment.params, sort_keys=False))
    for seed, files in zip(experiment.seeds, experiment.files, strict=True):
        for name, metrics in files.items():
            write_json(root / "metrics" / "runs" / str(seed) / f"{name}.json", metrics)
        for kind in ("loss", "dev"):
            write_json(
                root / "plots" / "runs" / str(seed) / f"{kind}_curve.json", experiment.curves[kind]
            )
    for suite, per_seed in experiment.predictions.items():
        for seed, arrays in zip(experiment.seeds, per_seed, strict=True):
            folder = root / "predictions" / str(seed)
            folder.mkdir(parents=True, exist_ok=True)
            np.savez(folder / f"{suite}.npz", **arrays)
    for row, folder in ((UNTRAINED, "reference"), (TFIDF, "tfidf")):
        for suite, metrics in experiment.singles[row].items():
            write_json(root / "metrics" / folder / f"{suite}.json", metrics)
    write_json(root / "metrics" / "reference" / "analysis.json", experiment.before)
    write_json(root / SCORES, scores(experiment))  # what stage summary commits
