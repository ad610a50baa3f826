"""Every method in one table, from DVC experiments: `reports/leaderboard.md` and its JSON.

    dvc exp run --queue -S method=simcse,sscl,iscse,dclr,paser,iscse+dclr
    dvc queue start -j 1                  # 18 chains on a CPU: may be run in parts
    python -m sentemb.review.leaderboard         # merges every experiment run at today's stage code

A row is one experiment: its method (plain, + RepAL, + whitening), the mean ± std over its seeds of
each suite's average (and of each eval.own set), its paired tests against the SimCSE row
(`sentemb.review.paired`), the commit it ran at, the params that differ from this revision's, the
corpus it trained on and the autocast its seeds trained under; then the reference rows (the
untrained model, TF-IDF) of this revision. Rows are merged from HEAD (its committed run), every DVC
experiment of any commit and the rows the leaderboard already lists. Every row comes from the same
stage code as this revision (the code files its dvc.lock records for train, refine, evaluate and
analyze): a row of other code is left out and named with the command that reruns it (with its
params), until a row of its label replaces it. Each row is tested against SimCSE's on the seeds the
two share; a row that shares none is left out. A run no branch, tag or experiment holds any more
(`dvc exp remove NAME`) leaves the board. A listed row whose commit git no longer has (an
experiment of another clone) keeps its recorded numbers while the stage code and what its paired
tests rest on (SimCSE's evaluate outputs on its seeds, the `compare` params) are today's; else it
is left out too. Of two rows of one method and params, the later run is kept, and a run git has
replaces a kept one.
"""

from __future__ import annotations

import logging
from pathlib import Path

from sentemb.cli import Parser, run
from sentemb.config import UserError
from sentemb.io import atomic_path, check_output, write_json
from sentemb.results.revisions import root
from sentemb.review.board import JSON, REPORT, build
from sentemb.review.render import TITLE, leaderboard

log = logging.getLogger("leaderboard")


def parser() -> Parser:
    parser = Parser(__doc__)
    parser.output("--json", help=f"default: the repository's {JSON}")
    parser.output("--report", help=f"default: the repository's {REPORT}")
    return parser


def check_outputs(out: Path, report: Path) -> None:
    """Refuse to write the board over a link, or the report over a file that is not a
    leaderboard (its first line `TITLE`): a user's notes or a tracked file given to `--report`
    by mistake. (A JSON that is no board is refused when `listed` reads it.)"""
    for path, flag in ((report, "--report"), (out, "--json")):
        check_output(path)
        if path.is_symlink():
            raise UserError(f"{path}: a link: not replaced by the leaderboard; give another {flag}")
    if report.is_file():
        with report.open(encoding="utf-8", errors="replace") as file:
            if file.readline().rstrip("\n") != TITLE:
                raise UserError(
                    f"{report}: not a leaderboard this command wrote (its first line is not "
                    f"{TITLE!r}): not replaced; give another --report"
                )


def main() -> None:
    args = parser().parse_args()
    repo = root()
    out, report_path = args.json or repo / JSON, args.report or repo / REPORT
    check_outputs(out, report_path)  # both refused before either is written
    board = build(repo, out)
    report = leaderboard(board)
    with atomic_path(report_path) as tmp:  # the report in full, then the board, then the report
        tmp.write_text(report, encoding="utf-8")
        write_json(out, board)
    for row in board["stale"]:
        log.warning(
            "%s at %s: %s: left out; rerun it: %s",
            row["label"],
            row["commit"][:7],
            row["reason"],
            row["rerun"],
        )
    log.info("%d row(s): %s", len(board["rows"]), report_path)


if __name__ == "__main__":
    run(main)
