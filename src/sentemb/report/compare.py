"""Experiments compared with a baseline experiment: the paired tests behind `sentemb.compare` and
the leaderboard.

A pair suite (scored by Spearman over pairs: STS, Chinese, own STS sets) gets the paired
bootstrap over its test pairs (every experiment scored on the same resampled pairs,
`stats.bootstrap_scores`), an own reranking or retrieval set the paired bootstrap over its items
(`stats.bootstrap_items`), and each the paired t-test over seeds; the other columns and every
refinement, whose per-item scores are not kept, the paired t-test over seeds. Seeds pair by
value: experiments are compared on the seeds they share. A |Δ mean| below `compare.noise` is
`noise` whatever the tests say. Where a side has no predictions (`Experiment.predictions_missing`)
every row rests on the t-test over seeds. Each result says its test (`TESTS`).
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from sentemb.config import ConfigError
from sentemb.evaluation.base import ITEMS
from sentemb.registry import SUITES
from sentemb.report.markdown import REFINED
from sentemb.report.runs import Experiment
from sentemb.report.stats import (
    CompareConfig,
    bootstrap,
    paired_comparison,
    seed_test,
)

Result = dict[str, float | bool | str | None]
TESTS = ("bootstrap", "seeds")  # what a result's verdict rests on: the test pairs, or the seeds


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
    (significant below 1 - `confidence`); no bootstrap interval."""
    result: dict[str, Result] = {}
    for column in [c for c in scores if c in baseline]:
        difference = float(np.mean(scores[column]) - np.mean(baseline[column]))
        p = seed_test(scores[column], baseline[column])
        result[column] = {
            "difference": difference,
            "low": None,
            "high": None,
            "significant": p is not None and p < 1.0 - confidence,
            "below_noise": abs(difference) < noise,
            "p_seeds": p,
            "test": "seeds",
        }
    return result


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
