"""Stage `summary`: one experiment's seeds aggregated into its headline, report and plots.

Reads the experiment's runs (params `method` x `seeds`: metrics/runs/<seed>/, predictions/<seed>/,
the training curves in plots/runs/<seed>/) and the reference rows (metrics/reference,
metrics/tfidf); writes `metrics/summary.json` (the headline: per suite and task, mean and std
over seeds, plain and refined, and the reference rows: the only file declared as DVC metrics),
`reports/summary.md` and the plots in `plots/summary/` (training curves, alignment-uniformity,
cosine density per gold bin on STS-B, inter-layer and token-wise similarity; every number and
every stage's seconds of the seeds, committed copies of the per-seed files DVC caches). The work
is `sentemb.report.summary`; methods are compared across experiments (`sentemb.review`).
"""

from __future__ import annotations

import logging
from pathlib import Path

from sentemb.cli import Parser, run_stage
from sentemb.clock import SECONDS
from sentemb.config import load_params
from sentemb.io import atomic_path, check_folder, check_output, numbers, write_json
from sentemb.report.summary import stage_seconds, summarize
from sentemb.results.readers import folder_reader
from sentemb.results.runs import load
from sentemb.tracking import mlflow_run

log = logging.getLogger("summary")


def parser() -> Parser:
    parser = Parser(__doc__)
    parser.input("--params", default="params.yaml", folder=False)
    parser.output("--metrics", default="metrics/summary.json")
    parser.output("--report", default="reports/summary.md")
    parser.outputs("--plots", default="plots/summary")
    return parser


def main() -> None:
    args = parser().parse_args()
    for output in (args.metrics, args.report):  # refused now, not after the aggregation
        check_output(output)
    check_folder(args.plots)
    params = load_params(args.params)
    experiment = load(folder_reader(Path()), params=params)
    tracked = {"method": experiment.method, "seeds": experiment.seeds}
    tracked["compare"] = experiment.params.get("compare", {})
    with mlflow_run("summary", tracked, run_name=f"summary:{experiment.method}") as run:
        result = summarize(experiment, args.plots)
        with atomic_path(args.report) as tmp:
            tmp.write_text(result.text, encoding="utf-8")
        write_json(args.metrics, result.headline)  # no `seconds`: the headline holds scores only
        own = {"stage": "summary", "file": "summary", "seconds": round(run.seconds, 1)}
        write_json(args.plots / "seconds.json", [*stage_seconds(experiment), own])
        run.log_metrics({**numbers(result.headline), SECONDS: run.seconds})
        for path in (args.metrics, args.report, args.plots):
            run.log_artifact(path)
    log.info("wrote %s and %s", args.metrics, args.report)


if __name__ == "__main__":
    run_stage(main)
