"""DVC as users run it: `dvc push`/`dvc pull` to a fresh clone, and `dvc repro` after a kill."""

from __future__ import annotations

import glob
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
DVC = [sys.executable, "-m", "dvc"]


def run(command: list[str], cwd: Path, env: dict[str, str]) -> str:
    result = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, f"{command}: {result.stdout[-2000:]} {result.stderr[-2000:]}"
    return result.stdout


def dvc_env(tmp_path: Path) -> dict[str, str]:
    return {
        **os.environ,
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
        "DVC_NO_ANALYTICS": "1",
        "MLFLOW_TRACKING_URI": f"sqlite:///{tmp_path / 'mlflow.db'}",
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@example.com",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@example.com",
    }


@pytest.mark.slow
def test_push_then_pull_in_fresh_clone(tmp_path: Path, mirror: Path) -> None:
    env = dvc_env(tmp_path)
    first, second, remote = tmp_path / "first", tmp_path / "second", tmp_path / "remote"
    run(["git", "clone", "-q", str(REPO), str(first)], tmp_path, env)
    params = yaml.safe_load((first / "params.yaml").read_text())
    params["data"].update(mirror=str(mirror), corpus_size=200, datasets=["wiki1m", "STS13"])
    (first / "params.yaml").write_text(yaml.safe_dump(params))
    run([*DVC, "repro", "--single-item", "download"], first, env)
    run([*DVC, "remote", "add", "-d", "store", str(remote)], first, env)
    run([*DVC, "push"], first, env)
    run(["git", "add", "-A"], first, env)
    run(["git", "commit", "-qm", "data"], first, env)
    run(["git", "clone", "-q", str(first), str(second)], tmp_path, env)
    run([*DVC, "pull", "download"], second, env)
    corpus = (second / "data/raw/corpus/train.txt").read_text().splitlines()
    assert len(corpus) == 200
    assert (second / "data/raw/MANIFEST.json").read_bytes() == (
        first / "data/raw/MANIFEST.json"
    ).read_bytes()
    status = run([*DVC, "status", "download"], second, env)
    assert "changed" not in status and "deleted" not in status


STAGE = "train@simcse-1"
RUN_FILES = (
    "metrics/runs/simcse-1/train.json",
    "plots/runs/simcse-1/loss_curve.json",
    "plots/runs/simcse-1/dev_curve.json",
    "models/simcse-1/model.safetensors",
)


@pytest.fixture(scope="module")
def prepared(tmp_path_factory: pytest.TempPathFactory, mirror: Path, tiny_model_dir: Path) -> Path:
    """A clone set up for 6 steps of SimCSE on the tiny model, downloaded and phrased."""
    work = tmp_path_factory.mktemp("prepared")
    clone = work / "clone"
    env = dvc_env(work)
    run(["git", "clone", "-q", str(REPO), str(clone)], work, env)
    params = yaml.safe_load((clone / "params.yaml").read_text())
    params["data"].update(mirror=str(mirror), corpus_size=500, datasets=["wiki1m", "STSBenchmark"])
    params["model"]["name_or_path"] = str(tiny_model_dir)
    params.update(methods=["simcse"], seeds=[1])
    params["train"].update(batch_size=16, max_steps=6, eval_steps=2, checkpoint_steps=1)
    (clone / "params.yaml").write_text(yaml.safe_dump(params))
    run([*DVC, "repro", "phrases"], clone, env)
    return clone


def last_step(clone: Path) -> int:
    found = glob.glob(str(clone / "checkpoints/simcse-1/*/last/state.json"))
    return json.loads(Path(found[0]).read_text())["step"] if found else 0


@pytest.fixture(scope="module")
def uninterrupted(prepared: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, bytes]:
    clone = tmp_path_factory.mktemp("whole") / "clone"
    shutil.copytree(prepared, clone, symlinks=True)
    run([*DVC, "repro", STAGE], clone, dvc_env(clone.parent))
    return {name: (clone / name).read_bytes() for name in RUN_FILES}


@pytest.mark.slow
@pytest.mark.parametrize("kill_at", [2, 5])
def test_dvc_repro_resumes_training_killed_with_sigkill(
    prepared: Path, uninterrupted: dict[str, bytes], tmp_path: Path, kill_at: int
) -> None:
    """`dvc repro` and its training process are killed once checkpoint `kill_at` is written;
    `dvc status` shows the stage changed; `dvc repro` resumes and ends byte-identical."""
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
    assert {name: (clone / name).read_bytes() for name in RUN_FILES} == uninterrupted
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
    run(["git", "init", "-q"], tmp_path, env)
    run([*DVC, "init", "-q"], tmp_path, env)
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
