"""Is B better than A? Paired tests between two revisions or experiments, as Markdown for a PR.

    python -m sentemb.compare main                  # main against the workspace
    python -m sentemb.compare main HEAD             # two commits (or branches, tags)
    python -m sentemb.compare main dclr-exp         # a DVC experiment, by name
    python -m sentemb.compare main HEAD --tasks     # every task, not only the suite averages

Each side is one experiment (its method x its seeds), read from git and the DVC cache (or a
remote): the per-seed metrics, the pair suites' per-pair scores and the reference rows. Per
suite average (and task, with `--tasks`), plain and with each refinement: the difference of the
seed means, the paired bootstrap over the test pairs (STS, Chinese) and the paired t-test over
seeds, and a verdict where |Δ| below `compare.noise` (of B's params) is `noise`. When a side's
predictions are in neither the cache nor a remote, the error says which `dvc` command gets them.
"""

from __future__ import annotations

from pathlib import Path

from sentemb.cli import Parser, points, run_stage
from sentemb.config import UserError, section
from sentemb.report.compare import compare
from sentemb.report.markdown import comparison
from sentemb.report.runs import Experiment, folder_reader, load, revision_reader
from sentemb.report.stats import CompareConfig

WORKSPACE = "workspace"


def resolve(name: str, repo: Path) -> str:
    """The commit of `name`: a git revision, else a DVC experiment's name; else an error."""
    from dvc.repo import Repo
    from dvc.repo.experiments.utils import resolve_name

    with Repo(str(repo)) as dvc:
        try:
            return dvc.scm.resolve_rev(name)
        except Exception:  # scmrepo's RevError: not a git revision
            ref = resolve_name(dvc.scm, [name])[name]
            if ref is None:
                raise UserError(
                    f"{name}: neither a git revision nor a DVC experiment of this repository "
                    "(`dvc exp list` shows the experiments)"
                ) from None
            return dvc.scm.get_ref(str(ref))


def experiment(name: str, repo: Path) -> Experiment:
    """The experiment of revision `name` (`workspace`: the working folder)."""
    if name == WORKSPACE:
        return load(folder_reader(repo), name)
    return load(revision_reader(resolve(name, repo), repo, name), name)


def parser() -> Parser:
    parser = Parser(__doc__)
    parser.revision("a_rev", help="the baseline: a revision or experiment")
    parser.revision("b_rev", nargs="?", default=WORKSPACE, help="default: the workspace")
    parser.add_argument("--tasks", action="store_true", help="every task, not only averages")
    parser.add_argument("--noise", type=points, help="score points (default compare.noise)")
    return parser


def main() -> None:
    args = parser().parse_args()
    repo = Path()
    old, new = experiment(args.a_rev, repo), experiment(args.b_rev, repo)
    if args.a_rev == args.b_rev:
        raise UserError(f"{args.a_rev}: compared with itself")
    config = section(new.params, "compare", CompareConfig)
    if args.noise is not None:
        config = CompareConfig(**{**config.__dict__, "noise": args.noise})
    results = compare({args.a_rev: old, args.b_rev: new}, args.a_rev, config)
    print(comparison(old, new, results[args.b_rev], config, args.tasks))


if __name__ == "__main__":
    run_stage(main)
