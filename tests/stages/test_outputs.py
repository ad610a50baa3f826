"""Outputs as the stage scripts write them: nothing the pipeline did not write is ever replaced,
`download` never trades a complete `data/raw` for a poorer one, and data outputs are the same
bytes wherever the repository and the mirror live."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from sentemb.io import MARKER

from support.stages import (
    DOWNLOADED,
    REPO,
    last_error,
    run_stage,
    snapshot,
    tiny_training,
    train_args,
    user_folder,
    write_params,
)

STS13 = "senteval/data/downstream/STS/STS13-en-test"
CORPUS = "corpus/wiki1m_for_simcse.head.txt"


def refused(result: subprocess.CompletedProcess, path: Path, what: str) -> None:
    """One error line: `path` was not written because it would replace `what`."""
    assert last_error(result).startswith(f"error: {path}: not written: it would replace {what}")


@pytest.mark.parametrize("stage", ["evaluate", "evaluate --predictions", "analyze", "phrases"])
def test_file_output_at_a_folder_is_refused(
    downloaded: Path,
    tiny_model_dir: Path,
    mirror: Path,
    tmp_path: Path,
    offline_env: dict,
    stage: str,
) -> None:
    """`--out metrics/` (a folder of tracked files) once replaced the folder by one JSON file;
    the evaluate stage's `<out-dir>/sts.json` and `<predictions-dir>/sts.npz` are such outputs."""
    name = {"evaluate": "sts.json", "evaluate --predictions": "sts.npz"}.get(stage, "metrics")
    folder = user_folder(tmp_path / name)
    params = write_params(tmp_path, mirror, eval={"sts": {"tasks": ["STSBenchmark"]}})
    tfidf = ["--suites", "sts", "--model", "tfidf"]
    predictions = ["--predictions-dir", str(tmp_path)]
    args = {
        "evaluate": [*tfidf, "--out-dir", str(tmp_path)],
        "evaluate --predictions": [*tfidf, "--out-dir", str(tmp_path / "out"), *predictions],
        "analyze": ["--model", str(tiny_model_dir), "--out", str(folder)],
        "phrases": ["--out", str(tmp_path / "phrases"), "--metrics", str(folder)],
    }[stage]
    before = snapshot(tmp_path)
    result = run_stage(
        f"{stage.split()[0]}.py", [*args, "--params", str(params)], downloaded, offline_env
    )
    refused(result, folder, "a folder, and this output is a file")
    assert snapshot(tmp_path) == before  # the folder, and no other output either


@pytest.mark.parametrize("stage", ["train", "refine", "phrases", "download"])
def test_folder_output_at_a_user_folder_is_refused(
    downloaded: Path,
    tiny_model_dir: Path,
    mirror: Path,
    tmp_path: Path,
    offline_env: dict,
    stage: str,
) -> None:
    """A model, refinement, phrases or data folder never replaces a folder the user made."""
    mine = user_folder(tmp_path / "mine")
    if stage == "train":
        params = tiny_training(tmp_path / "run", tiny_model_dir, mirror, 2)
        args = train_args(params, tmp_path / "run", "simcse")
        args[args.index("--out") + 1] = str(mine)
        args[args.index("--checkpoints") + 1] = str(user_folder(tmp_path / "checkpoints"))
    else:
        model = {"name_or_path": str(tiny_model_dir)}
        refine = {"methods": ["whitening"], "corpus_size": 200}
        chinese = {"chinese": {"tasks": []}, "retrieval": {"offline_sets": ["MRPC"]}}
        params = write_params(tmp_path, mirror, model=model, refine=refine, eval=chinese)
        outputs = {
            "refine": {"--metrics": "refine.json", "--plots": "plots"},
            "phrases": {"--metrics": "phrases.json"},
            "download": {"--recorded": "recorded.json"},
        }[stage]
        args = ["--out", str(mine), "--params", str(params)]
        for flag, name in outputs.items():
            args += [flag, str(tmp_path / name)]
    before = snapshot(tmp_path)
    result = run_stage(f"{stage}.py", args, downloaded, offline_env)
    refused(result, mine, f"a folder the pipeline did not write (no {MARKER})")
    after = snapshot(tmp_path)
    if stage == "train":  # the checkpoints written beside the user's files are kept for resuming
        assert {k: v for k, v in after.items() if k in before} == before
        assert not (tmp_path / "run/train.json").exists()
    else:
        assert after == before


def test_rerun_replaces_its_own_folder_outputs(downloaded: Path, offline_env: dict) -> None:
    """The folders a stage wrote are its to replace: download (after the fixture's) and phrases
    run again."""
    runs = [("download.py", []), *[("phrases.py", ["--metrics", "phrases.json"])] * 2]
    for script, args in runs:
        result = run_stage(script, args, downloaded, offline_env)
        assert result.returncode == 0, result.stderr[-3000:]
    for folder in ("data/raw", "data/phrases"):
        listed = (downloaded / folder / MARKER).read_text().splitlines()[1:]
        assert listed == sorted(set(snapshot(downloaded / folder)) - {MARKER})


def mirror_without(mirror: Path, folder: Path, left_out: str = "") -> Path:
    """A mirror at `folder` made of links into `mirror`, without `left_out` (a relative path)
    when given; its own path is `folder`, even resolved."""
    folder.mkdir(parents=True)
    for item in mirror.iterdir():
        if left_out.startswith(f"{item.name}/"):
            mirror_without(item, folder / item.name, left_out.removeprefix(f"{item.name}/"))
        elif item.name != left_out:
            (folder / item.name).symlink_to(item)
    return folder


def data_of(clone: Path) -> dict[str, bytes]:
    return snapshot(clone / "data") if (clone / "data").exists() else {}


@pytest.mark.parametrize(
    ("case", "lost"),
    [
        pytest.param(case, lost, id=case)
        for case, lost in (
            ("wrong mirror", "wiki1m (the training corpus), STS13, STSBenchmark"),
            ("mirror without STS13", "STS13"),
            ("mirror without the corpus", "wiki1m (the training corpus)"),
            ("QQP downloaded before, now offline", "QQP"),
        )
    ],
)
@pytest.mark.parametrize("earlier", [True, False], ids=["earlier data", "first download"])
def test_download_never_loses_data(
    downloaded: Path,
    mirror: Path,
    tmp_path: Path,
    offline_env: dict,
    case: str,
    lost: str,
    earlier: bool,
) -> None:
    """A dataset the mirror holds, or that an earlier download fetched, missing now is one error
    before anything is written: `data/raw` and the recorded checksums stay as they were."""
    clone = tmp_path / "clone"
    clone.mkdir()
    if earlier:
        shutil.copytree(downloaded / "data", clone / "data", symlinks=True)
    source = mirror
    if case == "wrong mirror":
        source = tmp_path / "no-such-mirror"
    elif case.startswith("mirror without"):
        source = mirror_without(mirror, tmp_path / "partial", STS13 if "STS13" in case else CORPUS)
    write_params(clone, source, data={"datasets": DOWNLOADED, "timeout": 2})
    if case.startswith("QQP"):  # as a download when online would have recorded it
        recorded = {f"qqp/{split}.tsv": "0" * 64 for split in ("train", "dev")}
        (clone / "data").mkdir(exist_ok=True)
        (clone / "data/checksums.recorded.json").write_text(json.dumps(recorded))
    before = data_of(clone)
    error = last_error(run_stage("download.py", [], clone, offline_env))
    assert error.startswith(f"error: data.mirror: {lost.count(',') + 1} dataset(s) ")
    assert f"could not be had: {lost} (first: " in error
    assert "data/raw is as it was" in error and str(source) in error
    assert data_of(clone) == before
    assert list(clone.glob("data/.partial-*")) == []


def test_earlier_dataset_missing_now_is_an_error(
    downloaded: Path, tmp_path: Path, offline_env: dict
) -> None:
    """A dataset the earlier `data/raw` held (here QQP, as if once downloaded) is required."""
    clone = tmp_path / "clone"
    shutil.copytree(downloaded, clone, symlinks=True)
    manifest = json.loads((clone / "data/raw/MANIFEST.json").read_text())
    manifest["datasets"]["QQP"] = {"qqp/train.tsv": "0" * 64}
    (clone / "data/raw/MANIFEST.json").write_text(json.dumps(manifest))
    before = data_of(clone)
    error = last_error(run_stage("download.py", [], clone, offline_env))
    assert "could not be had: QQP (first: QQP: qqp/train.tsv is not in the mirror" in error
    assert data_of(clone) == before


def clone_of_repo(folder: Path, mirror: str, workers: int) -> Path:
    """A checkout's files the data stages read, with `data.mirror: mirror`."""
    folder.mkdir(parents=True)
    shutil.copytree(REPO / "stages", folder / "stages")
    (folder / "data").mkdir()
    shutil.copy(REPO / "data" / "checksums.recorded.json", folder / "data")
    data = {"datasets": DOWNLOADED, "timeout": 2, "corpus_size": 300}
    write_params(folder, Path(mirror), data=data, phrases={"workers": workers})
    return folder


def results(metrics: Path) -> bytes:
    """A metrics file without the stage's wall time (`seconds`, which no two runs share)."""
    values = json.loads(metrics.read_text(encoding="utf-8"))
    assert values.pop("seconds") >= 0
    return json.dumps(values).encode()


def test_data_outputs_do_not_depend_on_where_or_who(
    mirror: Path, tmp_path: Path, offline_env: dict
) -> None:
    """Two clones in different folders, the mirror at its real path and at another one given
    relative to the clone (a tree of links), other users, homes, time zones, locales, hash seeds
    and worker counts: byte-identical data outputs."""
    mirror_without(mirror, tmp_path / "links" / "datasets")
    clones = {
        "user-a7": clone_of_repo(tmp_path / "a", str(mirror), workers=1),
        "user-b9": clone_of_repo(tmp_path / "home b/src/repo", "../../../links/datasets", 2),
    }
    for number, (user, clone) in enumerate(clones.items()):
        own = {"USER": user, "LOGNAME": user, "PYTHONHASHSEED": str(number)}
        own |= {"TZ": ["UTC", "Asia/Tokyo"][number], "LC_ALL": ["C.UTF-8", "C"][number]}
        own["HOME"] = str(clone.parent)
        own["MLFLOW_TRACKING_URI"] = f"sqlite:///{clone.parent / 'mlflow.db'}"
        for script in ("download.py", "corpus.py", "phrases.py"):
            result = run_stage(
                str(clone / "stages" / script), [], clone, offline_env | own, process=True
            )
            assert result.returncode == 0, result.stderr[-3000:]
    first, second = (
        snapshot(clone / "data") | {"phrases.json": results(clone / "metrics/phrases.json")}
        for clone in clones.values()
    )
    assert {"raw/MANIFEST.json", "corpus.txt", "phrases/idf.json"} <= set(first)
    assert sorted(first) == sorted(second)
    assert [name for name in first if first[name] != second[name]] == []
    for blob in first.values():
        assert str(tmp_path).encode() not in blob and str(mirror).encode() not in blob
        assert b"user-a7" not in blob
