"""Stage `summary` as one library call: one experiment's seeds aggregated into the headline
metrics (`metrics/summary.json`), its report (`reports/summary.md`) and its plots.

The headline is what `dvc metrics diff` and `dvc exp show` show, so it holds the numbers a
reviewer compares and no more (about 84 on a method switch): per suite and task, the mean and
std over seeds of the plain scores, the mean of each refinement's (and the std of its suite
average), then the reference rows, untrained and TF-IDF, each a single run. No key names the
method, so experiments of different methods share every column. Every other number of the seeds
is committed in `plots/summary/scores.json` (the per-seed files themselves are DVC-cached, which
keeps the stages in DVC's run cache), their stages' seconds in `plots/summary/seconds.json`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from sentemb.clock import SECONDS
from sentemb.config import ConfigError, section
from sentemb.io import numbers, write_json
from sentemb.registry import SUITES
from sentemb.report import plots
from sentemb.report.markdown import REFINED, protocol, summary
from sentemb.report.plots import BEFORE
from sentemb.report.stats import CompareConfig, density_bins, mean_std
from sentemb.results.runs import PREDICTIONS, RECORD, RUNS, Experiment

GEOMETRY = ("alignment", "uniformity")
LAYERS = ("inter_layer", "token_wise")
TRAINED = "trained"  # the headline's rows of this experiment's method


@dataclass
class Summary:
    """What stage `summary` writes besides the plots: the headline and the report."""

    headline: dict[str, Any]
    text: str


# the stage that writes each per-seed metrics file
STAGE_OF = {"train": "train", "refine": "refine", "analysis": "analyze"}
STAGE_OF |= dict.fromkeys(SUITES, "evaluate")


def stage_seconds(experiment: Experiment) -> list[dict[str, Any]]:
    """plots/summary/seconds.json: the wall time each per-seed metrics file records (evaluate's
    per suite), one record each: the committed copy of the `seconds` DVC caches."""
    return [
        {"stage": f"{STAGE_OF[name]}@{seed}", "file": name, "seconds": metrics[SECONDS]}
        for seed, files in zip(experiment.seeds, experiment.files, strict=True)
        for name, metrics in files.items()
        if SECONDS in metrics
    ]


def scores(experiment: Experiment) -> list[dict[str, Any]]:
    """plots/summary/scores.json: every number of every seed's metrics files (but the stages'
    `seconds`), one record each: the committed copy of the per-seed files DVC caches."""
    return [
        dict(zip(RECORD, (seed, name, key, value), strict=True))
        for seed, files in zip(experiment.seeds, experiment.files, strict=True)
        for name, metrics in files.items()
        for key, value in numbers(metrics, lists=True).items()
        if key != SECONDS
    ]


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
            columns = declared.cls.report_columns(found[0])
            if columns:  # own sets: none when eval.own lists none
                both = [k for k in columns if all(k in r for r in found)]
                result[name] = {k: mean_std([r[k] for r in found]) for k in both}
    return result


def headline(experiment: Experiment) -> dict[str, Any]:
    """metrics/summary.json: per suite (and `<suite>/<refinement>`) and column, the trained
    method's mean and std over seeds (a refinement's columns: the mean; its `avg`: both), then
    each reference row's single-run scores."""
    trained = {
        row: {
            column: {k: stats[k] for k in ("mean", "std")}
            if "/" not in row or column == "avg"
            else {"mean": stats["mean"]}
            for column, stats in columns.items()
        }
        for row, columns in aggregate(experiment.files).items()
    }
    singles: dict[str, dict[str, Any]] = {}
    for name, suites in experiment.singles.items():
        singles[name] = {}
        for suite, metrics in suites.items():
            for row, values in (
                (suite, metrics),
                *((f"{suite}/{r}", metrics.get(r)) for r in REFINED),
            ):
                columns = [] if values is None else SUITES[suite].cls.report_columns(values)
                if columns:
                    singles[name][row] = {k: values[k] for k in columns}
    return {TRAINED: trained, **singles}


def check_tasks(experiment: Experiment) -> None:
    """Every seed's predictions of every pair suite hold the tasks of the first seed's, and its
    metrics file scores them; otherwise one error naming the seed, the tasks and the file."""
    seeds = experiment.seeds
    for suite, per_seed in experiment.predictions.items():
        expected = {name.split("/")[0] for name in per_seed[0]}
        first = f"{PREDICTIONS}/{seeds[0]}/{suite}.npz"
        for seed, arrays, files in zip(seeds, per_seed, experiment.files, strict=True):
            predicted = {name.split("/")[0] for name in arrays}
            for path, missing, extra in (
                (f"{PREDICTIONS}/{seed}/{suite}.npz", expected - predicted, predicted - expected),
                (f"{RUNS}/{seed}/{suite}.json", expected - set(files[suite]), set()),
            ):
                if missing or extra:
                    raise ConfigError(
                        f"{path}: seed {seed} has other {suite} tasks than {first} (missing: "
                        f"{', '.join(sorted(missing)) or '-'}; extra: "
                        f"{', '.join(sorted(extra)) or '-'}); every seed must be evaluated on "
                        f"the same tasks (eval.{suite}.tasks): `dvc repro` it again"
                    )


def summarize(experiment: Experiment, out: Path) -> Summary:
    """Aggregate the seeds, write the plots into `out` and return the headline and the report."""
    config = section(experiment.params, "compare", CompareConfig)
    check_tasks(experiment)
    method, files = experiment.method, experiment.files
    aggregated = aggregate(files)
    analysis = {method: {k: mean_std([f["analysis"][k] for f in files]) for k in GEOMETRY}}
    untrained = {BEFORE: {k: mean_std([experiment.before[k]]) for k in GEOMETRY}}
    write_plots(experiment, untrained | analysis, aggregated["sts"]["avg"]["mean"], config, out)
    choices, deviations = protocol(
        experiment.params,
        files[0]["train"]["sentences"],
        files[0]["refine"]["fit_on"],
        experiment.autocast,
    )
    text = summary(
        {method: aggregated},
        experiment.singles,
        per_seed(experiment),
        analysis | untrained,
        choices,
        deviations,
        experiment.seeds,
    )
    return Summary(headline(experiment), text)


def per_seed(experiment: Experiment) -> dict[int, dict[str, float]]:
    """Each seed's suite averages, plain and refined (`sts`, `sts/repal`, ...)."""
    return {
        seed: {
            name: values["avg"]
            for suite in SUITES
            for name, values in (
                (suite, files[suite]),
                *((f"{suite}/{r}", files[suite].get(r)) for r in REFINED),
            )
            if values is not None and "avg" in values
        }
        for seed, files in zip(experiment.seeds, experiment.files, strict=True)
    }


def write_plots(
    experiment: Experiment,
    analysis: dict[str, dict[str, dict[str, float]]],
    sts: float,
    config: CompareConfig,
    out: Path,
) -> None:
    """The four plots, and the alignment-uniformity points as DVC plot data (`analysis`: mean/std
    per model, before training included; `sts`: the method's STS avg)."""
    method = experiment.method
    plots.save(plots.method_curves({method: experiment.curves}), out / "training.png")
    points = [
        {
            "model": m,
            **{k: v["mean"] for k, v in values.items()},
            "sts": sts if m == method else None,
        }
        for m, values in analysis.items()
    ]
    write_json(out / "alignment_uniformity.json", points)
    write_json(out / "scores.json", scores(experiment))
    plots.save(plots.alignment_uniformity(points), out / "alignment_uniformity.png")
    per_seed = experiment.predictions["sts"]
    panels = {
        method: density_bins(
            [p["STSBenchmark/predicted"] for p in per_seed],
            per_seed[0]["STSBenchmark/gold"],
            config.bins,
        )
    }
    plots.save(plots.cosine_density(panels), out / "cosine_density.png")
    layers = {
        BEFORE: experiment.before,
        method: {
            k: np.mean([f["analysis"][k] for f in experiment.files], axis=0).tolist()
            for k in LAYERS
        },
    }
    plots.save(plots.layer_similarity(layers), out / "layers.png")
