"""The paired tests between experiments, and the one noise rule: what `sentemb.review.compare`
and the leaderboard rest their verdicts on.

- A paired bootstrap over the test pairs of the difference in Spearman (Efron & Tibshirani, 1993,
  percentile interval; paired as in Koehn, 2004: both runs are scored on the same resampled
  pairs). Each replicate resamples every task's pairs with replacement, within each subset for
  the pooled STS12-16 (the "all" setting keeps its subsets' sizes), and scores each run by its
  mean Spearman over seeds; the suite average is the mean of the tasks' differences within a
  replicate. An own reranking or retrieval set is resampled over its items (queries). Where the
  interval covers 0 there is no significant difference at that confidence.
- A paired t-test over seeds (seed i of one run against seed i of the other), for every column;
  it decides where there is no bootstrap: the columns without per-item scores (transfer,
  retrieval, every refinement), and a side whose predictions are missing
  (`Experiment.predictions_missing`). Each result names its test (`TESTS`); where neither can
  run (one shared seed and no predictions), it rests on none and its verdict says `untested`.
- A difference of less than `compare.noise` score points is noise whatever the tests say
  (`below_noise`): the same run on another CPU, bf16 kernel or GPU moves scores by up to about
  that much (docs/protocol.md, "Which results are bit-identical, and noise"). Seeds pair by
  value: experiments are compared on the seeds they share.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
from scipy.stats import rankdata, ttest_rel

from sentemb.config import ConfigError
from sentemb.evaluation.base import ITEMS
from sentemb.registry import SUITES
from sentemb.report.markdown import REFINED
from sentemb.report.stats import CompareConfig
from sentemb.results.runs import Experiment

NO_DIFFERENCE = "no significant difference"
NOISE = "noise"
UNTESTED = "untested"
CHUNK = 100  # bootstrap replicates scored at once (bounds memory on the 20k-pair sets)
Result = dict[str, float | bool | str | None]
# what a result's verdict rests on: the test pairs, the seeds, or none (one shared seed, or no
# spread in the seeds' differences, and no predictions: no test could run)
TESTS = ("bootstrap", "seeds", "none")


def below_noise(difference: float, noise: float) -> bool:
    """The one noise rule: a |Δ| under `noise` score points (`compare.noise`) is noise,
    whatever a test says."""
    return abs(difference) < noise


def verdict(result: Mapping[str, Any]) -> str:
    """`noise` below the noise level; `untested` where no test could run (its `test` is
    `none`); else whether the result's test (the bootstrap interval excludes 0, or the t-test's
    p < 1 - confidence) finds a difference."""
    if result["below_noise"]:
        return NOISE
    if result.get("test") == "none":
        return UNTESTED
    return "significant" if result["significant"] else NO_DIFFERENCE


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
) -> dict[str, Result]:
    """Per column of `replicates` (per method, each column's bootstrap replicates: over test
    pairs, `bootstrap_scores`, or over a set's items): the difference of the seed means (from
    the per-seed scores `per_seed[m][column]`), the bootstrap interval of the difference,
    whether it excludes 0, whether the difference is below `noise` (score points), and the
    paired t-test over seeds."""
    result: dict[str, Result] = {}
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
            "below_noise": below_noise(difference, noise),
            "p_seeds": seed_test(scores, reference),
            "test": "bootstrap",
        }
    return result


def on_seeds(experiment: Experiment, seeds: list[int]) -> Experiment:
    """`experiment` restricted to `seeds` (a subset of its own), in the order of `seeds`: every
    experiment restricted to one list pairs seed with seed, whatever order its params list."""
    keep = [experiment.seeds.index(seed) for seed in seeds]
    return replace(
        experiment,
        seeds=[experiment.seeds[i] for i in keep],
        files=[experiment.files[i] for i in keep],
        predictions={s: [p[i] for i in keep] for s, p in experiment.predictions.items()},
    )


def shared_seeds(experiments: dict[str, Experiment]) -> dict[str, Experiment]:
    """Every experiment on the seeds they all have, in ascending order (the tests' sums do not
    depend on which side lists its seeds first); none in common is an error."""
    common = sorted(set.intersection(*(set(e.seeds) for e in experiments.values())))
    if not common:
        seeds = {label: e.seeds for label, e in experiments.items()}
        raise ConfigError(f"seeds: the experiments share no seed, so none pairs: {seeds}")
    return {label: on_seeds(e, common) for label, e in experiments.items()}


def test_items(arrays: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """What a predictions file says of its test items: each set's gold scores, and the count of
    the items of a set scored over items."""
    gold = {k: v for k, v in arrays.items() if k.endswith("/gold")}
    return gold | {k: np.array(len(v)) for k, v in arrays.items() if k.endswith(f"/{ITEMS}")}


def check_pairs(experiments: dict[str, Experiment]) -> None:
    """The pair suites' test pairs (each set's gold scores, each item set's count) are the same
    in every experiment: otherwise one error naming the experiment and the suite (no paired test
    is possible)."""
    labels = list(experiments)
    first = experiments[labels[0]]
    for suite, per_seed in first.predictions.items():
        gold = test_items(per_seed[0])
        for label in labels[1:]:
            theirs = test_items(experiments[label].predictions.get(suite, [{}])[0])
            if gold.keys() != theirs.keys() or not all(
                np.array_equal(gold[k], theirs[k]) for k in gold
            ):
                raise ConfigError(
                    f"{label}: its {suite} test pairs differ from {labels[0]}'s (other "
                    f"eval.{suite} tasks or samples, or other data): no paired test is possible"
                )


def seed_comparison(
    scores: dict[str, list[float]],
    baseline: dict[str, list[float]],
    confidence: float,
    noise: float,
) -> dict[str, Result]:
    """Per column both share: the difference of the seed means and the paired t-test over seeds
    (significant below 1 - `confidence`); no bootstrap interval. Where the t-test is undefined
    (one shared seed, or differences without spread) the result rests on no test."""
    result: dict[str, Result] = {}
    for column in [c for c in scores if c in baseline]:
        difference = float(np.mean(scores[column]) - np.mean(baseline[column]))
        p = seed_test(scores[column], baseline[column])
        result[column] = {
            "difference": difference,
            "low": None,
            "high": None,
            "significant": p is not None and p < 1.0 - confidence,
            "below_noise": below_noise(difference, noise),
            "p_seeds": p,
            "test": "seeds" if p is not None else "none",
        }
    return result


def one_sided(old: Experiment, new: Experiment) -> list[str]:
    """What a comparison of `old` and `new` cannot test, so lists: a row (suite, refinement) or
    a column (a task, an own set) that only one side scored, and a training corpus that
    differs (another `train.corpus`, or another count of sentences trained on)."""
    found = []
    for row in (r for suite in SUITES for r in (suite, *(f"{suite}/{x}" for x in REFINED))):
        scored = {e.label: e.scores(row) or {} for e in (old, new)}
        for side, other in ((old, new), (new, old)):
            only = [c for c in scored[side.label] if c not in scored[other.label]]
            if only and not scored[other.label]:
                found.append(f"`{row}`: scored by `{side.label}` only")
            elif only:
                found.append(f"`{row}` {', '.join(only)}: scored by `{side.label}` only")
    corpora = {
        e.label: (
            e.params.get("train", {}).get("corpus"),
            "/".join(sorted({str(f["train"].get("sentences")) for f in e.files})),
        )
        for e in (old, new)
    }
    if corpora[old.label] != corpora[new.label]:
        found.append(
            "trained on another corpus: "
            + "; ".join(f"`{label}` {c} ({n} sentences)" for label, (c, n) in corpora.items())
        )
    return found


def compare(
    experiments: dict[str, Experiment], baseline: str, config: CompareConfig
) -> dict[str, dict[str, dict[str, Result]]]:
    """Each experiment but `baseline` against it: per row (`sts`, `sts/repal`, ...) and column,
    the difference of the seed means and its tests, on the seeds that pair shares (a third
    experiment's seeds change no pair's tests)."""
    return {
        label: compare_pair(experiments[baseline], experiment, baseline, label, config)
        for label, experiment in experiments.items()
        if label != baseline
    }


def compare_pair(
    baseline: Experiment, other: Experiment, base_label: str, label: str, config: CompareConfig
) -> dict[str, dict[str, Result]]:
    """`other` (`label`) against `baseline` (`base_label`) on their shared seeds and pairs."""
    pair = shared_seeds({base_label: baseline, label: other})
    both = all(e.predictions_missing is None for e in pair.values())
    if both:
        check_pairs(pair)
    results: dict[str, dict[str, Result]] = {}
    for suite in SUITES:
        predictions = {name: e.predictions.get(suite, []) for name, e in pair.items()}
        replicates = (
            bootstrap(predictions, config.resamples, config.seed)
            if both
            else {name: {} for name in pair}
        )
        for row in (suite, *(f"{suite}/{r}" for r in REFINED)):
            scores = {name: e.scores(row) for name, e in pair.items()}
            if not scores[base_label] or not scores[label]:
                continue
            results[row] = seed_comparison(
                scores[label], scores[base_label], config.confidence, config.noise
            )
            if replicates[label] and row == suite:  # the bootstrap decides where there is one
                results[row] |= paired_comparison(
                    replicates, scores, label, base_label, config.confidence, config.noise
                )
    return results
