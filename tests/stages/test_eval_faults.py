"""The evaluate, refine and analyze stages on faults a user hits: a model whose vectors cannot be
scored, a score that is not a number, datasets absent from the data folder, a refinement of
another model, an analysis threshold that selects nothing. Each is one `error:` line, exit 1,
and no output written."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from sentemb.data.sources import DATASETS
from sentemb.encoder import Encoder
from sentemb.identity import model_identity
from sentemb.refine.base import CHINESE, CHINESE_SCOPE, ENGLISH, ENGLISH_SCOPE, Fitted
from sentemb.refine.config import RefineConfig
from sentemb.refine.repal import RepALConfig, RepALFit
from sentemb.refine.store import save_refinement
from sentemb.refine.whitening import Whitening
from sentemb.registry import SUITES

from support import REPO
from support.models import LAST_NORM, edited_copy, set_weight
from support.stages import LINKED_CORPUS, last_error, run_stage, write_params
from support.training import STSB, write_stsb

SMALL_SUITES = {  # one small real task per suite
    "sts": {"tasks": ["STSBenchmark"]},
    "transfer": {"tasks": ["TREC"], "kfold": 2, "inner_kfold": 2},
    "chinese": {"tasks": ["PAWSX"]},
    "retrieval": {"offline_sets": ["PAWSX"]},
    "own": [{"name": "pairs", "kind": "sts", "path": "data/own/pairs.tsv"}],  # `write_own_set`
    "mteb": {"tasks": ["data.own.mteb_tasks:STSBenchmarkTest"]},  # the repository's, on data/raw
}


def write_own_set(work: Path, data: Path) -> None:
    """SMALL_SUITES' own set and the repository's MTEB task module, under `work` (where the
    stage runs), whose data/raw (what that task reads) is `data`."""
    rows = "".join(f"a cat number {i}\ta dog number {i % 3}\t{i % 5}\n" for i in range(8))
    (work / "data/own").mkdir(parents=True, exist_ok=True)
    (work / "data/own/pairs.tsv").write_text("sentence1\tsentence2\tscore\n" + rows)
    shutil.copy(REPO / "data/own/mteb_tasks.py", work / "data/own/mteb_tasks.py")
    raw = work / "data/raw"
    if not raw.exists() and data.resolve() != raw.resolve():
        raw.symlink_to(data.resolve())


FAULTY = {  # model -> the start of the error its vectors give
    "nan": (set_weight("embeddings.LayerNorm.weight", float("nan")), "non-finite vectors"),
    "inf": (set_weight(f"{LAST_NORM}.bias", float("inf")), "non-finite vectors"),
    "constant": (set_weight(f"{LAST_NORM}.weight", 0.0), "the same vector for all"),
}


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory, tiny_model_dir: Path) -> dict[str, Path]:
    """The tiny model's faulty copies (NaN, inf or constant vectors), one with other weights of
    the same width, and a model of another width (16)."""
    from transformers import AutoTokenizer, BertConfig, BertModel

    root = tmp_path_factory.mktemp("models")
    made = {name: edited_copy(tiny_model_dir, root / name, e) for name, (e, _) in FAULTY.items()}
    made["other"] = edited_copy(tiny_model_dir, root / "other", set_weight("pooler.dense.bias", 1))
    config = BertConfig(
        hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=32
    )
    BertModel(config).save_pretrained(root / "wide")
    AutoTokenizer.from_pretrained(tiny_model_dir).save_pretrained(root / "wide")
    made["wide"] = root / "wide"
    return made


def evaluate(
    work: Path,
    data: Path,
    model: Path | str,
    suite: str,
    env: dict,
    *extra: str,
    error: bool = True,
    **sections,
) -> tuple:
    """Run the evaluate stage on `suite` with its small params: its one error line (or, with
    `error=False`, the finished process) and its output path."""
    suites = {suite: SMALL_SUITES[suite]} | sections.pop("eval", {})
    write_own_set(work, data)
    params = write_params(work, data, model={"batch_size": 256}, eval=suites, **sections)
    out = work / "out" / f"{suite}.json"
    args = ["--suites", suite, "--model", str(model), "--out-dir", str(out.parent)]
    args += ["--data", str(data)]
    result = run_stage("evaluate.py", [*args, "--params", str(params), *extra], work, env)
    return (last_error(result) if error else result), out


# --- 1. vectors that cannot be scored, scores that are not numbers ----------------------------


@pytest.mark.parametrize("suite", list(SUITES))
@pytest.mark.parametrize("fault", ["nan", "constant"])
def test_model_without_usable_vectors_is_one_error_in_every_suite(
    tmp_path: Path, data_root: Path, models: dict[str, Path], stage_env, suite: str, fault: str
) -> None:
    extra = ["--predictions-dir", str(tmp_path / "p")] if SUITES[suite].cls.pairs else []
    error, out = evaluate(tmp_path, data_root, models[fault], suite, stage_env, *extra)
    assert error.startswith(f"error: {models[fault]}: the encoder gave {FAULTY[fault][1]}")
    assert not out.parent.exists() and not (tmp_path / "p").exists()


def test_infinite_vectors_are_one_error(
    tmp_path: Path, data_root: Path, models: dict[str, Path], stage_env
) -> None:
    error, out = evaluate(tmp_path, data_root, models["inf"], "sts", stage_env)
    assert error.startswith(f"error: {models['inf']}: the encoder gave non-finite vectors")
    assert not out.parent.exists()


def test_constant_scores_on_one_set_are_one_error_naming_the_task(
    tmp_path: Path, stage_env
) -> None:
    """TF-IDF vectors differ, but no pair shares a word: every cosine is 0 and the Spearman of
    constant predictions is undefined (NaN); it is refused, not written."""
    data = tmp_path / "data"
    write_stsb(
        data,
        [f"g\tf\t2012\t{i}\t{i % 5}.0\talpha{i} beta{i}\tgamma{i} delta{i}" for i in range(20)],
    )
    manifest = {"datasets": {"STSBenchmark": {}}, "missing": {}}
    (data / "MANIFEST.json").write_text(json.dumps(manifest))
    error, out = evaluate(tmp_path, data, "tfidf", "sts", stage_env)
    assert error == "error: tfidf, suite sts: STSBenchmark is nan, not a score"
    assert not out.parent.exists()


def fitted_refinement(folder: Path, model: Path, fit: Fitted, methods: list[str]) -> Path:
    """A refinement of `model` holding `fit` for English and for PAWSX, as the refine stage
    saves it (RepAL at the corpus level only: no keyword masking)."""
    identity = model_identity(str(model), Encoder.from_pretrained(str(model)))
    config = RefineConfig(
        methods=methods, suites=list(SUITES), repal=RepALConfig(levels=["corpus"])
    )
    fits = {ENGLISH_SCOPE: fit, f"{CHINESE_SCOPE}PAWSX": fit}
    save_refinement(folder, config, fits, None, {ENGLISH: identity, CHINESE: identity})
    return folder


@pytest.mark.parametrize(
    ("suite", "method", "fit", "message"),
    [
        (
            "sts",
            "whitening",
            {"whitening": Whitening(np.zeros((32, 32)), np.zeros(32))},
            "the same vector for all",
        ),
        ("chinese", "repal", {"repal": RepALFit(0, 1, np.full(32, np.nan))}, "non-finite vectors"),
        ("retrieval", "repal", {"repal": RepALFit(0, 1, np.full(32, np.inf))}, "non-finite"),
    ],
    ids=["sts-whitening", "chinese-repal", "retrieval-repal"],
)
def test_refined_rows_without_usable_vectors_are_one_error(
    tmp_path: Path,
    data_root: Path,
    tiny_model_dir: Path,
    stage_env,
    suite: str,
    method: str,
    fit: Fitted,
    message: str,
) -> None:
    refined = fitted_refinement(tmp_path / "refined", tiny_model_dir, fit, [method])
    args = ("--refined", str(refined))
    error, out = evaluate(tmp_path, data_root, tiny_model_dir, suite, stage_env, *args)
    assert error.startswith(f"error: {tiny_model_dir} + {method}: the encoder gave {message}")
    assert not out.parent.exists()


# --- 3. a refinement belongs to the model it was fitted on ------------------------------------


@pytest.mark.parametrize(("other", "shown"), [("other", "32-dim"), ("wide", "16-dim")])
def test_refinement_of_another_model_is_one_error_naming_both(
    tmp_path: Path,
    data_root: Path,
    tiny_model_dir: Path,
    models: dict[str, Path],
    stage_env,
    other: str,
    shown: str,
) -> None:
    fit = {"repal": RepALFit(0.0, 1.0, np.zeros(32, dtype=np.float32))}
    refined = fitted_refinement(tmp_path / "refined", tiny_model_dir, fit, ["repal"])
    args = ("--refined", str(refined))
    error, out = evaluate(tmp_path, data_root, models[other], "sts", stage_env, *args)
    fitted_on = f"fitted on {tiny_model_dir} (weights sha256 "
    assert error.startswith(f"error: {refined}: its english refinement was {fitted_on}")
    assert f"32-dim vectors), not on {models[other]} (weights sha256 " in error
    assert f"{shown} vectors); re-run the refine stage with --model {models[other]}" in error
    assert not out.parent.exists()


def test_refinement_follows_the_weights_not_the_path(
    tmp_path: Path, data_root: Path, tiny_model_dir: Path, stage_env
) -> None:
    fit = {"repal": RepALFit(0.0, 1.0, np.zeros(32, dtype=np.float32))}
    refined = fitted_refinement(tmp_path / "refined", tiny_model_dir, fit, ["repal"])
    copy = shutil.copytree(tiny_model_dir, tmp_path / "copy")
    args = ("--refined", str(refined))
    result, out = evaluate(tmp_path, data_root, copy, "sts", stage_env, *args, error=False)
    assert result.returncode == 0, result.stderr[-3000:]
    assert set(json.loads(out.read_text())["repal"]) == {"STSBenchmark", "avg"}


@pytest.mark.parametrize(("fault", "fit_on"), [("constant", "eval"), ("nan", "corpus")])
def test_refine_stage_on_a_model_without_usable_vectors_writes_nothing(
    tmp_path: Path, data_root: Path, models: dict[str, Path], stage_env, fault: str, fit_on: str
) -> None:
    refine = {"methods": ["whitening"], "fit_on": fit_on, "corpus_size": 200}
    params = write_params(tmp_path, data_root, refine=refine)
    outputs = {"--out": "refined", "--metrics": "refine.json", "--plots": "plots"}
    args = [*(x for flag, name in outputs.items() for x in (flag, str(tmp_path / name)))]
    args += ["--model", str(models[fault]), "--data", str(data_root), "--params", str(params)]
    args += ["--corpus", str(data_root / LINKED_CORPUS)]
    error = last_error(run_stage("refine.py", args, tmp_path, stage_env))
    assert error.startswith(f"error: {models[fault]}: the encoder gave {FAULTY[fault][1]}")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["params.yaml"]


@pytest.mark.parametrize(
    ("model", "chinese"), [("tfidf", None), (None, "tfidf")], ids=["model", "chinese-model"]
)
def test_tfidf_with_a_refinement_is_one_error(
    tmp_path: Path, data_root: Path, tiny_model_dir: Path, stage_env, model, chinese
) -> None:
    model = model or tiny_model_dir
    chinese_section = {"chinese": {"model": chinese}} if chinese else {}
    (tmp_path / "r").mkdir()
    error, out = evaluate(
        tmp_path,
        data_root,
        model,
        "retrieval",
        stage_env,
        "--refined",
        str(tmp_path / "r"),
        eval=chinese_section,
    )
    assert error == "error: --refined: the TF-IDF baseline is never refined (no mask token)"
    assert not out.parent.exists()


# --- 2. absent datasets -----------------------------------------------------------------------


# own: the user's files; mteb: no manifest (its data's absence: test_mteb_stage)
@pytest.mark.parametrize("suite", [s for s in SUITES if s not in ("own", "mteb")])
def test_every_task_absent_is_one_error(tmp_path: Path, stage_env, suite: str) -> None:
    """`download` with a wrong mirror and no network on a fresh clone: a manifest, no data."""
    data = tmp_path / "raw"
    data.mkdir()
    missing = {name: f"{name}: not in the mirror and no network" for name in DATASETS}
    (data / "MANIFEST.json").write_text(json.dumps({"datasets": {}, "missing": missing}))
    error, out = evaluate(tmp_path, data, "tfidf", suite, stage_env)
    assert error.startswith(f"error: {suite}: no task could be scored under {data}: ")
    assert "not in the mirror and no network" in error
    assert not out.parent.exists()


def test_a_failing_suite_leaves_no_file_of_the_suites_scored_before_it(
    tmp_path: Path, data_root: Path, stage_env
) -> None:
    """Every suite in one process: sts, transfer and chinese score, then retrieval has no task
    (QQP and AskUbuntu missing, no offline set): one error, and no metrics file at all."""
    suites = SMALL_SUITES | {"retrieval": {"offline_sets": []}}
    write_own_set(tmp_path, data_root)
    params = write_params(tmp_path, data_root, eval=suites)
    out, predictions = tmp_path / "out", tmp_path / "predictions"
    args = ["--model", "tfidf", "--data", str(data_root), "--params", str(params)]
    args += ["--out-dir", str(out), "--predictions-dir", str(predictions)]
    error = last_error(run_stage("evaluate.py", args, tmp_path, stage_env))
    assert error.startswith(f"error: retrieval: no task could be scored under {data_root}: ")
    assert not out.exists() and not predictions.exists()


def test_downloaded_dataset_whose_files_are_gone_is_one_error(
    tmp_path: Path, data_root: Path, stage_env
) -> None:
    data = tmp_path / "raw"
    data.mkdir()
    (data / "MANIFEST.json").write_text((data_root / "MANIFEST.json").read_text())
    error, out = evaluate(tmp_path, data, "tfidf", "sts", stage_env)
    stsb = data / STSB / "sts-test.csv"  # the file the test split reads, not the dataset's first
    assert error == (
        f"error: {stsb}: not found, though {data / 'MANIFEST.json'} lists STSBenchmark as "
        f"downloaded: {data} was changed after the download stage; run it again"
    )
    assert not out.parent.exists()


def test_absence_without_a_manifest_is_one_error(tmp_path: Path, mirror: Path, stage_env) -> None:
    """The mirror itself as --data: nothing says why QQP is absent, so it is not skipped."""
    error, out = evaluate(
        tmp_path,
        mirror,
        "tfidf",
        "retrieval",
        stage_env,
        eval={"retrieval": {"offline_sets": ["MRPC"]}},
    )
    assert error == (
        f"error: QQP: not found under {mirror}: qqp/train.tsv, and there is no MANIFEST.json "
        "there saying why: use the download stage's output (--data data/raw), or leave QQP out "
        "of eval.retrieval"
    )
    assert not out.parent.exists()


# --- 4. analysis params -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("analysis", "message"),
    [
        (
            {"positive_threshold": 5.0},
            "error: analysis.positive_threshold: 5.0 selects no STS-B test pair (positives score "
            "above it; the gold scores under {data} go up to 5.0): choose a lower threshold",
        ),
        ({"positive_threshold": 10}, "error: analysis.positive_threshold: 10.0 selects no"),
        ({"uniformity_t": 0}, "error: analysis.uniformity_t: must be > 0, got 0.0"),
    ],
    ids=["threshold-5", "threshold-10", "uniformity_t-0"],
)
def test_analysis_param_that_cannot_work_is_one_error(
    tmp_path: Path, data_root: Path, tiny_model_dir: Path, stage_env, analysis: dict, message: str
) -> None:
    params = write_params(tmp_path, data_root, analysis=analysis)
    out = tmp_path / "analysis.json"
    args = ["--model", str(tiny_model_dir), "--out", str(out), "--data", str(data_root)]
    error = last_error(
        run_stage("analyze.py", [*args, "--params", str(params)], tmp_path, stage_env)
    )
    assert error.startswith(message.format(data=data_root))
    assert not out.exists()


@pytest.mark.parametrize("fault", ["nan", "constant"])
def test_analysis_of_a_model_without_usable_vectors_is_one_error(
    tmp_path: Path, data_root: Path, models: dict[str, Path], stage_env, fault: str
) -> None:
    params = write_params(tmp_path, data_root)
    out = tmp_path / "analysis.json"
    args = ["--model", str(models[fault]), "--out", str(out), "--data", str(data_root)]
    error = last_error(
        run_stage("analyze.py", [*args, "--params", str(params)], tmp_path, stage_env)
    )
    assert error.startswith(f"error: {models[fault]}: the encoder gave {FAULTY[fault][1]}")
    assert not out.exists()
