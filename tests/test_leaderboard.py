"""Comparing revisions and experiments as a reviewer does: `python -m sentemb.compare` and the
leaderboard, on a git + DVC repository whose commits and experiment refs hold known results."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from support.experiments import fake_experiment, write_experiment

CHAIN = ("train", "refine", "evaluate", "analyze")


def git(repo: Path, *args: str) -> str:
    done = subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True, check=True)
    return done.stdout.strip()


def commit(repo: Path, method: str, noise: int, code: str, message: str) -> str:
    """A commit holding `method`'s results (seeds 1 and 2) and a dvc.lock whose chain stages
    ran code of md5 `code`."""
    write_experiment(repo, fake_experiment(method, [1, 2], noise))
    stages = {
        f"{stage}@{seed}": {"cmd": "x", "deps": [{"path": "src/sentemb/x.py", "md5": code}]}
        for stage in CHAIN
        for seed in (1, 2)
    }
    (repo / "dvc.lock").write_text(yaml.safe_dump({"schema": "2.0", "stages": stages}))
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", message)
    return git(repo, "rev-parse", "HEAD")


def experiment_ref(repo: Path, baseline: str, sha: str, name: str) -> None:
    """Make `sha` a DVC experiment of `baseline` named `name` (what `dvc exp run` records)."""
    git(repo, "update-ref", f"refs/exps/{baseline[:2]}/{baseline[2:]}/{name}", sha)


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """HEAD: simcse; experiments of it: sscl (same code), dclr (other code), paser (other code,
    its results in no cache: only its params and dvc.lock are read), simcse (other code: HEAD's
    row replaces it)."""
    repo = tmp_path_factory.mktemp("repo")
    env = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t"}
    os.environ.update(env | {"GIT_COMMITTER_EMAIL": "t@t", "DVC_NO_ANALYTICS": "1"})
    git(repo, "init", "-q")
    subprocess.run([sys.executable, "-m", "dvc", "init", "-q"], cwd=repo, check=True)
    base = commit(repo, "simcse", 1, "c1", "simcse")
    experiment_ref(repo, base, commit(repo, "sscl", 3, "c1", "sscl"), "noisy-sscl")
    git(repo, "reset", "-q", "--hard", base)
    experiment_ref(repo, base, commit(repo, "dclr", 2, "c2", "dclr"), "old-dclr")
    git(repo, "reset", "-q", "--hard", base)
    experiment_ref(repo, base, commit(repo, "simcse", 2, "c2", "old simcse"), "old-simcse")
    git(repo, "reset", "-q", "--hard", base)
    commit(repo, "paser", 2, "c3", "paser")
    git(repo, "rm", "-rq", "metrics", "predictions", "plots")
    git(repo, "commit", "-qm", "paser's results gone")
    experiment_ref(repo, base, git(repo, "rev-parse", "HEAD"), "gone-paser")
    git(repo, "reset", "-q", "--hard", base)
    return repo


def python(repo: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", *args], cwd=repo, capture_output=True, text=True, timeout=300
    )


def test_compare_tests_an_experiment_against_a_revision(repo: Path) -> None:
    done = python(repo, "sentemb.compare", "HEAD", "noisy-sscl")
    assert done.returncode == 0, done.stderr[-2000:]
    lines = done.stdout.splitlines()
    assert lines[0] == "### `HEAD` → `noisy-sscl`: simcse → sscl (seeds 1, 2)"
    sts = next(line for line in lines if line.startswith("| sts |"))
    assert sts.endswith("| significant |") and "| -" in sts  # noisier: clearly worse
    assert len([line for line in lines if line.startswith("| ")]) == 1 + 5  # header + rows


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["HEAD", "no-such-exp"],
            "error: no-such-exp: neither a git revision nor a DVC experiment",
        ),
        (["HEAD", "HEAD"], "error: HEAD: compared with itself"),
        (["HEAD", "--noise=-1"], "error: argument --noise:"),
    ],
)
def test_compare_refuses_in_one_line(repo: Path, args: list[str], message: str) -> None:
    done = python(repo, "sentemb.compare", *args)
    assert done.returncode != 0 and "Traceback" not in done.stderr
    assert done.stderr.strip().splitlines()[-1].startswith(message), done.stderr[-2000:]


def test_compare_says_which_dvc_command_gets_missing_predictions(
    repo: Path, tmp_path: Path
) -> None:
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", str(repo), str(clone)], check=True)
    git(clone, "rm", "-rq", "predictions")
    git(clone, "commit", "-qm", "predictions as DVC outputs no cache holds")
    done = python(clone, "sentemb.compare", "HEAD~1", "HEAD")
    error = done.stderr.strip().splitlines()[-1]
    assert error.startswith("error: HEAD:predictions/1/sts.npz: not in git, the DVC cache")
    assert "dvc pull" in error and "dvc exp pull" in error


def test_leaderboard_merges_the_rows_of_todays_code(repo: Path) -> None:
    """HEAD's run and the experiment of the same code are rows, SimCSE first; the experiments of
    other code are left out, named with the command that reruns them (unless a row of their
    method is there), whether or not their data are still there; a second call gives the same
    leaderboard."""
    done = python(repo, "sentemb.leaderboard")
    assert done.returncode == 0, done.stderr[-2000:]
    board = json.loads((repo / "reports" / "leaderboard.json").read_text())
    assert [row["label"] for row in board["rows"]] == ["simcse", "sscl"]
    sscl = board["rows"][1]
    assert sscl["experiment"] == "noisy-sscl" and sscl["params"] == {}
    assert sscl["versus"]["sts"]["significant"] and sscl["versus"]["sts"]["difference"] < 0
    assert [s["label"] for s in board["stale"]] == ["dclr", "paser"]
    assert board["stale"][0]["rerun"] == "dvc exp run --queue -S method=dclr"
    report = (repo / "reports" / "leaderboard.md").read_text()
    assert report.index("| simcse |") < report.index("| sscl |") < report.index("| untrained")
    assert "dclr at " in done.stderr and "ran other stage code: left out" in done.stderr
    assert "## Left out (not from this code: rerun them)" in report
    again = python(repo, "sentemb.leaderboard")
    assert again.returncode == 0
    assert json.loads((repo / "reports" / "leaderboard.json").read_text()) == board


def test_a_row_whose_commit_is_gone_stays_named_until_rerun(repo: Path, tmp_path: Path) -> None:
    """A listed row whose commit git no longer has (an experiment of another clone) is left out
    with that reason and its rerun command, on every later call, until a row of its method
    replaces it; a method is left out once."""
    clone = tmp_path / "repo"
    shutil.copytree(repo, clone)
    board = clone / "reports" / "leaderboard.json"
    assert python(clone, "sentemb.leaderboard").returncode == 0
    listed = json.loads(board.read_text())
    gone = dict(listed["rows"][1], method="iscse", label="iscse", commit="0" * 40)
    sscl = dict(listed["rows"][1], commit="1" * 40)  # its method has a row: replaced
    paser = dict(gone, method="paser", label="paser", commit="2" * 40)  # one of paser's two
    board.write_text(json.dumps(listed | {"rows": [*listed["rows"], gone, sscl, paser]}))
    for _ in range(2):
        done = python(clone, "sentemb.leaderboard")
        assert done.returncode == 0, done.stderr[-2000:]
        stale = json.loads(board.read_text())["stale"]
        assert [s["label"] for s in stale] == ["dclr", "iscse", "paser"]
        assert stale[2]["reason"] == "ran other stage code"  # its run still here wins
        assert stale[1] == {
            "label": "iscse",
            "commit": "0" * 40,
            "reason": "its commit is not in this repository",
            "rerun": "dvc exp run --queue -S method=iscse",
        }
        assert (
            "iscse at 0000000: its commit is not in this repository; `dvc exp"
            in (clone / "reports" / "leaderboard.md").read_text()
        )
