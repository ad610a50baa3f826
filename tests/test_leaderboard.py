"""Comparing revisions and experiments as a reviewer does: `python -m sentemb.review.compare`
and the leaderboard, on a git + DVC repository whose commits and experiment refs hold known
results."""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from sentemb.config import UserError
from sentemb.registry import SUITES
from sentemb.results import revisions
from sentemb.results.readers import MissingResults, folder_reader
from sentemb.results.revisions import git_remote
from sentemb.results.runs import SCORES, committed_files
from sentemb.review import board as board_module
from sentemb.review import leaderboard as leaderboard_module
from sentemb.review import render
from sentemb.training.config import BUILT_IN

from support.experiments import fake_experiment, write_experiment
from support.repos import DVC, clone_of, git, git_dvc_repo, run
from support.stages import run_module

CHAIN = ("train", "refine", "evaluate", "analyze")


def commit(
    repo: Path, method: str, noise: int, code: str, message: str, seeds: tuple[int, ...] = (1, 2)
) -> str:
    """A commit holding `method`'s results (`seeds`) and a dvc.lock whose chain stages ran code
    of md5 `code` and whose predictions have an md5 of `noise`."""
    write_experiment(repo, fake_experiment(method, list(seeds), noise))
    stages = {
        f"{stage}@{seed}": {
            "cmd": "x",
            "deps": [{"path": "src/sentemb/x.py", "md5": code}],
            "outs": [{"path": f"predictions/{seed}/sts.npz", "md5": str(noise)}],
        }
        for stage in CHAIN
        for seed in seeds
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
    repo = git_dvc_repo(tmp_path_factory.mktemp("repo"))
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


def python(
    repo: Path, module: str, *args: str, process: bool = False
) -> subprocess.CompletedProcess[str]:
    """`python -m <module> <args>` run from `repo`: in this process unless `process`
    (`run_module`; a new Python and its imports per call were most of this file's time)."""
    return run_module(module, list(args), repo, process=process)


def test_compare_tests_an_experiment_against_a_revision(repo: Path) -> None:
    done = python(repo, "sentemb.review.compare", "HEAD", "noisy-sscl", process=True)
    assert done.returncode == 0, done.stderr[-2000:]
    lines = done.stdout.splitlines()
    assert lines[0] == "### `HEAD` → `noisy-sscl`: simcse → sscl (seeds 1, 2)"
    sts = next(line for line in lines if line.startswith("| sts |"))
    assert sts.endswith("| significant | bootstrap |") and "| -" in sts  # noisier: clearly worse
    rows = [line for line in lines if line.startswith("| ")]
    assert len(rows) == 1 + 5 + 2  # header, the suites' averages, each own set (no average)
    assert {"| own mine", "| own faq"} <= {line.split(" | ")[0] for line in rows}


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["HEAD", "no-such-exp"],
            "error: no-such-exp: neither a git revision nor a DVC experiment",
        ),
        (["HEAD", "HEAD"], "error: HEAD and HEAD: one revision, compared with itself"),
        (["HEAD~0", "HEAD"], "error: HEAD~0 and HEAD: one revision (both "),
        (["HEAD", "--noise=-1"], "error: argument --noise:"),
        (["HEAD:params.yaml", "HEAD"], "error: HEAD:params.yaml: a git blob, not a commit"),
        (["HEAD^{tree}", "HEAD"], "error: HEAD^{tree}: a git tree, not a commit"),
        (["refs/heads/mian", "HEAD"], "error: refs/heads/mian: neither a git revision nor a"),
    ],
)
def test_compare_refuses_in_one_line(repo: Path, args: list[str], message: str) -> None:
    done = python(repo, "sentemb.review.compare", *args)
    assert done.returncode != 0 and "Traceback" not in done.stderr
    assert done.stderr.strip().splitlines()[-1].startswith(message), done.stderr[-2000:]


def test_compare_reads_the_repository_from_any_of_its_folders(repo: Path) -> None:
    done = python(repo / "metrics", "sentemb.review.compare", "HEAD", "noisy-sscl")
    assert done.returncode == 0 and done.stdout == python(repo, "sentemb.review.compare", "HEAD",
        "noisy-sscl").stdout  # fmt: skip


def test_compare_outside_a_repository_is_one_error(tmp_path: Path) -> None:
    done = python(tmp_path, "sentemb.review.compare", "main", "HEAD")
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert done.stderr.strip().endswith("not inside a DVC repository: run this in a clone of "
        "the pipeline")  # fmt: skip


def half_made(folder: Path, state: str) -> None:
    """A DVC repository without git, with git but no commit, or with a config DVC cannot read."""
    if state == "no git":
        run([*DVC, "init", "-q", "--no-scm"], folder)
        return
    git_dvc_repo(folder)
    if state == "config unreadable":
        git(folder, "commit", "-qm", "dvc init")
        (folder / ".dvc" / "config.local").write_text("[core\n")


@pytest.mark.parametrize("state", ["no git", "no commit", "config unreadable"])
@pytest.mark.parametrize(
    "command",
    ["sentemb.review.compare", "sentemb.review.metrics_diff", "sentemb.review.leaderboard"],
)
def test_a_half_made_repository_is_one_error(tmp_path: Path, state: str, command: str) -> None:
    half_made(tmp_path, state)
    done = python(tmp_path, command, *(["HEAD"] if command == "sentemb.review.compare" else []))
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr[-2000:]
    message = {
        "no git": "not a git repository with a commit",
        "no commit": "not a git repository with a commit",
        "config unreadable": "/.dvc: config file error: ",
    }[state]
    assert message in done.stderr.strip().splitlines()[-1], done.stderr[-2000:]


def test_a_branch_an_experiment_is_named_after_is_read_with_a_warning(
    repo: Path, tmp_path: Path
) -> None:
    """As for DVC, the git revision wins; the reader is told that an experiment has the name."""
    clone = clone_of(repo, tmp_path / "clone")
    git(clone, "branch", "noisy-sscl", "HEAD")
    git(clone, "commit", "-q", "--allow-empty", "-m", "later")
    done = python(clone, "sentemb.review.compare", "noisy-sscl", "HEAD")
    assert done.returncode == 0, done.stderr[-2000:]
    assert "noisy-sscl: read as a git revision; a DVC experiment has that name too" in done.stderr
    missing = python(clone, "sentemb.review.compare", "HEAD", "no-such-exp").stderr.strip()
    assert missing.endswith("`dvc exp pull origin no-such-exp` fetches one)")


def test_an_experiment_name_two_experiments_share_is_one_error(repo: Path, tmp_path: Path) -> None:
    clone = clone_of(repo, tmp_path / "clone")
    refs = dict(
        reversed(line.split())
        for line in git(clone, "for-each-ref", "--format=%(objectname) %(refname)").splitlines()
    )
    sscl = next(sha for ref, sha in refs.items() if ref.endswith("/noisy-sscl"))
    other = next(sha for ref, sha in refs.items() if ref.endswith("/old-dclr"))
    experiment_ref(clone, other, sscl, "noisy-sscl")  # the same name on another baseline
    message = (
        "error: noisy-sscl: names more than one DVC experiment (`dvc exp list --all-commits` "
        "lists them): give the one you mean by its commit"
    )
    for head in ("HEAD is one baseline (DVC would pick its)", "HEAD is neither baseline"):
        done = python(clone, "sentemb.review.compare", "HEAD", "noisy-sscl")
        assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr[-2000:]
        assert done.stderr.strip().splitlines()[-1] == message, head
        git(clone, "commit", "-q", "--allow-empty", "-m", "HEAD is neither baseline")


def test_a_tag_and_a_branch_of_one_name_read_as_the_tag_with_a_warning(
    repo: Path, tmp_path: Path
) -> None:
    clone = clone_of(repo, tmp_path / "clone")
    git(clone, "commit", "-q", "--allow-empty", "-m", "a second commit")
    git(clone, "tag", "twin", "HEAD~1")
    git(clone, "branch", "twin", "HEAD")
    done = python(clone, "sentemb.review.metrics_diff", "twin", "HEAD")
    assert "twin: read as the tag, as git does; the branch is heads/twin" in done.stderr
    assert done.returncode == 0, done.stderr[-2000:]


def test_a_workspace_whose_params_are_not_its_outputs_is_refused(
    repo: Path, tmp_path: Path
) -> None:
    """The workspace side is the outputs dvc.lock records, so params.yaml must be the params
    they ran with: a method switched without `dvc repro` is refused, naming the param."""
    clone = clone_of(repo, tmp_path / "clone")
    lock = yaml.safe_load((clone / "dvc.lock").read_text())
    lock["stages"]["train@1"]["params"] = {"params.yaml": {"method": "simcse", "seeds": [1, 2]}}
    (clone / "dvc.lock").write_text(yaml.safe_dump(lock))
    assert python(clone, "sentemb.review.compare", "noisy-sscl").returncode == 0
    params = yaml.safe_load((clone / "params.yaml").read_text())
    (clone / "params.yaml").write_text(yaml.safe_dump({**params, "method": "dclr"}))
    done = python(clone, "sentemb.review.compare", "noisy-sscl")
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert done.stderr.strip().splitlines()[-1] == (
        "error: params.yaml differs from what dvc.lock ran (method), so the "
        "workspace's outputs are not its params' results: `dvc repro` first"
    )


def test_compare_names_the_seeds_it_pairs_and_those_left_out(repo: Path, tmp_path: Path) -> None:
    clone = clone_of(repo, tmp_path / "clone")
    write_experiment(clone, fake_experiment("sscl", [2, 3], 3))
    shutil.rmtree(clone / "metrics" / "runs" / "1")
    shutil.rmtree(clone / "predictions" / "1")
    git(clone, "add", "-A")
    git(clone, "commit", "-qm", "seeds 2 and 3")
    done = python(clone, "sentemb.review.compare", "HEAD~1", "HEAD")
    assert done.returncode == 0, done.stderr[-2000:]
    lines = done.stdout.splitlines()
    assert lines[0] == "### `HEAD~1` → `HEAD`: simcse → sscl (seeds 2)"
    assert lines[-1] == "Left out, having no pair: HEAD~1's seed(s) 1; HEAD's seed(s) 3."


def set_noise(clone: Path, value: object) -> None:
    params = yaml.safe_load((clone / "params.yaml").read_text())
    params["compare"]["noise"] = value
    (clone / "params.yaml").write_text(yaml.safe_dump(params))


DAMAGED_SIDES = {  # what is damaged, the names compared, and the start of the one error line
    "lock empty": ("", ["HEAD"], "error: workspace: dvc.lock: expected a mapping of stages"),
    "lock a list": ("[1]\n", ["HEAD"], "error: workspace: dvc.lock: expected a mapping of"),
    "lock stage 5": ("stages:\n  x: 5\n", ["HEAD"], "error: workspace: dvc.lock: expected"),
    "noise text": ("abc", ["HEAD"], "error: workspace: params.yaml: compare.noise: "),
    "noise nan": (".nan", ["HEAD"], "error: workspace: params.yaml: compare.noise: "),
    "noise committed": (-1, ["HEAD~1", "HEAD"], "error: HEAD: params.yaml: compare.noise: "),
}


@pytest.mark.parametrize("damage", DAMAGED_SIDES)
def test_a_damaged_lock_or_compare_param_is_one_error_naming_side_and_file(
    repo: Path, tmp_path: Path, damage: str
) -> None:
    """Not "stale: `dvc repro` first" for an invalid param, nor a traceback for a lock that is
    YAML but no mapping of stages: one line naming the side, the file and the param."""
    value, names, message = DAMAGED_SIDES[damage]
    clone = clone_of(repo, tmp_path / "clone")
    if damage.startswith("lock"):
        (clone / "dvc.lock").write_text(value)
    else:
        set_noise(clone, yaml.safe_load(value) if isinstance(value, str) else value)
    if damage == "noise committed":
        git(clone, "commit", "-qam", "a negative noise")
    done = python(clone, "sentemb.review.compare", *names)
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr[-2000:]
    assert done.stderr.strip().splitlines()[-1].startswith(message), done.stderr[-2000:]


def test_the_git_remote_named_is_the_only_one_else_a_placeholder(tmp_path: Path) -> None:
    git(tmp_path, "init", "-q")
    assert git_remote(tmp_path) == "<git remote>"
    git(tmp_path, "remote", "add", "upstream", "/nowhere")
    assert git_remote(tmp_path) == "upstream"
    git(tmp_path, "remote", "add", "origin", "/nowhere")
    assert git_remote(tmp_path) == "<git remote>"


def test_compare_reads_a_revision_from_git_alone(repo: Path, tmp_path: Path) -> None:
    """A revision whose per-seed metrics files and predictions no cache holds (a fresh clone,
    no remote): its per-seed scores come from git's plots/summary/scores.json, so every Δ and
    every p is what the full files give; the verdicts rest on the seeds, and the output says
    where the scores came from and why there is no bootstrap."""
    full = python(repo, "sentemb.review.compare", "noisy-sscl", "HEAD", "--tasks")
    assert full.returncode == 0, full.stderr[-2000:]
    clone = clone_of(repo, tmp_path / "clone")
    git(clone, "rm", "-rq", "metrics/runs", "predictions")
    git(clone, "commit", "-qm", "per-seed files as DVC outputs no cache holds")
    experiment_ref(clone, git(clone, "rev-parse", "HEAD~1"), git(clone, "rev-parse", "HEAD"), "x")
    done = python(clone, "sentemb.review.compare", "noisy-sscl", "x", "--tasks")
    assert done.returncode == 0, done.stderr[-2000:]

    def rows(output: str) -> list[list[str]]:  # the table's rows, header and rule left out
        return [line.split(" | ") for line in output.splitlines() if line.startswith("| ")][2:]

    assert len(rows(done.stdout)) == len(rows(full.stdout)) > 5
    for mine, theirs in zip(rows(done.stdout), rows(full.stdout), strict=True):
        # the t-test where the seeds' differences spread, else no test could run
        assert mine[-1] == ("no test |" if mine[5] == "-" else "t-test (seeds) |")
        assert mine[:4] + mine[5:6] == theirs[:4] + theirs[5:6]  # row, sides, Δ, p
    notes = [line for line in done.stdout.splitlines() if line.startswith("- `x`: ")]
    assert notes[0].startswith("- `x`: per-seed scores from git (plots/summary/scores.json)")
    assert "no verdict rests on the bootstrap over test pairs" in notes[1]


def test_git_holds_every_score_a_comparison_reads(tmp_path: Path) -> None:
    """The per-seed files rebuilt from plots/summary/scores.json are the files, but for the
    records' text fields, which it does not hold."""
    experiment = fake_experiment("simcse", [1, 2], 3)
    write_experiment(tmp_path, experiment)
    missing = MissingResults("x")
    rebuilt = committed_files(folder_reader(tmp_path), [1, 2], set(SUITES), missing)
    for files, original in zip(rebuilt, experiment.files, strict=True):
        assert {s: files[s] for s in SUITES} == {s: original[s] for s in SUITES}
        assert files["train"]["sentences"] == original["train"]["sentences"]
        assert files["train"]["autocast"] is None
    (tmp_path / SCORES).unlink()
    with pytest.raises(MissingResults, match=r"^x$"):
        committed_files(folder_reader(tmp_path), [1], set(SUITES), missing)


@pytest.mark.parametrize(
    ("summary", "edit", "fails"),
    [
        ("scores", False, False),  # what `dvc repro` commits
        ("scores", True, True),  # scores.json edited after summary wrote it
        ("other", False, True),  # summary records no scores.json: another run's dvc.lock
        (None, True, False),  # no summary in dvc.lock: nothing to check against
    ],
)
def test_git_scores_must_be_what_the_locks_summary_wrote(
    tmp_path: Path, summary: str | None, edit: bool, fails: bool
) -> None:
    """A revision's per-seed scores are read from git only where its dvc.lock says stage
    summary wrote that very plots/summary/scores.json (its md5); else one error, not numbers
    of another run."""
    write_experiment(tmp_path, fake_experiment("simcse", [1], 3))
    scores = tmp_path / SCORES
    path = SCORES if summary == "scores" else "metrics/summary.json"
    outs = [{"path": path, "md5": hashlib.md5(scores.read_bytes()).hexdigest()}]
    stages = {"summary": {"cmd": "x", "outs": outs}} if summary else {"x": {"cmd": "x"}}
    (tmp_path / "dvc.lock").write_text(yaml.safe_dump({"schema": "2.0", "stages": stages}))
    if edit:
        first, *rest = json.loads(scores.read_text())
        scores.write_text(json.dumps([first | {"score": first["score"] + 1}, *rest]))
    if fails:
        with pytest.raises(UserError, match=rf"^{SCORES}: not the file dvc.lock records stage"):
            committed_files(folder_reader(tmp_path), [1], set(SUITES), MissingResults("x"))
    else:
        committed_files(folder_reader(tmp_path), [1], set(SUITES), MissingResults("x"))


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        (lambda records: [*records, records[0]], r"STSBenchmark: recorded twice$"),
        (lambda rs: [rs[0] | {"score": float("nan")}, *rs[1:]], "a metric must be a finite number"),
        (lambda rs: [rs[0] | {"score": True}, *rs[1:]], r"True is not a number; it was damaged$"),
        (lambda records: {"records": records}, "expected a list of records with"),
    ],
)
def test_a_damaged_score_record_is_one_error(tmp_path: Path, damage, message: str) -> None:
    """plots/summary/scores.json is checked by the one reader the comparison, the leaderboard
    and metrics_diff share: a record twice, a score that is no finite number, not a list."""
    experiment = fake_experiment("simcse", [1], 3)
    write_experiment(tmp_path, experiment)
    records = json.loads((tmp_path / SCORES).read_text())
    records.sort(key=lambda r: r["key"] != "STSBenchmark")  # the first: an STS task's score
    (tmp_path / SCORES).write_text(json.dumps(damage(records)))
    with pytest.raises(UserError, match=rf"^{SCORES}: .*{message}"):
        committed_files(folder_reader(tmp_path), [1], set(SUITES), MissingResults("x"))


@pytest.mark.parametrize("remote", [None, "store"])
@pytest.mark.parametrize("kind", ["revision", "experiment"])
def test_compare_without_predictions_rests_on_the_seeds_and_says_how_to_get_them(
    repo: Path, tmp_path: Path, remote: str | None, kind: str
) -> None:
    """Predictions no cache holds: no verdict rests on the bootstrap over test pairs, and the output
    says so and why. With a default remote: the pull command for that kind of name, quoted for
    a shell; without one (a fresh clone here), no `dvc pull` that could only fail: add the
    remote, or rerun (a revision's pipeline, or the experiment as a new one: `git checkout` of
    an experiment's name fails)."""
    clone = clone_of(repo, tmp_path / "clone")
    if remote:
        dvc = [sys.executable, "-m", "dvc", "remote", "add", "--local", "-d", remote]
        subprocess.run([*dvc, str(tmp_path / "store")], cwd=clone, check=True)
    git(clone, "rm", "-rq", "predictions")
    git(clone, "commit", "-qm", "predictions as DVC outputs no cache holds")
    name = {"revision": "HEAD", "experiment": "gone-exp"}[kind]
    if kind == "experiment":
        experiment_ref(
            clone, git(clone, "rev-parse", "HEAD~1"), git(clone, "rev-parse", "HEAD"), name
        )
        git(clone, "reset", "-q", "--hard", "HEAD~1")
    done = python(clone, "sentemb.review.compare", "HEAD~1" if kind == "revision" else "HEAD", name)
    assert done.returncode == 0, done.stderr[-2000:]
    rows = [line for line in done.stdout.splitlines() if line.startswith("| sts")]
    # the same run on both sides: no bootstrap (no predictions), no t-test (no spread)
    assert rows and all(row.endswith("| no test |") and "| - |" in row for row in rows)
    note = next(line for line in done.stdout.splitlines() if line.startswith(f"- `{name}`"))
    assert "no verdict rests on the bootstrap over test pairs" in note
    assert f"missing: {name}:predictions/1/sts.npz: not in git, the DVC cache" in note
    again = {
        "revision": f"run that revision's pipeline again (`git checkout {name} && dvc repro`)",
        "experiment": f"run it again as a new experiment (`dvc exp apply {name} && dvc exp run`)",
    }[kind]
    assert note.endswith(f"or {again}")
    pull = {
        "revision": f"`git checkout {name} && dvc pull`",
        "experiment": f"`dvc exp pull origin {name} -r store`",  # git remote, then DVC remote
    }[kind]
    if remote:
        assert f"get it from remote 'store': {pull};" in note
    else:
        assert "dvc pull" not in note and "no DVC remote is configured here" in note


def test_leaderboard_merges_the_rows_of_todays_code(repo: Path) -> None:
    """HEAD's run and the experiment of the same code are rows, SimCSE first; the experiments of
    other code are left out, named with the command that reruns them (unless a row of their
    method is there), whether or not their data are still there; a second call gives the same
    leaderboard."""
    done = python(repo, "sentemb.review.leaderboard", process=True)
    assert done.returncode == 0, done.stderr[-2000:]
    board = json.loads((repo / "reports" / "leaderboard.json").read_text())
    assert [row["label"] for row in board["rows"]] == ["simcse", "sscl"]
    sscl = board["rows"][1]
    assert sscl["experiment"] == "noisy-sscl" and sscl["params"] == {}
    assert sscl["versus"]["sts"]["significant"] and sscl["versus"]["sts"]["difference"] < 0
    assert {"own:mine", "own:faq"} <= set(sscl["scores"])  # a column per eval.own set
    assert sscl["versus"]["own:faq"]["low"] is not None  # the bootstrap over its items
    assert sscl["versus"]["own:mine"]["low"] is not None  # the bootstrap over its pairs
    assert [s["label"] for s in board["stale"]] == ["dclr", "paser"]
    assert board["stale"][0]["rerun"] == "dvc exp run --queue -S method=dclr"
    report = (repo / "reports" / "leaderboard.md").read_text()
    assert report.index("| simcse |") < report.index("| sscl |") < report.index("| untrained")
    assert "dclr at " in done.stderr and "ran other stage code: left out" in done.stderr
    assert "## Left out (rerun them)" in report
    assert "| Retrieval avg | mine | faq |" in report
    assert "| significant | bootstrap |" in report and "| t-test (seeds) |" in report
    assert "per-seed scores from git" not in report  # every file was there
    again = python(repo, "sentemb.review.leaderboard")
    assert again.returncode == 0
    assert json.loads((repo / "reports" / "leaderboard.json").read_text()) == board


def test_leaderboard_builds_from_git_alone(
    repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A clone whose per-seed files and predictions no cache holds: the same rows and scores;
    each test against SimCSE rests on the seeds (no interval), with the same p."""
    full = json.loads(json.dumps(rebuild(clone_of(repo, tmp_path / "full"), monkeypatch)))
    clone = clone_of(repo, tmp_path / "clone")
    git(clone, "rm", "-rq", "metrics/runs", "predictions")
    git(clone, "commit", "-qm", "per-seed files as DVC outputs no cache holds")
    board = rebuild(clone, monkeypatch)
    rows, full_rows = (sorted(b["rows"], key=lambda r: r["label"]) for b in (board, full))
    assert [r["label"] for r in rows] == [r["label"] for r in full_rows] == ["simcse", "sscl"]
    for mine, theirs in zip(rows, full_rows, strict=True):
        assert mine["scores"] == theirs["scores"]
        for row, result in mine["versus"].items():
            expected = "seeds" if result["p_seeds"] is not None else "none"
            assert result["test"] == expected and result["low"] is None
            assert result["p_seeds"] == theirs["versus"][row]["p_seeds"]
    assert rows[0]["trained_on"].endswith("autocast not in git")
    report = (clone / "reports" / "leaderboard.md").read_text()
    tests = report.split("## Against SimCSE")[1].split("\n\n")[1].splitlines()[2:]
    assert tests and all(line.endswith(("| t-test (seeds) |", "| no test |")) for line in tests)
    # no p (the seeds' differences do not spread): no test; a p: the t-test
    assert all(line.endswith("| no test |") == (line.split(" | ")[4] == "-") for line in tests)
    # where SimCSE's scores came from, and why no test against it has a bootstrap (the
    # experiment's commit still holds its own files)
    assert "- simcse: per-seed scores from git (plots/summary/scores.json)" in report
    assert "- simcse: no verdict rests on the bootstrap over test pairs (the t-test" in report
    assert "- sscl: " not in report and rows[1]["notes"] == []


@pytest.mark.parametrize("same", [True, False])
def test_a_run_read_from_git_alone_takes_its_autocast_from_the_board(
    repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, same: bool
) -> None:
    """Git holds a run's scores, not the autocast its seeds trained under: a run read from git
    alone takes it from the listed board's row of the same run (method, seeds, every mean, std
    and n), read where that run's files were; a row of other scores says nothing of it."""
    full = rebuild(clone_of(repo, tmp_path / "full"), monkeypatch)
    clone = clone_of(repo, tmp_path / "clone")
    git(clone, "rm", "-rq", "metrics/runs", "predictions")
    git(clone, "commit", "-qm", "per-seed files as DVC outputs no cache holds")
    known = full["rows"][0]["trained_on"].rsplit(", ", 1)[0]
    simcse = full["rows"][0] | {"commit": "0" * 40, "trained_on": f"{known}, bf16"}
    if not same:
        simcse["scores"] = simcse["scores"] | {"sts": simcse["scores"]["sts"] | {"mean": 0.5}}
    (clone / "reports").mkdir(exist_ok=True)
    (clone / "reports" / "leaderboard.json").write_text(json.dumps(full | {"rows": [simcse]}))
    board = rebuild(clone, monkeypatch)
    rows = {r["label"]: r for r in board["rows"]}
    assert sorted(rows) == ["simcse", "sscl"] and rows["simcse"]["commit"] != "0" * 40  # git's
    shown = "bf16" if same else "autocast not in git"
    assert rows["simcse"]["trained_on"] == f"{known}, {shown}"


def rebuild(clone: Path, monkeypatch: pytest.MonkeyPatch) -> dict:
    """The leaderboard `clone` gives, built by the command's `main` with its exceptions let
    through (`python()` turns them into an exit status and stderr, as the command does)."""
    monkeypatch.chdir(clone)
    monkeypatch.setattr(sys, "argv", ["leaderboard"])
    leaderboard_module.main()
    return json.loads((clone / "reports" / "leaderboard.json").read_text())


@pytest.fixture
def listed(repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, dict]:
    """A copy of `repo` and the leaderboard it gives, before a listed row's commit is gone."""
    clone = tmp_path / "repo"
    shutil.copytree(repo, clone)
    return clone, rebuild(clone, monkeypatch)


def gone_rows(board: dict) -> list[dict]:
    """Rows of commits git never had: iscse (seed 1 only), sscl (a run git has replaces it)
    and paser (a run of other code still here)."""
    sscl = board["rows"][1]
    return [
        dict(sscl, method="iscse", label="iscse", commit="0" * 40, params={"seeds": [1]}),
        dict(sscl, commit="1" * 40, scores={}),
        dict(sscl, method="paser", label="paser", commit="2" * 40),
    ]


def test_a_row_whose_commit_is_gone_keeps_its_numbers(
    listed: tuple[Path, dict], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A listed row whose commit git no longer has (an experiment of another clone) keeps its
    numbers, its params made relative to today's, while the stage code and SimCSE predictions
    it was tested against are today's; a run git has replaces a kept row of its label; the
    board is the same on every later call."""
    clone, board = listed
    rows = gone_rows(board)
    path = clone / "reports" / "leaderboard.json"
    path.write_text(json.dumps(board | {"rows": [*board["rows"], *rows]}))
    for _ in range(2):
        after = rebuild(clone, monkeypatch)
        assert [r["label"] for r in after["rows"]] == [
            "simcse",
            "sscl",
            "iscse (seeds=[1])",
            "paser",
        ]
        assert after["rows"][1] == board["rows"][1]  # git's run, not the kept one
        assert after["rows"][2] == rows[0] | {"label": "iscse (seeds=[1])"}
        assert [s["label"] for s in after["stale"]] == ["dclr"]


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        ({"code": "other"}, "ran other stage code"),
        ({"tested_against": "other"}, "its commit is not in this repository and it was tested"),
        ({"tested_against": None}, "its commit is not in this repository and it was tested"),
    ],
)
def test_a_row_whose_commit_is_gone_is_left_out_when_code_or_simcse_moved(
    listed: tuple[Path, dict], change: dict, reason: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A listed row whose commit is gone is left out, named with its rerun command on every
    later call until a row of its label replaces it, where the stage code changed or the
    SimCSE run its paired tests read is not today's (other predictions or scores, or none)."""
    clone, board = listed
    iscse = gone_rows(board)[0]
    path = clone / "reports" / "leaderboard.json"
    path.write_text(json.dumps(board | change | {"rows": [*board["rows"], iscse]}))
    for _ in range(2):
        after = rebuild(clone, monkeypatch)
        assert [r["label"] for r in after["rows"]] == ["simcse", "sscl"]
        stale = {s["label"]: s for s in after["stale"]}
        iscse = stale["iscse (seeds=[1])"]  # named, and rerun, with the params it ran with
        assert iscse["reason"].startswith(reason)
        assert iscse["rerun"] == "dvc exp run --queue -S method=iscse -S 'seeds=[1]'"
        report = (clone / "reports" / "leaderboard.md").read_text()
        assert "iscse (seeds=[1]) at 0000000: " in report


def test_each_row_is_tested_on_the_seeds_it_shares_with_simcse(
    listed: tuple[Path, dict], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A one-seed experiment changes no other row's tests; one that shares no seed with
    SimCSE's run is left out, named with its params and rerun command, and blocks no row."""
    clone, board = listed
    base = git(clone, "rev-parse", "HEAD")
    for method, seeds, name in (("iscse", (2,), "one-seed"), ("dclr", (7,), "other-seed")):
        experiment_ref(clone, base, commit(clone, method, 2, "c1", method, seeds), name)
        git(clone, "reset", "-q", "--hard", base)
    after = rebuild(clone, monkeypatch)
    rows = {row["label"]: row for row in after["rows"]}
    assert rows["sscl"] == board["rows"][1]  # its tests on seeds 1 and 2, as before
    assert rows["iscse (seeds=[2])"]["versus"]["sts"]["p_seeds"] is None  # one pair: no t-test
    stale = {s["label"]: s for s in after["stale"]}["dclr (seeds=[7])"]
    assert stale["reason"].startswith("cannot be tested against SimCSE's row: seeds: the ")
    assert stale["rerun"] == "dvc exp run --queue -S method=dclr -S 'seeds=[7]'"


def test_a_kept_row_names_the_params_that_differ_from_today_s(
    listed: tuple[Path, dict], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A kept row ran with the board's params of then: one that differs from today's is in its
    label."""
    clone, board = listed
    iscse = gone_rows(board)[0]
    path = clone / "reports" / "leaderboard.json"
    then = board["params"] | {"train.learning_rate": 1.0}
    path.write_text(json.dumps(board | {"params": then, "rows": [*board["rows"], iscse]}))
    after = rebuild(clone, monkeypatch)
    assert after["rows"][2]["label"] == "iscse (seeds=[1], train.learning_rate=1.0)"
    assert after["rows"][2]["params"] == {"seeds": [1], "train.learning_rate": 1.0}


def damaged(board: dict) -> list[tuple[str, str]]:
    """`board` (a board this code wrote) broken one way at a time: its JSON, and the part of
    the error that names what is wrong."""
    row, stale = board["rows"][1], {"label": "x", "commit": "0" * 40, "reason": "r", "rerun": "d"}
    cases = [
        ("{", "not valid JSON"),
        ("[]", "board: expected a mapping, got []"),
        (json.dumps({"rows": []}), "code: missing"),
        (json.dumps(board | {"params": None}), "board.params: expected a mapping, got None"),
        (json.dumps(board | {"rows": None}), "board.rows: expected a list, got None"),
        (json.dumps(board | {"rows": ["x"]}), "board.rows[0]: expected a mapping"),
        (json.dumps(board | {"stale": [{"label": "x"}]}), "stale[0].commit: missing"),
        (
            json.dumps(board | {"stale": [stale | {"commit": None}]}),
            "stale[0].commit: expected str, got None",
        ),
    ]
    for key in ("commit", "method", "params", "scores", "versus", "experiment"):
        broken = {k: v for k, v in row.items() if k != key}
        cases.append((json.dumps(board | {"rows": [broken]}), f"rows[0].{key}: missing"))
    cases.append(
        (
            json.dumps(board | {"rows": [row | {"params": None}]}),
            "rows[0].params: expected a mapping, got None",
        )
    )
    for commit in ("main", "HEAD", row["commit"][:7]):  # a name would move; a row ran at one commit
        cases.append((json.dumps(board | {"rows": [row | {"commit": commit}]}), "rows[0].commit: "))
    half = row | {"versus": {"sts": row["versus"]["sts"] | {"low": 1.0, "high": None}}}
    cases.append(
        (json.dumps(board | {"rows": [half]}), "rows[0].versus.sts.low: an interval needs")
    )
    for key in ("STS", "sts/foo", "nope"):  # a suite row the report cannot place
        broken = row | {"versus": {key: row["versus"]["sts"]}}
        cases.append((json.dumps(board | {"rows": [broken]}), f"rows[0].versus.{key}: not a"))
    sts, versus = row["scores"]["sts"], row["versus"]["sts"]
    for name, entry, field, value in (
        ("scores", sts, "mean", "76.3"),
        ("scores", sts, "std", float("nan")),
        ("scores", sts, "n", 0),
        ("versus", versus, "difference", None),
        ("versus", versus, "significant", "yes"),
        ("versus", versus, "low", [1.0]),
        ("versus", versus, "test", "bootstrapp"),  # none of paired.TESTS
    ):
        broken = row | {name: {"sts": entry | {field: value}}}
        problem = f"board.rows[0].{name}.sts.{field}: "
        cases.append((json.dumps(board | {"rows": [broken]}), problem))
    mean_missing = row | {"scores": {"sts": {"std": 0.1, "n": 3}}}
    cases.append((json.dumps(board | {"rows": [mean_missing]}), "rows[0].scores.sts.mean: missing"))
    cases.append((json.dumps(board | {"rows": [row | {"notes": "x"}]}), "rows[0].notes: "))
    return cases


def test_a_board_this_code_did_not_write_is_refused(listed: tuple[Path, dict]) -> None:
    """A damaged or hand-broken leaderboard.json is one error naming it and what is wrong
    (every case read as the command reads it; three run as the command, whose JSON and report
    are then left as they were)."""
    clone, board = listed
    path, report = clone / "reports" / "leaderboard.json", clone / "reports" / "leaderboard.md"
    before = report.read_text()
    cases = damaged(board)
    for text, problem in cases:
        path.write_text(text)
        with pytest.raises(UserError) as err:
            board_module.listed(path)
        assert str(err.value).startswith(f"{path}: ") and problem in str(err.value), problem
    for text, problem in (cases[0], cases[2], cases[-2]):  # bad JSON, a key, a row's number
        path.write_text(text)
        done = python(clone, "sentemb.review.leaderboard")
        assert done.returncode != 0 and "Traceback" not in done.stderr, (text, done.stderr)
        error = done.stderr.strip().splitlines()[-1]
        assert "reports/leaderboard.json: " in error and problem in error, (problem, error)
        assert path.read_text() == text and report.read_text() == before


def test_the_board_is_the_repository_s_from_any_of_its_folders(
    listed: tuple[Path, dict],
) -> None:
    clone, board = listed
    done = python(clone / "metrics", "sentemb.review.leaderboard")
    assert done.returncode == 0, done.stderr[-2000:]
    assert not (clone / "metrics" / "reports").exists()
    assert json.loads((clone / "reports" / "leaderboard.json").read_text()) == board
    report = (clone / "reports" / "leaderboard.md").read_text()
    assert report.splitlines()[0] == render.TITLE


def test_a_folder_at_the_json_path_is_refused_before_the_board_is_built(
    listed: tuple[Path, dict],
) -> None:
    clone, _ = listed
    (clone / "reports" / "board").mkdir()
    done = python(clone, "sentemb.review.leaderboard", "--json", "reports/board")
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr[-2000:]
    assert "it would replace a folder" in done.stderr.strip().splitlines()[-1]
    with pytest.raises(OSError, match="it would replace a folder"):  # with the report, first
        leaderboard_module.check_outputs(clone / "reports" / "board", clone / board_module.REPORT)


@pytest.mark.parametrize("kind", ["link", "other file", "folder"])
def test_a_report_path_the_board_did_not_write_is_refused_before_anything_is_written(
    listed: tuple[Path, dict], kind: str
) -> None:
    """A link, a file that is not a leaderboard (a user's notes, params.yaml) or a folder at
    `--report` is refused, and the JSON is left as it was: both are checked first."""
    clone, _ = listed
    path, notes = clone / "reports" / "leaderboard.json", clone / "notes.md"
    path.write_text(path.read_text() + " ")  # a mark the board's rewrite would remove
    notes.write_text("my notes\n")
    target = clone / "reports" / "mine.md"
    if kind == "link":
        target.symlink_to(notes)
    elif kind == "other file":
        target.write_text("my notes\n")
    else:
        target.mkdir()
    done = python(clone, "sentemb.review.leaderboard", "--report", "reports/mine.md")
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr[-2000:]
    assert done.stderr.strip().splitlines()[-1].startswith("error: reports/mine.md: ")
    assert path.read_text().endswith(" ") and notes.read_text() == "my notes\n"


def test_an_experiment_that_cannot_be_read_is_left_out_not_a_stop(
    listed: tuple[Path, dict], monkeypatch: pytest.MonkeyPatch
) -> None:
    """An experiment whose params predate today's layout is a left-out row naming why; the
    other rows are written."""
    clone, board = listed
    base = git(clone, "rev-parse", "HEAD")
    (clone / "params.yaml").write_text("seed: 42\nmethods: [simcse]\n")
    git(clone, "commit", "-qam", "an old layout")
    experiment_ref(clone, base, git(clone, "rev-parse", "HEAD"), "old-layout")
    git(clone, "reset", "-q", "--hard", base)
    after = rebuild(clone, monkeypatch)  # a stop would raise its error here
    assert [row["label"] for row in after["rows"]] == [row["label"] for row in board["rows"]]
    old = next(s for s in after["stale"] if s["label"] == "old-layout")
    assert old["reason"].startswith("cannot be read: params.yaml: unknown top-level key(s)")
    assert old["rerun"] == "dvc exp remove old-layout, or: dvc exp run --queue -S method=..."


@pytest.mark.parametrize(
    ("name", "label"), [("noisy-sscl", "sscl"), ("old-dclr", "dclr"), ("gone-paser", "paser")]
)
def test_a_removed_experiment_leaves_the_board(
    listed: tuple[Path, dict], name: str, label: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`dvc exp remove NAME` (the advice for an experiment that cannot be read) drops its row or
    left-out entry on the next call, although git keeps its commit until it prunes it."""
    clone, board = listed
    head = git(clone, "rev-parse", "HEAD")
    sha = git(clone, "rev-parse", f"refs/exps/{head[:2]}/{head[2:]}/{name}")
    labels = [*(r["label"] for r in board["rows"]), *(s["label"] for s in board["stale"])]
    assert label in labels
    removed = subprocess.run(
        [sys.executable, "-m", "dvc", "exp", "remove", name], cwd=clone, capture_output=True
    )
    assert removed.returncode == 0, removed.stderr
    assert git(clone, "cat-file", "-t", sha) == "commit"  # git still has it
    after = rebuild(clone, monkeypatch)
    left = [*(r["label"] for r in after["rows"]), *(s["label"] for s in after["stale"])]
    assert left == [x for x in labels if x != label]
    assert rebuild(clone, monkeypatch) == after


def test_a_shorter_run_of_today_s_code_keeps_the_recorded_rows(listed: tuple[Path, dict]) -> None:
    """A new experiment on fewer seeds does not move what the kept rows were tested against
    (SimCSE's run on its own seeds, and the compare params)."""
    clone, board = listed
    iscse = gone_rows(board)[0]
    base = git(clone, "rev-parse", "HEAD")
    write_experiment(clone, fake_experiment("sscl", [1], 3))
    git(clone, "add", "metrics", "predictions", "plots", "params.yaml")
    git(clone, "commit", "-qm", "sscl on seed 1")
    experiment_ref(clone, base, git(clone, "rev-parse", "HEAD"), "short-sscl")
    git(clone, "reset", "-q", "--hard", base)
    path = clone / "reports" / "leaderboard.json"
    path.write_text(json.dumps(board | {"rows": [*board["rows"], iscse]}))
    done = python(clone, "sentemb.review.leaderboard")
    assert done.returncode == 0, done.stderr[-2000:]
    after = json.loads(path.read_text())
    assert "iscse (seeds=[1])" in [r["label"] for r in after["rows"]], after["stale"]
    assert "sscl (seeds=[1])" in [r["label"] for r in after["rows"]]
    assert after["tested_against"] == board["tested_against"]
    assert "iscse (seeds=[1]) at 0000000: its commit is not here: kept as recorded" in done.stderr


def test_a_report_that_cannot_be_written_leaves_the_board_as_it_was(
    listed: tuple[Path, dict], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A report that cannot be written (here: a character no encoding takes) leaves the JSON as
    it was: the report is written in full before the JSON."""
    clone, _ = listed
    board = clone / "reports" / "leaderboard.json"
    board.write_text(board.read_text() + " ")  # a mark the board's rewrite would remove
    before = {path.name: path.read_bytes() for path in clone.glob("reports/*")}
    monkeypatch.setattr(leaderboard_module, "leaderboard", lambda board: "# Leaderboard\n\ud800")
    with pytest.raises(UnicodeEncodeError):
        rebuild(clone, monkeypatch)
    assert {path.name: path.read_bytes() for path in clone.glob("reports/*")} == before


def test_a_branch_named_workspace_is_reached_as_heads_workspace(
    repo: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """`workspace` is the working folder, as for DVC, with a warning where a branch has that
    name; `heads/workspace` is the branch."""
    clone = tmp_path / "repo"
    shutil.copytree(repo, clone)
    head = git(clone, "rev-parse", "HEAD")
    git(clone, "commit", "--allow-empty", "-qm", "on a branch")
    branch = git(clone, "rev-parse", "HEAD")
    git(clone, "update-ref", "refs/remotes/origin/workspace", branch)
    git(clone, "pack-refs", "--all")  # listed before the loose branch, yet named after it
    git(clone, "branch", "workspace")
    git(clone, "reset", "-q", "--hard", head)
    with caplog.at_level("WARNING", logger="review"):
        assert revisions.commits(("HEAD", "workspace"), clone) == [head, None]
    assert caplog.text.count("git's ref of that name is ") == 1
    assert "is heads/workspace or remotes/origin/workspace\n" in caplog.text
    assert revisions.commits(("HEAD", "heads/workspace"), clone) == [head, branch]
    caplog.clear()
    git(clone, "branch", "-D", "workspace")
    git(clone, "update-ref", "-d", "refs/remotes/origin/workspace")
    git(clone, "branch", "feature/workspace", branch)  # not named workspace
    assert revisions.commits(("HEAD", "workspace"), clone) == [head, None]
    assert not caplog.text


@pytest.mark.parametrize(
    ("autocasts", "shown"), [(["fp32", "fp32"], "fp32"), (["fp32", "bf16"], "bf16/fp32")]
)
def test_a_row_says_the_precision_its_seeds_trained_in(autocasts: list[str], shown: str) -> None:
    """`auto` resolves per CPU, so a row names what its train.json files recorded."""
    experiment = fake_experiment("simcse", [1, 2], 1)
    for files, autocast in zip(experiment.files, autocasts, strict=True):
        files["train"]["autocast"] = autocast
    assert board_module.trained_on(experiment) == f"wiki1m_for_simcse.txt, 100 sentences, {shown}"


@pytest.mark.parametrize(
    ("mine", "reference", "expected"),
    [
        ({"method": "dclr", "train.seed": 1}, {"method": "simcse", "train.seed": 1}, {}),
        ({"train.lr": 2e-5}, {"train.lr": 3e-5}, {"train.lr": 2e-5}),
        ({"train.lr": None}, {"train.lr": 3e-5}, {"train.lr": None}),
        ({"train.checkpoint_steps": 50}, {"train.checkpoint_minutes": 2.0}, {}),
        ({"a": 1, "b": [1]}, {"a": 1, "b": [1, 2], "c": 3}, {"b": [1]}),
        ({"train.corpus": "wiki"}, {"train.corpus": BUILT_IN["wiki"]}, {}),
        (
            {"train.corpus": "sts"},
            {"train.corpus": BUILT_IN["wiki"]},
            {"train.corpus": BUILT_IN["sts"]},
        ),
        ({"train.corpus": ["wiki"]}, {"train.corpus": "x"}, {"train.corpus": ["wiki"]}),
    ],
    ids=["method", "value", "null", "renamed", "added", "value-renamed", "to-today", "unhashable"],
)
def test_only_params_both_revisions_have_name_a_run(
    mine: dict[str, object], reference: dict[str, object], expected: dict[str, object]
) -> None:
    """A param added, removed or renamed between two revisions is not a choice of the run:
    it would make the default run of older code a variant whose rerun command today's params
    refuse (`-S train.checkpoint_steps=50`). A value renamed since is today's spelling."""
    assert board_module.differing(mine, reference) == expected


def test_each_suite_without_an_average_keeps_its_own_columns() -> None:
    """own's sets and mteb's tasks are columns of their own suite only, refined rows included."""
    entries = [
        {"sts": 1.0, "own:faq": 2.0, "mteb:STS12": 3.0},
        {"own/repal:mine": 4.0, "mteb/whitening:SciFact": 5.0},
    ]
    columns = render.board_columns(entries)
    assert [c for c in columns if c[0] == "own"] == [("own", "faq"), ("own", "mine")]
    assert [c for c in columns if c[0] == "mteb"] == [("mteb", "STS12"), ("mteb", "SciFact")]
    averaged = [(suite, None) for suite in SUITES if suite not in ("own", "mteb")]
    assert [c for c in columns if c[1] is None] == averaged
