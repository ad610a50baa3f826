"""DVC as users run it: `dvc push`/`dvc pull` to a fresh clone, and `dvc repro` after a kill."""

from __future__ import annotations

import glob
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from sentemb.config import read_yaml
from sentemb.services import CONNECT_SECONDS
from sentemb.training.checkpoint import STATE_FILE

from support import REPO
from support.repos import DVC, clone_of, git_dvc_repo, repo_env, run
from support.services import remote_of


def dvc_env(tmp_path: Path) -> dict[str, str]:
    """`repo_env` with MLflow's database under `tmp_path`."""
    return repo_env(MLFLOW_TRACKING_URI=f"sqlite:///{tmp_path / 'mlflow.db'}")


def clone_worktree(dest: Path, env: dict[str, str]) -> None:
    """A git clone of this repo at `dest` with the working tree's uncommitted changes on top, so
    the stages, dvc.yaml and params under test are the ones the library beside them goes with."""
    run(["git", "clone", "-q", str(REPO), str(dest)], dest.parent, env)
    listing = ["git", "ls-files", "-z", "--modified", "--others", "--exclude-standard"]
    for name in filter(None, run(listing, REPO, env).split("\0")):
        target = dest / name
        target.parent.mkdir(parents=True, exist_ok=True)
        if (REPO / name).is_file():
            shutil.copy2(REPO / name, target)
        else:  # deleted in the working tree
            target.unlink(missing_ok=True)


@pytest.mark.slow
def test_push_then_pull_in_fresh_clone(tmp_path: Path, mirror: Path) -> None:
    env = dvc_env(tmp_path)
    first, second, remote = tmp_path / "first", tmp_path / "second", tmp_path / "remote"
    clone_worktree(first, env)
    params = read_yaml(first / "params.yaml")
    params["data"].update(mirror=str(mirror), corpus_size=200, datasets=["wiki1m", "STS13"])
    (first / "params.yaml").write_text(yaml.safe_dump(params))
    run([*DVC, "repro", "corpus"], first, env)
    run([*DVC, "remote", "add", "-d", "store", str(remote)], first, env)
    run([*DVC, "push"], first, env)
    run(["git", "add", "-A"], first, env)
    run(["git", "commit", "-qm", "data"], first, env)
    run(["git", "clone", "-q", str(first), str(second)], tmp_path, env)
    run([*DVC, "pull", "download", "corpus"], second, env)
    corpus = (second / "data/corpus.txt").read_text().splitlines()
    assert len(corpus) == 200
    assert (second / "data/raw/MANIFEST.json").read_bytes() == (
        first / "data/raw/MANIFEST.json"
    ).read_bytes()
    status = run([*DVC, "status", "corpus"], second, env)
    assert "changed" not in status and "deleted" not in status


STAGE = "train@1"
RUN_FILES = (
    "metrics/runs/1/train.json",
    "plots/runs/1/loss_curve.json",
    "plots/runs/1/dev_curve.json",
    "models/1/model.safetensors",
    "models/1/README.md",
)
SECONDS_LINE = re.compile(rb'\n *"seconds": [0-9.]+')  # the stage's wall time: never identical


def run_files(clone: Path) -> dict[str, bytes]:
    """The run's outputs, byte for byte, with the metrics file's wall time left out."""
    return {name: SECONDS_LINE.sub(b"", (clone / name).read_bytes()) for name in RUN_FILES}


@pytest.fixture(scope="module")
def prepared(tmp_path_factory: pytest.TempPathFactory, mirror: Path, tiny_model_dir: Path) -> Path:
    """A clone set up for 6 steps of SimCSE on the tiny model, downloaded and phrased."""
    work = tmp_path_factory.mktemp("prepared")
    clone = work / "clone"
    env = dvc_env(work)
    clone_worktree(clone, env)
    params = read_yaml(clone / "params.yaml")
    params["data"].update(mirror=str(mirror), corpus_size=500, datasets=["wiki1m", "STSBenchmark"])
    params["model"]["name_or_path"] = str(tiny_model_dir)
    params.update(method="simcse", seeds=[1])
    params["train"].update(batch_size=16, max_steps=6, eval_steps=2, checkpoint_minutes=0.0)
    (clone / "params.yaml").write_text(yaml.safe_dump(params))
    run([*DVC, "repro", "phrases"], clone, env)
    return clone


def last_step(clone: Path) -> int:
    """The step of the newest complete checkpoint (0: none yet)."""
    found = glob.glob(str(clone / f"checkpoints/1/*/checkpoint-*/{STATE_FILE}"))
    steps = []
    for state in found:
        try:
            steps.append(json.loads(Path(state).read_text())["step"])
        except (OSError, ValueError):  # rotated away meanwhile
            continue
    return max(steps, default=0)


@pytest.fixture(scope="module")
def uninterrupted(prepared: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, bytes]:
    clone = tmp_path_factory.mktemp("whole") / "clone"
    shutil.copytree(prepared, clone, symlinks=True)
    run([*DVC, "repro", STAGE], clone, dvc_env(clone.parent))
    return run_files(clone)


@pytest.mark.slow
def test_dvc_repro_resumes_training_killed_with_sigkill(
    prepared: Path, uninterrupted: dict[str, bytes], tmp_path: Path
) -> None:
    """`dvc repro` and its training process are killed once checkpoint 2 of 6 is written;
    `dvc status` shows the stage changed; `dvc repro` resumes and ends byte-identical. (Other
    kill points, per method, are `tests/training/test_trainer.py`'s, in one process.)"""
    kill_at = 2
    clone = tmp_path / "clone"
    shutil.copytree(prepared, clone, symlinks=True)
    env = dvc_env(tmp_path)
    job = subprocess.Popen(
        [*DVC, "repro", STAGE],
        cwd=clone,
        env=env,
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 300
    while last_step(clone) < kill_at and job.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    os.killpg(job.pid, signal.SIGKILL)
    job.wait()
    killed_at = last_step(clone)
    assert kill_at <= killed_at < 6, "the run ended before it could be killed"
    assert STAGE in run([*DVC, "status", STAGE], clone, env)
    resumed = subprocess.run(
        [*DVC, "repro", STAGE], cwd=clone, env=env, capture_output=True, text=True, timeout=600
    )
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert f"at step {killed_at}" in resumed.stderr + resumed.stdout
    assert run_files(clone) == uninterrupted
    assert "changed" not in run([*DVC, "status", STAGE], clone, env)


WRITER = """
import os, signal
from pathlib import Path
from sentemb.io import atomic_path
with atomic_path("out.json") as tmp:
    tmp.write_text('{"half": ')
    if Path("mode").read_text() == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    tmp.write_text('{"whole": true}')
"""


@pytest.mark.slow
def test_stage_killed_while_writing_leaves_no_partial_output(tmp_path: Path) -> None:
    env = dvc_env(tmp_path)
    git_dvc_repo(tmp_path, env)
    (tmp_path / "write.py").write_text(WRITER)
    (tmp_path / "mode").write_text("ok")
    stage = ["stage", "add", "-n", "write", "-d", "write.py", "-d", "mode", "-o", "out.json"]
    run([*DVC, *stage, f"{sys.executable} write.py"], tmp_path, env)
    run([*DVC, "repro"], tmp_path, env)
    (tmp_path / "mode").write_text("kill")
    killed = subprocess.run([*DVC, "repro"], cwd=tmp_path, env=env, capture_output=True)
    assert killed.returncode != 0
    out = tmp_path / "out.json"
    assert not out.exists() or json.loads(out.read_text()) == {"whole": True}
    assert "write" in run([*DVC, "status"], tmp_path, env)
    (tmp_path / "mode").write_text("ok, again")  # new content: run it (no run-cache restore)
    run([*DVC, "repro"], tmp_path, env)
    assert json.loads(out.read_text()) == {"whole": True}
    assert not list(tmp_path.glob(".partial-*"))  # the killed writer's temporary is gone


FAKE_STAGE = """
import json, os, sys, time
from pathlib import Path
if os.environ.get("FAKE_FAIL"):
    sys.exit(1)
if os.environ.get("FAKE_HANG"):
    Path(os.environ["FAKE_HANG"]).touch()
    time.sleep(600)
if os.environ.get("FAKE_LOG"):
    with open(os.environ["FAKE_LOG"], "a") as log:
        print(*sys.argv[1:], file=log)
for out in map(Path, sys.argv[1:]):
    out.parent.mkdir(parents=True, exist_ok=True)
    if not out.suffix:
        out.mkdir(exist_ok=True)
        (out / "weights").write_text(os.environ["FAKE_RUN"])
    elif out.parts[0] == "plots":
        fields = ("step", "dev", "loss", "lambda2", "bound", "alignment", "uniformity")
        out.write_text(json.dumps([dict.fromkeys(fields, 1.0)]))
    else:
        out.write_text(json.dumps({"avg": 1.0, "run": os.environ["FAKE_RUN"]}))
"""


def output_paths(stage: dict) -> list[str]:
    """Every output a dvc.yaml stage declares (outs, metrics, plots), templates unresolved."""
    return [
        next(iter(out)) if isinstance(out, dict) else out
        for kind in ("outs", "metrics", "plots")
        for out in stage.get(kind, [])
    ]


def fake_pipeline(folder: Path, env: dict[str, str]) -> None:
    """A git + DVC repo whose dvc.yaml is this one's (stages, matrices, params, outputs and
    their flags) with each command replaced by `fake.py` writing the stage's outputs and the
    code deps dropped; one method and one seed; run once and committed."""
    spec = yaml.safe_load((REPO / "dvc.yaml").read_text())
    for entry in spec["stages"].values():
        stage = entry.get("do", entry)
        stage["cmd"] = " ".join(["python fake.py", *output_paths(stage)])
        code = ("src/", "stages/")
        stage["deps"] = ["fake.py", *(d for d in stage["deps"] if not d.startswith(code))]
    params = read_yaml(REPO / "params.yaml")
    params.update(method="simcse", seeds=[1])
    params["train"]["corpus"] = "corpus.txt"  # a user's corpus: the fake download writes none
    (folder / "corpus.txt").write_text("A sentence.\n")
    (folder / "data/own").mkdir(parents=True)  # as a clone has it: the folder of eval.own's sets
    (folder / "data/own/README.md").write_text("Your test sets.\n")
    git_dvc_repo(folder, env)
    (folder / "dvc.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))
    (folder / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    (folder / "fake.py").write_text(FAKE_STAGE)
    run([*DVC, "repro"], folder, {**env, "FAKE_RUN": "committed"})
    run(["git", "add", "-A"], folder, env)
    run(["git", "commit", "-qm", "results"], folder, env)


def git_changes(folder: Path, env: dict[str, str]) -> list[str]:
    return run(["git", "status", "--porcelain"], folder, env).splitlines()


def restore(repo: Path, env: dict[str, str]) -> None:
    """What a user runs to get the committed outputs back: git's, then DVC's."""
    run(["git", "checkout", "--", "."], repo, env)
    run([*DVC, "checkout"], repo, env)


@pytest.mark.slow
@pytest.mark.usefixtures("terminal_sigint")
def test_interrupted_or_failed_stage_is_restored_from_git_and_the_cache(tmp_path: Path) -> None:
    """Every stage failing in turn, and Ctrl-C (SIGINT to dvc and the stage, as a terminal
    sends it) during `train`: DVC removed each stage's outputs before running it (what lets its
    run cache restore them later), `dvc status` lists the stage, and `git checkout` with
    `dvc checkout` bring every committed output back; `dvc repro --dry`, `dvc metrics show` and
    `dvc plots show` work afterwards."""
    env = {**dvc_env(tmp_path), "FAKE_RUN": "new"}
    repo = tmp_path / "repo"
    repo.mkdir()
    fake_pipeline(repo, env)

    failed = subprocess.run(
        [*DVC, "repro", "--force", "--ignore-errors"],
        cwd=repo,
        env={**env, "FAKE_FAIL": "1"},
        capture_output=True,
        text=True,
    )
    stages = run([*DVC, "stage", "list", "--name-only"], repo, env).split()
    assert "summary" in stages and failed.stderr.count("exited with 1") == len(stages)
    assert "train@1" in run([*DVC, "status"], repo, env)
    restore(repo, env)
    assert git_changes(repo, env) == []
    assert "up to date" in run([*DVC, "status"], repo, env)

    params = read_yaml(repo / "params.yaml")
    params["simcse"]["temperature"] = 0.1  # a param only `train` reads
    (repo / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    started = tmp_path / "started"
    job = subprocess.Popen(
        [*DVC, "repro"],
        cwd=repo,
        env={**env, "FAKE_HANG": str(started)},
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 120
    while not started.exists() and job.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert started.exists(), "the train stage did not start"
    os.killpg(job.pid, signal.SIGINT)
    assert job.wait(timeout=60) != 0
    assert "train@1" in yaml.safe_load(run([*DVC, "status", "--json"], repo, env))
    restore(repo, env)  # params.yaml too: the committed run is back
    assert git_changes(repo, env) == []
    assert "Running stage" not in run([*DVC, "repro", "--dry"], repo, env)
    assert "metrics/summary.json" in run([*DVC, "metrics", "show"], repo, env)
    run([*DVC, "plots", "show"], repo, env)
    assert (repo / "models/1/weights").read_text() == "committed"


def test_every_stage_can_be_restored_from_the_run_cache() -> None:
    """No output is `persist: true`: DVC's run cache skips a stage with one, and switching an
    experiment back (`-S method=simcse`) must restore every stage instead of computing it."""
    from dvc.repo import Repo

    with Repo(str(REPO)) as repo:
        persisting = [
            f"{stage.addressing}: {out.def_path}"
            for stage in repo.index.stages
            for out in stage.outs
            if out.persist
        ]
    assert not persisting, f"outputs that keep their stage out of the run cache: {persisting}"


MAKE = ["make", "-s", "-f", str(REPO / "Makefile"), "-o", ".venv/.installed"]


@pytest.fixture(scope="module")
def pushed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A git + DVC repo with one stage (each run adds a line to `ran.log` in its clone), run,
    pushed to the local remote `store` (`<origin>/../remote`) and committed."""
    origin = tmp_path_factory.mktemp("pushed") / "origin"
    origin.mkdir()
    env = dvc_env(origin.parent)
    git_dvc_repo(origin, env)
    (origin / "dep").write_text("v1\n")
    (origin / ".gitignore").write_text("ran.log\n")
    stage = {"cmd": "echo ran >> ran.log && cp dep out.txt", "deps": ["dep"], "outs": ["out.txt"]}
    (origin / "dvc.yaml").write_text(yaml.safe_dump({"stages": {"make": stage}}))
    run([*DVC, "repro"], origin, env)
    run([*DVC, "remote", "add", "-d", "store", str(origin.parent / "remote")], origin, env)
    run([*DVC, "push"], origin, env)
    run(["git", "add", "-A"], origin, env)
    run(["git", "commit", "-qm", "pushed"], origin, env)
    return origin


def ran(folder: Path) -> str:
    """What the stage's runs in `folder` wrote to `ran.log` ("" if it never ran there)."""
    log = folder / "ran.log"
    return log.read_text() if log.exists() else ""


@pytest.mark.slow
def test_make_repro_pulls_what_a_configured_remote_holds(pushed: Path, tmp_path: Path) -> None:
    """`make repro` runs `dvc pull` first where a remote is configured: a fresh clone gets the
    pushed output instead of computing it; without a remote, or with one that lacks the
    objects, the stage is computed; a pull that fails (here: it would overwrite a file the user
    changed) warns, keeps the file and does not stop the run."""
    env = dvc_env(tmp_path)
    pulled = clone_of(pushed, tmp_path / "pulled")
    run([*MAKE, "repro"], pulled, env)
    assert (pulled / "out.txt").read_text() == "v1\n" and ran(pulled) == ""

    empty = tmp_path / "empty"
    empty.mkdir()
    for name, remote in (("no-remote", None), ("empty-remote", empty)):
        folder = clone_of(pushed, tmp_path / name)
        command = ["remote", "remove", "store"] if remote is None else ["remote", "add", "-f"]
        run([*DVC, *command, *(["store", str(remote)] if remote else [])], folder, env)
        done = subprocess.run([*MAKE, "repro"], cwd=folder, env=env, capture_output=True, text=True)
        assert done.returncode == 0 and "warning:" not in done.stderr, done.stderr
        assert (folder / "out.txt").read_text() == "v1\n" and ran(folder) == "ran\n"

    (pulled / "out.txt").write_text("mine\n")
    failed = subprocess.run([*MAKE, "pull"], cwd=pulled, env=env, capture_output=True, text=True)
    assert failed.returncode == 0
    assert "warning: dvc pull failed" in failed.stderr
    assert (pulled / "out.txt").read_text() == "mine\n"


@pytest.mark.slow
def test_switching_the_method_back_recomputes_nothing(tmp_path: Path) -> None:
    """`dvc exp run -S method=dclr` runs the chains of the new method; `-S method=simcse` then
    runs no stage at all: DVC's run cache restores every output of the committed run."""
    env = {**dvc_env(tmp_path), "FAKE_RUN": "exp"}
    repo = tmp_path / "repo"
    repo.mkdir()
    fake_pipeline(repo, env)
    committed = {p: p.read_bytes() for p in (repo / "metrics").rglob("*.json")}
    env["FAKE_LOG"] = str(tmp_path / "ran.log")
    run([*DVC, "exp", "run", "-S", "method=iscse+dclr"], repo, env)
    ran = (tmp_path / "ran.log").read_text().splitlines()
    assert len(ran) == 5  # train, refine, evaluate and analyze of seed 1, and the summary
    run([*DVC, "exp", "run", "-S", "method=simcse"], repo, env)
    assert (tmp_path / "ran.log").read_text().splitlines() == ran  # nothing ran again
    assert {p: p.read_bytes() for p in (repo / "metrics").rglob("*.json")} == committed


@pytest.mark.slow
def test_the_corpus_file_is_a_dependency(tmp_path: Path) -> None:
    """DVC hashes the file `train.corpus` names: one changed byte reruns stage `corpus` and
    nothing else while what it keeps is the same (the fake writes the same output). `dvc exp
    run -S train.corpus=<another file>` runs it on that file first (then the stages whose
    params, `train`, name the corpus)."""
    env = {**dvc_env(tmp_path), "FAKE_RUN": "committed"}
    repo = tmp_path / "repo"
    repo.mkdir()
    fake_pipeline(repo, env)
    env["FAKE_LOG"] = str(tmp_path / "ran.log")
    (repo / "corpus.txt").write_text("A sentence!\n")
    assert "corpus" in run([*DVC, "status"], repo, env)
    run([*DVC, "repro"], repo, env)
    (repo / "mine.jsonl").write_text('{"text": "Mine."}\n')
    run([*DVC, "exp", "run", "-S", "train.corpus=mine.jsonl"], repo, env)
    ran = (tmp_path / "ran.log").read_text().splitlines()
    assert ran[:2] == ["data/corpus.txt metrics/corpus.json"] * 2
    assert "mine.jsonl" in (repo / "dvc.lock").read_text()


def resolved(folder: Path, method: str) -> tuple[list[str], list[str], list[str]]:
    """The metrics paths, plots paths and commands DVC resolves from this dvc.yaml with
    `method` in params.yaml."""
    from dvc.repo import Repo

    folder.mkdir()
    shutil.copy(REPO / "dvc.yaml", folder)
    params = read_yaml(REPO / "params.yaml") | {"method": method}
    (folder / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    with Repo.init(str(folder), no_scm=True) as repo:
        stages = repo.index.stages
        paths = [(o.def_path, o.metric, o.plot) for stage in stages for o in stage.outs]
        commands = sorted(stage.cmd for stage in stages)
    return (
        sorted(path for path, metric, _ in paths if metric),
        sorted(path for path, _, plot in paths if plot),
        commands,
    )


@pytest.mark.parametrize("method", ["iscse+dclr", "simcse + iscse", "paser"])
def test_no_path_or_command_depends_on_the_method(tmp_path: Path, method: str) -> None:
    """A method switch changes the numbers of the same files, so `dvc metrics diff` and `dvc exp
    show` compare methods column by column; the method never reaches a command line, so any
    spec `parse_spec` accepts (spaces too) runs as the stages read it from params.yaml."""
    simcse = resolved(tmp_path / "simcse", "simcse")
    assert resolved(tmp_path / "other", method) == simcse
    assert simcse[0] == ["metrics/corpus.json", "metrics/summary.json"]  # the card, the headline


UNREACHABLE_REMOTES = [
    "local missing folder",
    "http closed port",
    "http unresolvable host",
    "http silent server",
    "ssh silent server",
    "s3 silent server",
]


@pytest.mark.slow
@pytest.mark.parametrize("kind", UNREACHABLE_REMOTES)
def test_make_repro_goes_on_when_the_remote_cannot_be_reached(
    kind: str, pushed: Path, tmp_path: Path
) -> None:
    """A default remote that does not answer (each kind as in test_remote.py): `make repro`
    says so in one warning, pulls nothing and computes the stage. The bound is configured, not
    timed: one first contact (a silent server saw one connection, and `dvc pull`, with its
    retries of 10 min over HTTP, 2 min over SSH, 7 min for S3, never came), given up after
    CONNECT_SECONDS."""
    env = dvc_env(tmp_path)
    folder = clone_of(pushed, tmp_path / "clone")
    with remote_of(kind, tmp_path) as (config, server):
        run([*DVC, "remote", "add", "-f", "-d", "store", config["url"]], folder, env)
        for key in set(config) - {"url"}:
            run([*DVC, "remote", "modify", "store", key, config[key]], folder, env)
        done = subprocess.run([*MAKE, "repro"], cwd=folder, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    warnings = [line for line in done.stderr.splitlines() if line.startswith("warning:")]
    assert len(warnings) == 1 and "cannot be reached" in warnings[0], done.stderr
    if "silent" in kind:
        assert f"no answer within {CONNECT_SECONDS:g} s" in warnings[0]
        assert server is not None and server.connections == 1
    assert (folder / "out.txt").read_text() == "v1\n" and ran(folder) == "ran\n"
