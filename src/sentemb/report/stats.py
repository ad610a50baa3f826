"""Statistics over seeds and between two runs (`sentemb.compare`, the leaderboard, `summary`).

- Per run and task: mean ± sample standard deviation over seeds.
- Between a run and a baseline run (SimCSE's, or revision A's): a paired bootstrap over the test
  pairs of the difference in Spearman (Efron & Tibshirani, 1993, percentile interval; paired as
  in Koehn, 2004: both runs are scored on the same resampled pairs). Each replicate resamples
  every task's pairs with replacement, within each subset for the pooled STS12-16 (the "all"
  setting keeps its subsets' sizes), and scores each run by its mean Spearman over seeds; the
  suite average is the mean of the tasks' differences within a replicate. Where the interval
  covers 0 there is no significant difference at that confidence.
- A paired t-test over seeds (seed i of one run against seed i of the other).
- A difference of less than `compare.noise` score points is noise whatever the tests say: the
  same run on another CPU, bf16 kernel or GPU moves scores by up to about that much (README).
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated

import numpy as np
from scipy.stats import rankdata, ttest_rel

from sentemb.config import NonNegative, Range, Seed
from sentemb.evaluation.base import ITEMS

NO_DIFFERENCE = "no significant difference"
NOISE = "noise"
CHUNK = 100  # bootstrap replicates scored at once (bounds memory on the 20k-pair sets)


@dataclass
class CompareConfig:
    """Params section `compare`."""

    resamples: Annotated[int, Range(1, 100_000, why="more only costs time")] = 1000
    confidence: Annotated[float, Range(0, 1, open_low=True, open_high=True)] = 0.95
    seed: Seed = 0
    # gold-score bin edges of the STS-B cosine density plot
    bins: list[Annotated[float, Range(0, 5)]] = field(
        default_factory=lambda: [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]
    )
    noise: NonNegative = 0.07  # score points; docs/protocol.md: which results are bit-identical

    def validate(self) -> list[str]:
        problems = []
        if len(self.bins) < 2 or any(b >= c for b, c in itertools.pairwise(self.bins)):
            problems.append(f"bins: must be at least 2 increasing edges, got {self.bins}")
        return problems


def mean_std(values: Sequence[float]) -> dict[str, float]:
    """Mean and sample standard deviation (ddof 1; 0 for a single value) and the count."""
    array = np.asarray(values, dtype=np.float64)
    std = float(array.std(ddof=1)) if len(array) > 1 else 0.0
    return {"mean": float(array.mean()), "std": std, "n": len(array)}


@dataclass
class PairTask:
    """One task's test pairs: gold scores, the subset of each pair (resampling strata) and the
    predicted scores of every method, one array per seed in seed order."""

    gold: np.ndarray
    strata: np.ndarray
    predicted: dict[str, list[np.ndarray]] = field(default_factory=dict)


def pair_tasks(predictions: dict[str, list[dict[str, np.ndarray]]]) -> dict[str, PairTask]:
    """Group `<set>/predicted` and `<set>/gold` arrays into tasks.

    `predictions[method][i]` maps the array names of an evaluate `--predictions` file (seed i) to
    arrays. A set `STS12/MSRpar` belongs to task `STS12`; sets without '/' are their own task.
    Items' scores (`<set>/items`) are no pairs (`item_tasks`).
    """
    tasks: dict[str, PairTask] = {}
    for method, per_seed in predictions.items():
        for arrays in per_seed:
            sets = sorted({n.rsplit("/", 1)[0] for n in arrays if not n.endswith(f"/{ITEMS}")})
            for task_name in dict.fromkeys(s.split("/")[0] for s in sets):
                members = [s for s in sets if s.split("/")[0] == task_name]
                predicted = np.concatenate([arrays[f"{s}/predicted"] for s in members])
                if task_name not in tasks:
                    gold = np.concatenate([arrays[f"{s}/gold"] for s in members])
                    strata = np.repeat(
                        np.arange(len(members)), [len(arrays[f"{s}/gold"]) for s in members]
                    )
                    tasks[task_name] = PairTask(gold, strata)
                tasks[task_name].predicted.setdefault(method, []).append(predicted)
    return tasks


def centred_ranks(values: np.ndarray) -> np.ndarray:
    """Each row's ranks (ties averaged) minus their mean."""
    ranks = rankdata(values, axis=1)
    return ranks - ranks.mean(axis=1, keepdims=True)


def spearman_rows(predicted: np.ndarray, gold_ranks: np.ndarray) -> np.ndarray:
    """Spearman x 100 of each row of `predicted` with the same row of `gold_ranks` (centred)."""
    ranks = centred_ranks(predicted)
    products = (ranks * gold_ranks).sum(axis=1)
    return 100.0 * products / np.sqrt((ranks * ranks).sum(axis=1) * (gold_ranks**2).sum(axis=1))


def resample_indices(strata: np.ndarray, replicates: int, rng: np.random.Generator) -> np.ndarray:
    """(replicates, n) pair indices, each stratum resampled with replacement within itself."""
    columns = []
    for stratum in np.unique(strata):
        members = np.flatnonzero(strata == stratum)
        columns.append(members[rng.integers(0, len(members), (replicates, len(members)))])
    return np.concatenate(columns, axis=1)


def bootstrap_scores(
    tasks: dict[str, PairTask], resamples: int, seed: int
) -> dict[str, dict[str, np.ndarray]]:
    """Per method and task, each bootstrap replicate's Spearman averaged over seeds, and `avg`,
    the mean over tasks. Every method is scored on the same resampled pairs (paired)."""
    rng = np.random.default_rng(seed)
    methods = list(dict.fromkeys(m for task in tasks.values() for m in task.predicted))
    scores: dict[str, dict[str, np.ndarray]] = {m: {} for m in methods}
    for name, task in tasks.items():
        parts: dict[str, list[np.ndarray]] = {m: [] for m in task.predicted}
        for start in range(0, resamples, CHUNK):
            index = resample_indices(task.strata, min(CHUNK, resamples - start), rng)
            gold = centred_ranks(task.gold[index])
            for method, per_seed in task.predicted.items():
                parts[method].append(np.mean([spearman_rows(p[index], gold) for p in per_seed], 0))
        for method, chunks in parts.items():
            scores[method][name] = np.concatenate(chunks)
    for by_task in scores.values():
        by_task["avg"] = np.mean(list(by_task.values()), axis=0)
    return scores


def item_tasks(
    predictions: dict[str, list[dict[str, np.ndarray]]],
) -> dict[str, dict[str, list[np.ndarray]]]:
    """Per set scored as a mean over its items (`<set>/items` of a predictions file), each
    method's item scores, one array per seed in seed order."""
    tasks: dict[str, dict[str, list[np.ndarray]]] = {}
    for method, per_seed in predictions.items():
        for arrays in per_seed:
            for name, values in arrays.items():
                if name.endswith(f"/{ITEMS}"):
                    per_method = tasks.setdefault(name.rpartition("/")[0], {})
                    per_method.setdefault(method, []).append(values)
    return tasks


def bootstrap_items(
    tasks: dict[str, dict[str, list[np.ndarray]]], resamples: int, seed: int
) -> dict[str, dict[str, np.ndarray]]:
    """Per method and set, each bootstrap replicate's mean over the resampled items, averaged
    over seeds; every method is scored on the same resampled items (paired)."""
    rng = np.random.default_rng(seed)
    scores: dict[str, dict[str, np.ndarray]] = {}
    for name, per_method in tasks.items():
        size = len(next(iter(per_method.values()))[0])
        parts: dict[str, list[np.ndarray]] = {m: [] for m in per_method}
        for start in range(0, resamples, CHUNK):
            index = rng.integers(0, size, (min(CHUNK, resamples - start), size))
            for method, per_seed in per_method.items():
                parts[method].append(np.mean([items[index].mean(axis=1) for items in per_seed], 0))
        for method, chunks in parts.items():
            scores.setdefault(method, {})[name] = np.concatenate(chunks)
    return scores


def bootstrap(
    predictions: dict[str, list[dict[str, np.ndarray]]], resamples: int, seed: int
) -> dict[str, dict[str, np.ndarray]]:
    """Per method (`predictions[method][i]`: seed i's arrays of one suite), the replicates of
    `bootstrap_scores` over its pair tasks and of `bootstrap_items` over its item sets."""
    merged: dict[str, dict[str, np.ndarray]] = {method: {} for method in predictions}
    tasks = pair_tasks(predictions)
    for found in (
        bootstrap_scores(tasks, resamples, seed) if tasks else {},
        bootstrap_items(item_tasks(predictions), resamples, seed),
    ):
        for method, by_task in found.items():
            merged[method] |= by_task
    return merged


def interval(replicates: np.ndarray, confidence: float) -> tuple[float, float]:
    """The percentile interval of the replicates at `confidence`."""
    tail = (1.0 - confidence) / 2.0
    low, high = np.quantile(replicates, [tail, 1.0 - tail])
    return float(low), float(high)


def seed_test(scores: Sequence[float], baseline: Sequence[float]) -> float | None:
    """Two-sided p of the paired t-test over seeds; None with fewer than 2 seeds or no spread
    in the differences (the test is undefined)."""
    differences = np.asarray(scores) - np.asarray(baseline)
    if len(differences) < 2 or np.allclose(differences, differences[0]):
        return None
    return float(ttest_rel(scores, baseline).pvalue)


def paired_comparison(
    replicates: dict[str, dict[str, np.ndarray]],
    per_seed: dict[str, dict[str, list[float]]],
    method: str,
    baseline: str,
    confidence: float,
    noise: float,
) -> dict[str, dict[str, float | bool | str | None]]:
    """Per task and `avg` of `bootstrap_scores`: the difference of the seed means (from the
    per-seed scores `per_seed[m][task]`), the bootstrap interval of the difference, whether it
    excludes 0, whether the difference is below `noise` (score points), and the paired t-test
    over seeds."""
    result: dict[str, dict[str, float | bool | str | None]] = {}
    for task, values in replicates[method].items():
        if task not in per_seed[method] or task not in per_seed[baseline]:
            continue  # own sets: no `avg` column
        low, high = interval(values - replicates[baseline][task], confidence)
        scores, reference = per_seed[method][task], per_seed[baseline][task]
        difference = float(np.mean(scores) - np.mean(reference))
        result[task] = {
            "difference": difference,
            "low": low,
            "high": high,
            "significant": bool(low > 0 or high < 0),
            "below_noise": abs(difference) < noise,
            "p_seeds": seed_test(scores, reference),
            "test": "bootstrap",
        }
    return result


def density_bins(
    predicted: list[np.ndarray], gold: np.ndarray, edges: list[float]
) -> dict[str, np.ndarray]:
    """The pair cosines of all seeds pooled, per gold-score bin `[edge_i, edge_i+1)`; values
    below the second edge fall in the first bin and values from the last inner edge on in the
    last (PaSeR App. C's five levels of STS-B with `edges` 0..5)."""
    cosines = np.concatenate(predicted)
    index = np.digitize(np.tile(gold, len(predicted)), edges[1:-1])
    labels = [f"{low:g}-{high:g}" for low, high in itertools.pairwise(edges)]
    return {label: cosines[index == i] for i, label in enumerate(labels)}


def load_predictions(path: Path) -> dict[str, np.ndarray]:
    """The arrays of an evaluate `--predictions` file."""
    with np.load(path) as archive:
        return {name: archive[name] for name in archive.files}
