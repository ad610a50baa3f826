"""Stage `evaluate` with `eval.mteb`: MTEB's scores in mteb.json, MTEB's own result files under
`--results-dir`, and no output at all where a task's data is not here."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from sentemb.evaluation.base import spearman

from support import REPO
from support.stages import last_error, run_stage, write_params

TASK = "data.own.mteb_tasks:STSBenchmarkTest"


@pytest.fixture
def work(downloaded: Path, tmp_path: Path) -> Path:
    """A repository folder: the download stage's data/raw and the repository's task module."""
    (tmp_path / "data" / "own").mkdir(parents=True)
    (tmp_path / "data" / "raw").symlink_to(downloaded / "data" / "raw")
    shutil.copy(REPO / "data/own/mteb_tasks.py", tmp_path / "data/own/mteb_tasks.py")
    return tmp_path


def test_evaluate_scores_a_task_class_and_keeps_mtebs_result_files(
    work: Path, tiny_model_dir: Path, mirror: Path, stage_env
) -> None:
    import mteb
    from huggingface_hub import ModelCard

    params = write_params(work, mirror, eval={"mteb": {"tasks": [TASK], "batch_size": 64}})
    out, results = work / "metrics", work / "results"
    args = ["--suites", "sts", "mteb", "--model", str(tiny_model_dir), "--out-dir", str(out)]
    args += ["--params", str(params), "--results-dir", str(results)]
    args += ["--predictions-dir", str(work / "predictions")]
    result = run_stage("evaluate.py", args, work, stage_env)
    assert result.returncode == 0, result.stderr
    metrics = json.loads((out / "mteb.json").read_text())
    sts = json.loads((out / "sts.json").read_text())
    # the same vectors (one cache); MTEB's cosines are float32, whose ties among the random
    # model's near-equal cosines move Spearman a little (0.01 on the embedded model: test_mteb)
    assert metrics["STSBenchmarkTest"] == pytest.approx(sts["STSBenchmark"], abs=0.1)
    assert metrics["scored_by"] == {"STSBenchmarkTest": "STS: cosine_spearman"}
    assert {"STSBenchmarkTest/cosine_pearson", "seconds"} <= set(metrics)
    folder = results / "mteb/results/sentemb__encoder/plain"
    read = mteb.TaskResult.from_disk(folder / "STSBenchmarkTest.json")  # MTEB reads it as it is
    assert 100 * read.get_score() == pytest.approx(metrics["STSBenchmarkTest"], abs=1e-4)
    with np.load(work / "predictions/mteb.npz") as arrays:  # compare's bootstrap over pairs
        assert set(arrays.files) == {"STSBenchmarkTest/predicted", "STSBenchmarkTest/gold"}
        scored = spearman(arrays["STSBenchmarkTest/predicted"], arrays["STSBenchmarkTest/gold"])
        assert scored == pytest.approx(metrics["STSBenchmarkTest"], abs=1e-6)
    card = ModelCard.load(results / "mteb/README.md")  # the Hub's form of evaluation results
    (scored,) = card.data.eval_results
    assert (scored.dataset_name, scored.metric_type) == ("MTEB STSBenchmarkTest", "cosine_spearman")
    assert scored.metric_value == pytest.approx(metrics["STSBenchmarkTest"])


def test_a_named_task_whose_data_is_not_here_is_one_error_and_no_output(
    work: Path, tiny_model_dir: Path, mirror: Path, offline_env
) -> None:
    params = write_params(work, mirror, eval={"mteb": {"tasks": ["STS12", TASK]}})
    out, results = work / "metrics", work / "results"
    args = ["--model", str(tiny_model_dir), "--out-dir", str(out), "--params", str(params)]
    env = offline_env | {"HF_HOME": str(work / "hf"), "HF_DATASETS_OFFLINE": "1"}
    result = run_stage("evaluate.py", [*args, "--results-dir", str(results)], work, env)
    error = last_error(result)
    assert error.startswith("error: eval.mteb.tasks: no data for STS12 (") and "HF_HOME" in error
    assert not out.exists() and not results.exists()
