"""`python -m sentemb.progress`: one progress line per stage over `dvc repro` (issue 17)."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from sentemb.clock import time_left
from sentemb.progress import Progress, clock, dvc_plan, follow, recorded_seconds, stage_record

from support.repos import git_dvc_repo

FAKE_DVC = """import sys
print("Stage 'download' didn't change, skipping")
for stage in ("train@a-1", "evaluate@a-1-sts"):
    print(f"Running stage '{stage}':")
    print(f"> python stages/{stage}.py")
    print("stage output", flush=True)
sys.exit(int(sys.argv[1]))
"""


def fake_dvc(tmp_path: Path, status: int) -> list[str]:
    script = tmp_path / "dvc.py"
    script.write_text(FAKE_DVC)
    return [sys.executable, str(script), str(status)]


def test_a_line_per_stage_with_k_of_n_elapsed_and_time_left(tmp_path: Path) -> None:
    plan = ["download", "train@a-1", "evaluate@a-1-sts", "evaluate@a-1-chinese"]
    progress = Progress(plan, {"train@a-1": 600.0, "evaluate@a-1-sts": 120.0})
    out = io.StringIO()
    assert follow(fake_dvc(tmp_path, 0), progress, out) == 0
    lines = out.getvalue().splitlines()
    assert lines[0] == "Stage 'download' didn't change, skipping"  # DVC's output, passed on
    assert "stage output" in lines
    progress_lines = [line for line in lines if " · elapsed " in line]
    # download left the plan; the chinese evaluation counts the mean of its kind (120 s)
    assert progress_lines[0].endswith("[1/3] train@a-1 · elapsed 0:00 · ~14 min left")
    assert progress_lines[1].split("] ")[0].endswith("[2/3")
    assert progress_lines[1].endswith("· ~4 min left")
    assert lines[-1].endswith("2 stage(s) ran in 0:00")


def test_dvcs_exit_status_is_kept_and_no_estimate_is_said(tmp_path: Path) -> None:
    out = io.StringIO()
    assert follow(fake_dvc(tmp_path, 3), Progress([]), out) == 3
    first = next(line for line in out.getvalue().splitlines() if " · elapsed " in line)
    assert first.endswith(
        "[1/1] train@a-1 · elapsed 0:00 · time left unknown (no earlier run recorded)"
    )
    assert "ran in" not in out.getvalue()


def test_estimates_use_the_stage_its_kind_or_all_and_this_runs_measures() -> None:
    progress = Progress(["train@b", "refine@b", "x"], {"train@a": 100.0, "train@b": 40.0})
    assert progress.estimate("train@b") == 40.0
    assert progress.estimate("train@c") == 70.0  # mean of its kind
    assert progress.estimate("refine@b") == 70.0  # no kind: mean of all
    progress.measured["refine@a"] = 10.0
    assert progress.estimate("refine@b") == 10.0
    assert Progress(["x"]).estimate("x") is None
    assert clock(59) == "0:59" and clock(3723) == "1:02:03"


@pytest.mark.parametrize(
    ("seconds", "said"),
    [
        (0.4, "~0 s left"),
        (59.4, "~59 s left"),
        (60, "~1 min left"),
        (14 * 60 + 20, "~14 min left"),
        (2 * 3600 - 1, "~120 min left"),
        (2 * 3600, "~2 h left"),
        (5.4e9, "~1,500,000 h left"),
    ],
)
def test_time_left_reads_in_the_unit_of_its_size(seconds: float, said: str) -> None:
    assert time_left(seconds) == said


def test_recorded_seconds_of_a_stage_metrics_files(tmp_path: Path) -> None:
    (tmp_path / "a.json").write_text(json.dumps({"seconds": 2.5, "x": 1}))
    (tmp_path / "b.json").write_text(json.dumps({"seconds": 1}))
    (tmp_path / "c.json").write_text("[1, 2]")
    (tmp_path / "d.json").write_text("not json")
    files = [tmp_path / n for n in ("a.json", "b.json", "c.json", "d.json", "missing.json")]
    assert recorded_seconds(files) == 3.5
    assert recorded_seconds(files[2:]) is None


@pytest.fixture
def tiny_repo(tmp_path: Path) -> Path:
    """A DVC project of three tiny stages (one -> two@x, two@y), run once."""
    env = {**os.environ, "DVC_NO_ANALYTICS": "1"}
    repo = tmp_path / "repo"
    repo.mkdir()
    git_dvc_repo(repo)
    (repo / "dep").write_text("a\n")
    seconds = "echo '{\"seconds\": 30}' > m-${item}.json"
    two = {
        "cmd": f"cp mid out-${{item}} && {seconds}",
        "deps": ["mid"],
        "outs": ["out-${item}"],
        "metrics": [{"m-${item}.json": {"cache": False}}],
    }
    one = {"cmd": "cp dep mid", "deps": ["dep"], "outs": ["mid"]}
    stages = {"one": one, "two": {"foreach": ["x", "y"], "do": two}}
    (repo / "dvc.yaml").write_text(yaml.safe_dump({"stages": stages}))
    subprocess.run([sys.executable, "-m", "dvc", "repro", "-q"], cwd=repo, check=True, env=env)
    return repo


def test_plan_is_what_dvc_repro_will_run_with_recorded_seconds(
    tiny_repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tiny_repo)
    assert dvc_plan([]).plan == []
    forced = dvc_plan(["-f"])
    assert forced.plan == ["one", "two@x", "two@y"]
    assert forced.recorded == {"two@x": 30.0, "two@y": 30.0}
    (tiny_repo / "dep").write_text("b\n")  # one changed: everything downstream runs too
    assert dvc_plan([]).plan == ["one", "two@x", "two@y"]
    assert dvc_plan(["two@y"]).plan == ["one", "two@y"]
    assert dvc_plan(["-s", "two@y"]).plan == []


def test_module_runs_dvc_repro_with_progress_lines(tiny_repo: Path) -> None:
    (tiny_repo / "dep").write_text("c\n")
    env = {**os.environ, "DVC_NO_ANALYTICS": "1"}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env['PATH']}"
    done = subprocess.run(
        [sys.executable, "-m", "sentemb.progress"],
        cwd=tiny_repo,
        env=env,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    lines = [line for line in done.stdout.splitlines() if " · elapsed " in line]
    assert [line.split("] ")[0].split("[")[1] for line in lines] == ["1/3", "2/3", "3/3"]
    assert lines[0].endswith("~2 min left")  # 3 x 30 s and lines[2].endswith("~30 s left")
    assert (tiny_repo / "out-y").read_text() == "c\n"


@pytest.mark.parametrize(
    "content",
    [
        "",
        "{",
        "7",
        '{"stage": "train@42"}',
        "[1, 2]",
        '[{"stage": "train@42"}]',
        '[{"stage": "train@42", "seconds": null}]',
        '[{"stage": "train@42", "seconds": "x"}]',
        '[{"stage": "train@42", "seconds": NaN}]',
        '[{"stage": "train@42", "seconds": -5}]',
        '[{"seconds": 5}]',
    ],
)
def test_a_damaged_seconds_record_gives_no_estimates(tmp_path: Path, content: str) -> None:
    """The estimates are a guide: a record that is not a list of stages with seconds gives none,
    and never stops `dvc repro` with a traceback."""
    path = tmp_path / "seconds.json"
    path.write_text(content)
    assert stage_record(path) == {}
    path.write_text('[{"stage": "train@42", "seconds": 5}, {"stage": "train@42", "seconds": 2}]')
    assert stage_record(path) == {"train@42": 7.0}
