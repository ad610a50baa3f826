"""Stage `compare`: seeds aggregated, methods tested against the first one, report and plots.

Reads every run of `methods` x `seeds` (metrics/runs/<method>-<seed>/, predictions/..., the
training curves in plots/runs/...) and the reference rows (metrics/reference, metrics/tfidf);
writes `metrics/compare.json` (mean/std/n per method, suite and task; the paired tests; the
stage's `seconds`), `reports/summary.md` and the plots in `plots/compare/` (training curves,
alignment-uniformity, cosine density per gold bin on STS-B, inter-layer and token-wise
similarity). The work is `sentemb.report.compare`.
"""

from __future__ import annotations

import logging

from sentemb.cli import Parser, run_stage
from sentemb.config import load_params, run_plan
from sentemb.io import atomic_path, check_folder, check_output
from sentemb.report.compare import Folders, compare, load
from sentemb.tracking import mlflow_run

log = logging.getLogger("compare")


def parser() -> Parser:
    defaults = Folders()
    parser = Parser(__doc__)
    parser.input("--params", default="params.yaml", folder=False)
    for name in ("runs", "predictions", "curves", "reference", "tfidf"):
        parser.input(f"--{name}", default=str(getattr(defaults, name)), folder=True)
    parser.output("--metrics", default="metrics/compare.json")
    parser.output("--report", default="reports/summary.md")
    parser.outputs("--plots", default="plots/compare")
    return parser


def main() -> None:
    args = parser().parse_args()
    for output in (args.metrics, args.report):  # refused now, not after the bootstrap
        check_output(output)
    check_folder(args.plots)
    params = load_params(args.params)
    methods, seeds = run_plan(params)
    runs = load(
        params, Folders(args.runs, args.predictions, args.curves, args.reference, args.tfidf)
    )
    tracked = {"methods": methods, "seeds": seeds, "compare": params.get("compare", {})}
    with mlflow_run("compare", tracked, run_name="compare") as run:
        comparison = compare(runs, args.plots)
        with atomic_path(args.report) as tmp:
            tmp.write_text(comparison.text, encoding="utf-8")
        run.write_metrics(args.metrics, comparison.result)
        for path in (args.report, args.plots):
            run.log_artifact(path)
    log.info("wrote %s", args.report)


if __name__ == "__main__":
    run_stage(main)
