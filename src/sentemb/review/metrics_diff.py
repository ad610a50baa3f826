"""`dvc metrics diff` with the differences below the noise level labelled `noise`.

    python -m sentemb.review.metrics_diff               # HEAD against the workspace: the headline
    python -m sentemb.review.metrics_diff main          # main against the workspace
    python -m sentemb.review.metrics_diff befd762 HEAD  # two commits
    python -m sentemb.review.metrics_diff main --all    # every number: per seed, task, subset, dev

The headline (metrics/summary.json) is the only file declared as DVC metrics; `--all` diffs
every committed number instead: each seed's scores per task and STS subset, dev scores and λs
(the records of plots/summary/scores.json, shown under the per-seed file DVC caches them in,
`metrics/runs/<seed>/<file>.json`) and every other JSON file under metrics/, read from git.

The same run moves its scores by up to about `compare.noise` points on another CPU, bf16 kernel
or GPU (docs/protocol.md, "Which results are bit-identical, and noise"), so a changed score
closer than that to the old one says nothing about the change under review. DVC cannot be
told so; this runs `dvc metrics diff --json` and prints its table (changed metrics only, as
DVC does) with a last column that says `noise` where |Δ| < `compare.noise` for a score
(Spearman, accuracy, MAP/MRR x 100). Other metrics (losses, counts, λs, alignment) are shown
without a label. Rows are in the order of their file and metric.

Either form reads the repository's root from any of its folders; a revision may be a DVC
experiment's name (`sentemb.results.revisions`). A metrics file that is not UTF-8 JSON, holds a
NaN or an infinite number, a suite score that is no score x 100, or a headline value that is no
number (which DVC would show as removed), is one error naming the revision and the file.
"""

from __future__ import annotations

import contextlib

from sentemb.cli import Parser, points, run
from sentemb.config import load_params, section
from sentemb.report.stats import CompareConfig
from sentemb.results.readers import MissingResults
from sentemb.results.revisions import WORKSPACE, commits, root
from sentemb.review.diff import (
    HEADLINE,
    changes,
    details,
    dvc_metrics_diff,
    metrics_file,
    reader,
)
from sentemb.review.render import metrics_table


def parser() -> Parser:
    parser = Parser(__doc__)
    parser.revision("a_rev", nargs="?", default="HEAD", help="old revision (default HEAD)")
    parser.revision("b_rev", nargs="?", help="new revision (default the workspace)")
    parser.add_argument("--noise", type=points, help="score points (default compare.noise)")
    parser.add_argument("--all", action="store_true", help="every metrics file under metrics/")
    parser.input("--params", folder=False, help="default: the repository's params.yaml")
    return parser


def main() -> None:
    args = parser().parse_args()
    repo = root()
    names = (args.a_rev, args.b_rev or WORKSPACE)
    old, new = commits(names, repo)
    noise = args.noise
    if noise is None:
        noise = section(load_params(args.params or repo / "params.yaml"), "compare", CompareConfig)
        noise = noise.noise
    if args.all:
        rows = details(repo, old, new, names)
    else:
        for commit, name in zip((old, new), names, strict=True):
            with contextlib.suppress(MissingResults):  # checked: DVC drops what is no number
                metrics_file(reader(repo, commit, name), HEADLINE, name)
        revisions = [commit or WORKSPACE for commit in (old, new)]  # DVC's name for it too
        rows = changes(dvc_metrics_diff(repo, revisions), *names)
    print(metrics_table(rows, noise, *names))


if __name__ == "__main__":
    run(main)
