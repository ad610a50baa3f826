"""Stage `compare` as one library call: seeds aggregated, methods tested against the first one,
the Markdown summary and the plots.

`load` reads every run of `methods` x `seeds` (metrics/runs/<method>-<seed>/, predictions/...,
the training curves in plots/runs/...) and the reference rows (metrics/reference,
metrics/tfidf); `compare` computes `metrics/compare.json` (mean/std/n per method, suite and task;
the paired tests) and `reports/summary.md`, and writes the plots (training curves,
alignment-uniformity, cosine density per gold bin on STS-B, inter-layer and token-wise
similarity).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from sentemb.config import ConfigError, run_plan, section
from sentemb.evaluation.suites import SUITES
from sentemb.io import read_json, write_json
from sentemb.report import plots
from sentemb.report.markdown import REFINED, protocol, summary
from sentemb.report.plots import BEFORE, REFERENCE, TFIDF
from sentemb.report.stats import (
    CompareConfig,
    bootstrap_scores,
    density_bins,
    load_predictions,
    mean_std,
    pair_tasks,
    paired_comparison,
    run_name,
)

GEOMETRY = ("alignment", "uniformity")
CURVES = ("loss", "dev")
RECORDS = ("train", "refine", "analysis")  # a run's metrics files besides its suites'
LAYERS = ("inter_layer", "token_wise")


@dataclass
class Folders:
    """Where `load` reads: the stage's input folders (dvc.yaml deps)."""

    runs: Path = Path("metrics/runs")
    predictions: Path = Path("predictions")
    curves: Path = Path("plots/runs")
    reference: Path = Path("metrics/reference")
    tfidf: Path = Path("metrics/tfidf")


@dataclass
class Runs:
    """Everything `compare` reads, in memory.

    `files[method][i]` maps each suite and each of `RECORDS` to seed i's metrics file;
    `predictions[suite][method][i]` holds seed i's `--predictions` arrays of a pair suite;
    `curves[method]` the seeds' loss and dev records, concatenated; `singles` the reference
    rows' metrics files per suite; `before` the untrained model's analysis; `folders` where they
    were read (named in errors)."""

    params: dict[str, Any]
    files: dict[str, list[dict[str, Any]]]
    predictions: dict[str, dict[str, list[dict[str, np.ndarray]]]]
    curves: dict[str, dict[str, list[dict]]]
    singles: dict[str, dict[str, Any]]
    before: dict[str, Any]
    folders: Folders = field(default_factory=Folders)


@dataclass
class Comparison:
    """What `compare` produces besides the plots: metrics/compare.json and the summary."""

    result: dict[str, Any]
    text: str


def existing(path: Path) -> Path:
    """`path`, or one error naming it and how it is made."""
    if not path.is_file():
        raise ConfigError(
            f"{path}: not found; `dvc repro` writes it (stage params: methods, seeds)"
        )
    return path


def read_metrics(path: Path) -> Any:
    """A metrics file, or one error naming it."""
    return read_json(existing(path))


def load(params: dict[str, Any], folders: Folders) -> Runs:
    """Every input of `compare`, or one error naming the first file that is missing."""
    methods, seeds = run_plan(params)
    runs = {m: [run_name(m, s) for s in seeds] for m in methods}
    files = {
        m: [
            {s: read_metrics(folders.runs / r / f"{s}.json") for s in (*SUITES, *RECORDS)}
            for r in names
        ]
        for m, names in runs.items()
    }
    singles = {
        REFERENCE: {s: read_metrics(folders.reference / f"{s}.json") for s in SUITES},
        TFIDF: {s: read_metrics(folders.tfidf / f"{s}.json") for s in SUITES},
    }
    predictions = {
        suite: {
            m: [
                load_predictions(existing(folders.predictions / r / f"{suite}.npz"))
                for r in runs[m]
            ]
            for m in methods
        }
        for suite, declared in SUITES.items()
        if declared.pairs
    }
    if "STSBenchmark/predicted" not in predictions["sts"][methods[0]][0]:
        raise ConfigError("eval.sts.tasks: compare's cosine density plot needs STSBenchmark")
    curves = {
        m: {
            k: [p for r in names for p in read_metrics(folders.curves / r / f"{k}_curve.json")]
            for k in CURVES
        }
        for m, names in runs.items()
    }
    before = read_metrics(folders.reference / "analysis.json")
    return Runs(params, files, predictions, curves, singles, before, folders)


def aggregate(files: list[dict]) -> dict[str, dict]:
    """Mean/std/n over seeds of the report's columns of one method's metrics files per suite,
    and of each refinement's (`<suite>/repal`, ...) where every seed has it."""
    result: dict[str, dict] = {}
    for suite, declared in SUITES.items():
        for name, pick in (
            (suite, lambda m: m),
            *((f"{suite}/{r}", lambda m, r=r: m.get(r)) for r in REFINED),
        ):
            found = [pick(f[suite]) for f in files]
            if any(r is None for r in found):
                continue
            result[name] = {
                k: mean_std([r[k] for r in found])
                for k in declared.columns
                if all(k in r for r in found)
            }
    return result


def _task_names(arrays: dict[str, np.ndarray]) -> set[str]:
    """The tasks of one `--predictions` file (`STS12/MSRpar/gold` is task `STS12`)."""
    return {name.split("/")[0] for name in arrays}


def check_tasks(runs: Runs, methods: list[str], seeds: list[int]) -> None:
    """Each run's predictions of every pair suite hold the tasks of the baseline's first run, and
    its metrics file scores them; otherwise one error naming the run, the tasks and the file."""
    folders = runs.folders
    for suite, by_method in runs.predictions.items():
        first = folders.predictions / run_name(methods[0], seeds[0]) / f"{suite}.npz"
        expected = _task_names(by_method[methods[0]][0])
        for method, (i, seed) in itertools.product(methods, enumerate(seeds)):
            run = run_name(method, seed)
            predicted = _task_names(by_method[method][i])
            scored = set(runs.files[method][i][suite])
            for path, missing, extra in (
                (
                    folders.predictions / run / f"{suite}.npz",
                    expected - predicted,
                    predicted - expected,
                ),
                (folders.runs / run / f"{suite}.json", expected - scored, set()),
            ):
                if missing or extra:
                    raise ConfigError(
                        f"{path}: {method} seed {seed} has other {suite} tasks than {first}"
                        f" (missing: {', '.join(sorted(missing)) or '-'}; extra:"
                        f" {', '.join(sorted(extra)) or '-'}); every run must be evaluated on"
                        f" the same tasks (eval.{suite}.tasks): `dvc repro` it again"
                    )


def compare(runs: Runs, out: Path) -> Comparison:
    """Aggregate, test each method against the first of `methods`, write the plots into `out`
    and return metrics/compare.json's content and the summary."""
    config = section(runs.params, "compare", CompareConfig)
    methods, seeds = run_plan(runs.params)
    baseline = methods[0]
    check_tasks(runs, methods, seeds)
    aggregated = {m: aggregate(f) for m, f in runs.files.items()}
    paired: dict[str, dict] = {m: {} for m in methods[1:]}
    for suite, by_method in runs.predictions.items() if len(methods) > 1 else ():
        tasks = pair_tasks(by_method)
        replicates = bootstrap_scores(tasks, config.resamples, config.seed)
        per_seed = {
            m: {t: [f[suite][t] for f in runs.files[m]] for t in [*tasks, "avg"]} for m in methods
        }
        for method in methods[1:]:
            paired[method][suite] = paired_comparison(
                replicates, per_seed, method, baseline, config.confidence, config.noise
            )
    analysis = {
        m: {k: mean_std([f["analysis"][k] for f in runs.files[m]]) for k in GEOMETRY}
        for m in methods
    }
    result = {
        "baseline": baseline,
        "seeds": seeds,
        "methods": aggregated,
        "analysis": analysis,
        "paired": paired,
    }
    untrained = {k: mean_std([runs.before[k]]) for k in GEOMETRY}
    sts = {m: aggregated[m]["sts"]["avg"]["mean"] for m in methods}
    write_plots(runs, {BEFORE: untrained} | analysis, sts, config.bins, out)
    first = runs.files[baseline][0]
    choices, deviations = protocol(
        runs.params, first["train"]["sentences"], first["refine"]["fit_on"]
    )
    text = summary(
        aggregated,
        runs.singles,
        paired,
        analysis | {BEFORE: untrained},
        choices,
        deviations,
        seeds,
        config.resamples,
        config.confidence,
        config.noise,
    )
    return Comparison(result, text)


def write_plots(
    runs: Runs,
    analysis: dict[str, dict[str, dict[str, float]]],
    sts: dict[str, float],
    bins: list[float],
    out: Path,
) -> None:
    """The four comparison plots, and the alignment-uniformity points as DVC plot data
    (`analysis`: mean/std per model, before training included; `sts`: each method's STS avg)."""
    plots.save(plots.method_curves(runs.curves), out / "training.png")
    points = [
        {"model": m, **{k: v["mean"] for k, v in values.items()}, "sts": sts.get(m)}
        for m, values in analysis.items()
    ]
    write_json(out / "alignment_uniformity.json", points)
    plots.save(plots.alignment_uniformity(points), out / "alignment_uniformity.png")
    panels = {
        m: density_bins(
            [p["STSBenchmark/predicted"] for p in per_seed], per_seed[0]["STSBenchmark/gold"], bins
        )
        for m, per_seed in runs.predictions["sts"].items()
    }
    plots.save(plots.cosine_density(panels), out / "cosine_density.png")
    layers = {BEFORE: runs.before} | {
        m: {k: np.mean([f["analysis"][k] for f in fs], axis=0).tolist() for k in LAYERS}
        for m, fs in runs.files.items()
    }
    plots.save(plots.layer_similarity(layers), out / "layers.png")
