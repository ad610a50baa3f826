"""Stage `compare`: seeds aggregated, methods tested against the first one, report and plots.

Reads every run of `methods` x `seeds` (metrics/runs/<method>-<seed>/, predictions/..., the
training curves in plots/runs/...), the reference rows (metrics/reference, metrics/tfidf) and
writes `metrics/compare.json` (mean/std/n per method, suite and task; the paired tests),
`reports/summary.md` and the plots in `plots/compare/` (training curves, alignment-uniformity,
cosine density per gold bin on STS-B, inter-layer and token-wise similarity).
"""

from __future__ import annotations

import argparse
import json
import logging
from pathlib import Path

import numpy as np

from sentemb import plots
from sentemb.cli import run_stage
from sentemb.compare import (
    CompareConfig,
    bootstrap_scores,
    density_bins,
    load_predictions,
    mean_std,
    pair_tasks,
    paired_comparison,
    run_name,
)
from sentemb.config import ConfigError, load_params, run_plan, section
from sentemb.evaluation.suites import PAIR_SUITES
from sentemb.io import atomic_path, check_output, write_json
from sentemb.report import COLUMNS, REFINED, protocol, summary
from sentemb.tracking import flatten, mlflow_run

log = logging.getLogger("compare")
REFERENCE = "reference (untrained)"
BEFORE = "before training"
GEOMETRY = ("alignment", "uniformity")


def read_json(path: Path) -> dict:
    """A metrics file, or one error naming it and the stage that writes it."""
    if not path.is_file():
        raise ConfigError(
            f"{path}: not found; `dvc repro` writes it (stage params: methods, seeds)"
        )
    return json.loads(path.read_text(encoding="utf-8"))


def aggregate(files: list[dict]) -> dict[str, dict]:
    """Mean/std/n over seeds of the report's columns of one method's metrics files per suite,
    and of each refinement's (`<suite>/repal`, ...) where every seed has it."""
    result: dict[str, dict] = {}
    for suite, keys in COLUMNS.items():
        for name, pick in (
            (suite, lambda m: m),
            *((f"{suite}/{r}", lambda m, r=r: m.get(r)) for r in REFINED),
        ):
            runs = [pick(f[suite]) for f in files]
            if any(r is None for r in runs):
                continue
            result[name] = {
                k: mean_std([r[k] for r in runs]) for k in keys if all(k in r for r in runs)
            }
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--params", default="params.yaml")
    parser.add_argument("--runs", default="metrics/runs", type=Path)
    parser.add_argument("--predictions", default="predictions", type=Path)
    parser.add_argument("--curves", default="plots/runs", type=Path)
    parser.add_argument("--reference", default="metrics/reference", type=Path)
    parser.add_argument("--tfidf", default="metrics/tfidf", type=Path)
    parser.add_argument("--metrics", default="metrics/compare.json", type=Path)
    parser.add_argument("--report", default="reports/summary.md", type=Path)
    parser.add_argument("--plots", default="plots/compare", type=Path)
    args = parser.parse_args()
    check_output(args.metrics)  # refused now, not after the bootstrap
    params = load_params(args.params)
    config = section(params, "compare", CompareConfig)
    methods, seeds = run_plan(params)
    baseline = methods[0]
    runs = {m: [run_name(m, s) for s in seeds] for m in methods}
    files = {
        m: [
            {s: read_json(args.runs / r / f"{s}.json") for s in (*COLUMNS, "train", "analysis")}
            for r in names
        ]
        for m, names in runs.items()
    }
    singles = {
        REFERENCE: {s: read_json(args.reference / f"{s}.json") for s in COLUMNS},
        "TF-IDF": {s: read_json(args.tfidf / f"{s}.json") for s in COLUMNS},
    }
    predictions = {
        suite: {
            m: [load_predictions(args.predictions / r / f"{suite}.npz") for r in runs[m]]
            for m in methods
        }
        for suite in PAIR_SUITES
    }
    if "STSBenchmark/predicted" not in predictions["sts"][baseline][0]:
        raise ConfigError("eval.sts.tasks: compare's cosine density plot needs STSBenchmark")
    before = read_json(args.reference / "analysis.json")
    tracked = {"methods": methods, "seeds": seeds, "compare": params.get("compare", {})}
    with mlflow_run("compare", tracked, run_name="compare") as run:
        aggregated = {m: aggregate(f) for m, f in files.items()}
        paired: dict[str, dict] = {m: {} for m in methods[1:]}
        for suite, by_method in predictions.items() if len(methods) > 1 else ():
            tasks = pair_tasks(by_method)
            replicates = bootstrap_scores(tasks, config.resamples, config.seed)
            per_seed = {
                m: {t: [f[suite][t] for f in files[m]] for t in [*tasks, "avg"]} for m in methods
            }
            for method in methods[1:]:
                paired[method][suite] = paired_comparison(
                    replicates, per_seed, method, baseline, config.confidence, config.noise
                )
        analysis = {
            m: {k: mean_std([f["analysis"][k] for f in files[m]]) for k in GEOMETRY}
            for m in methods
        }
        result = {
            "baseline": baseline,
            "seeds": seeds,
            "methods": aggregated,
            "analysis": analysis,
            "paired": paired,
        }
        untrained = {k: mean_std([before[k]]) for k in GEOMETRY}
        sts = {m: aggregated[m]["sts"]["avg"]["mean"] for m in methods}
        write_plots(
            files,
            runs,
            predictions,
            before,
            {BEFORE: untrained} | analysis,
            sts,
            config.bins,
            args.curves,
            args.plots,
        )
        choices, deviations = protocol(params, files[baseline][0]["train"]["sentences"])
        text = summary(
            aggregated,
            singles,
            paired,
            analysis | {BEFORE: untrained},
            choices,
            deviations,
            seeds,
            config.resamples,
            config.confidence,
            config.noise,
        )
        with atomic_path(args.report) as tmp:
            tmp.write_text(text, encoding="utf-8")
        write_json(args.metrics, result)
        run.log_metrics({k: v for k, v in flatten(result).items() if isinstance(v, float)})
        for path in (args.metrics, args.report, args.plots):
            run.log_artifact(path)
    log.info("wrote %s", args.report)


def write_plots(
    files: dict[str, list[dict]],
    runs: dict[str, list[str]],
    predictions: dict[str, dict[str, list[dict[str, np.ndarray]]]],
    before: dict,
    analysis: dict[str, dict[str, dict[str, float]]],
    sts: dict[str, float],
    bins: list[float],
    curves: Path,
    out: Path,
) -> None:
    """The four comparison plots, and the alignment-uniformity points as DVC plot data
    (`analysis`: mean/std per model, before training included; `sts`: each method's STS avg)."""
    plots.method_curves(
        {
            m: {
                k: [p for r in names for p in read_json(curves / r / f"{k}_curve.json")]
                for k in ("loss", "dev")
            }
            for m, names in runs.items()
        },
        out / "training.png",
    )
    points = [
        {"model": m, **{k: v["mean"] for k, v in values.items()}, "sts": sts.get(m)}
        for m, values in analysis.items()
    ]
    write_json(out / "alignment_uniformity.json", points)
    plots.alignment_uniformity(points, out / "alignment_uniformity.png")
    panels = {
        m: density_bins(
            [p["STSBenchmark/predicted"] for p in per_seed], per_seed[0]["STSBenchmark/gold"], bins
        )
        for m, per_seed in predictions["sts"].items()
    }
    plots.cosine_density(panels, out / "cosine_density.png")
    layers = {BEFORE: before} | {
        m: {
            k: np.mean([f["analysis"][k] for f in fs], axis=0).tolist()
            for k in ("inter_layer", "token_wise")
        }
        for m, fs in files.items()
    }
    plots.layer_similarity(layers, out / "layers.png")


if __name__ == "__main__":
    run_stage(main)
