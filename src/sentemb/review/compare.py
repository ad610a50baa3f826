"""Is B better than A? Paired tests between two revisions or experiments, as Markdown for a PR.

    python -m sentemb.review.compare main                  # main against the workspace
    python -m sentemb.review.compare main HEAD             # two commits (or branches, tags)
    python -m sentemb.review.compare main dclr-exp         # a DVC experiment, by name
    python -m sentemb.review.compare main HEAD --tasks     # every task, not only the suite averages

Each side is one experiment (its method x its seeds), read from git and the DVC cache (or a
remote): the per-seed metrics, the pair suites' per-pair scores and the reference rows. Per
suite average (and task, with `--tasks`), plain and with each refinement: the difference of the
seed means, the paired bootstrap over the test pairs (STS, Chinese, own sets) and the paired
t-test over seeds, and a verdict where |Δ| below `compare.noise` (of B's params) is `noise`;
each row says which test its verdict rests on. A revision's per-seed metrics that no cache or
remote holds are read from git (`plots/summary/scores.json`); where a side's predictions are
missing, no verdict rests on the bootstrap (the t-test over seeds decides, where it can run)
and a note says why and which `dvc` command gets them. The output is a pull request's
comment: `... | gh pr comment <n> -F -`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sentemb.cli import Parser, points, run
from sentemb.config import UserError, load_params, section
from sentemb.io import flatten
from sentemb.report.stats import CompareConfig
from sentemb.results.readers import folder_reader, lock_stages, revision_reader
from sentemb.results.revisions import WORKSPACE, commits, root
from sentemb.results.runs import Experiment, load
from sentemb.review.paired import compare, one_sided, shared_seeds
from sentemb.review.render import comparison


def stale_params(repo: Path, params: dict[str, Any]) -> list[str]:
    """The params (dotted keys) whose value in the workspace's params.yaml (`params`) differs
    from the one its dvc.lock records a stage ran with: the workspace's outputs are not those
    params' results."""
    stages = lock_stages((repo / "dvc.lock").read_bytes())
    stale = set()
    for stage in stages.values():
        ran = (stage.get("params") or {}).get("params.yaml") or {}
        for key, value in flatten(ran if isinstance(ran, dict) else {}).items():
            if lookup(params, key) != value:
                stale.add(key)
    return sorted(stale)


def lookup(params: dict[str, Any], key: str) -> Any:
    """The value of dotted `key` (`refine.suites`) in `params`; None where absent."""
    node: Any = params
    for part in key.split("."):
        node = node.get(part) if isinstance(node, dict) else None
    return node


def compare_config(params: dict[str, Any], name: str) -> CompareConfig:
    """The `compare` params of the side `name`, or one error naming it and its params.yaml."""
    try:
        return section(params, "compare", CompareConfig)
    except UserError as err:
        raise UserError(f"{name}: params.yaml: {err}") from None


def load_experiment(name: str, repo: Path, commit: str | None) -> Experiment:
    """The experiment `name` ran at `commit` (None: the working folder, whose outputs must be
    those of its params); an error names `name` where it does not already."""
    try:
        if commit is None:
            params = load_params(repo / "params.yaml")
            compare_config(params, name)  # invalid is not stale
            if stale := stale_params(repo, params):
                raise UserError(
                    f"params.yaml differs from what dvc.lock ran ({', '.join(stale)}), so the "
                    "workspace's outputs are not its params' results: `dvc repro` first"
                )
            return load(folder_reader(repo), name, params)
        return load(revision_reader(commit, repo, name), name, from_git=True)
    except UserError as err:
        if name in str(err):
            raise
        raise UserError(f"{name}: {err}") from None


def parser() -> Parser:
    parser = Parser(__doc__)
    parser.revision("a_rev", help="the baseline: a revision or experiment")
    parser.revision("b_rev", nargs="?", default=WORKSPACE, help="default: the workspace")
    parser.add_argument("--tasks", action="store_true", help="every task, not only averages")
    parser.add_argument("--noise", type=points, help="score points (default compare.noise)")
    return parser


def main() -> None:
    args = parser().parse_args()
    repo = root()
    names = (args.a_rev, args.b_rev)
    read = [load_experiment(n, repo, c) for n, c in zip(names, commits(names, repo), strict=True)]
    old, new = shared_seeds(dict(zip(names, read, strict=True))).values()
    config = compare_config(new.params, args.b_rev)
    if args.noise is not None:
        config = CompareConfig(**{**config.__dict__, "noise": args.noise})
    results = compare({args.a_rev: old, args.b_rev: new}, args.a_rev, config)
    print(comparison(old, new, results[args.b_rev], config, args.tasks))
    unpaired = [
        f"{name}'s seed(s) {', '.join(map(str, left))}"
        for name, full, kept in zip(names, read, (old, new), strict=True)
        if (left := [s for s in full.seeds if s not in kept.seeds])
    ]
    if unpaired:
        print(f"\nLeft out, having no pair: {'; '.join(unpaired)}.")
    untested = one_sided(old, new)
    if untested:
        print("\nNot compared, one side lacking it:\n" + "".join(f"\n- {u}" for u in untested))


if __name__ == "__main__":
    run(main)
