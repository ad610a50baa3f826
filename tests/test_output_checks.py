"""Every output of a stage is checked before its work: one below a file is one error naming it,
at once, and nothing is written (not after hours of training, with half the outputs written)."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import make_inputs, run_stage
from test_io import snapshot
from test_stages import REPO, last_error

OUTPUTS = {
    "train": {
        "--out": "model",
        "--metrics": "train.json",
        "--plots": "plots",
        "--checkpoints": "checkpoints",
    },
    "refine": {"--out": "refined", "--metrics": "refine.json", "--plots": "plots"},
    "summary": {"--metrics": "summary.json", "--report": "summary.md", "--plots": "plots"},
    "download": {"--out": "raw", "--recorded": "recorded.json", "--metrics": "download.json"},
}
EXTRA = {"train": ["--method", "simcse", "--seed", "42"]}


def stage_args(stage: str, outputs: dict[str, Path]) -> list[str]:
    """The command line of `stage` with the repo's params and `outputs` (flag -> path)."""
    args = [*EXTRA.get(stage, []), "--params", str(REPO / "params.yaml")]
    for flag, path in outputs.items():
        args += [flag, str(path)]
    return args


@pytest.mark.parametrize(
    ("stage", "flag"),
    [
        ("train", "--plots"),
        ("train", "--checkpoints"),
        ("refine", "--plots"),
        ("summary", "--report"),
        ("summary", "--plots"),
        ("download", "--recorded"),
    ],
)
def test_output_below_a_file_is_refused_before_any_work(
    tmp_path: Path, stage: str, flag: str
) -> None:
    blocker = tmp_path / "blocker"
    blocker.write_text("mine")
    paths = {name: tmp_path / value for name, value in OUTPUTS[stage].items()}
    paths[flag] = blocker / "out"
    args = stage_args(stage, paths)
    make_inputs([f"stages/{stage}.py"], args, tmp_path)  # data/raw, metrics/runs, ...
    before = snapshot(tmp_path)
    error = last_error(run_stage(f"{stage}.py", args, tmp_path))
    assert error.startswith(f"error: {paths[flag]}")  # the output, or a plot file in it
    assert f": not written: {blocker} is a file, not a folder" in error
    assert snapshot(tmp_path) == before


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ('{"a": ', "not valid JSON (Expecting value: line 1 column 7"),
        ("[1, 2]", "expected a mapping of files to sha256s"),
    ],
)
def test_damaged_recorded_checksums_are_one_error_naming_the_file(
    tmp_path: Path, content: str, message: str
) -> None:
    """`data/checksums.recorded.json` cut short or replaced: one error naming it, not a
    traceback, and the file is kept for the user to restore."""
    recorded = tmp_path / "recorded.json"
    recorded.write_text(content)
    paths = {name: tmp_path / value for name, value in OUTPUTS["download"].items()}
    before = snapshot(tmp_path)
    error = last_error(run_stage("download.py", stage_args("download", paths), tmp_path))
    assert error.startswith(f"error: {recorded}: {message}"), error
    assert snapshot(tmp_path) == before
