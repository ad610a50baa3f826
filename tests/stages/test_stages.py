"""The stage scripts as users and DVC run them: real files, exit codes, no partial outputs."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

from sentemb import tracking
from sentemb.config import read_yaml
from sentemb.evaluation.base import spearman
from sentemb.precision import precision_used
from sentemb.registry import REFINEMENTS, SUITES

from support.stages import last_error, run_stage, tiny_training, train_args, write_params


def test_download_and_corpus_write_manifest_corpus_card_and_reasons(
    downloaded: Path, mirror: Path
) -> None:
    """The download stage copies the corpus whole (no STS corpus without every STS set); the
    corpus stage keeps its first 500 sentences (data.corpus_size) and cards them."""
    manifest = json.loads((downloaded / "data/raw/MANIFEST.json").read_text())
    assert set(manifest["datasets"]) == {"wiki1m", "STS13", "STSBenchmark"}
    assert "QQP-clean.zip" in manifest["missing"]["QQP"]
    head = (mirror / "corpus/wiki1m_for_simcse.head.txt").read_text().splitlines()
    assert (downloaded / "data/raw/corpus/wiki1m_for_simcse.txt").read_text().splitlines() == head
    assert not (downloaded / "data/raw/corpus/sts.txt").exists()
    assert (downloaded / "data/corpus.txt").read_text().splitlines() == head[:500]
    card = json.loads((downloaded / "metrics/corpus.json").read_text())
    assert (card["read"], card["kept"], card["duplicates"]) == (11915, 500, 366)
    assert card["dropped"] == {"blank": 0, "duplicate": 0, "beyond_corpus_size": 11415}
    assert card["test_overlap"] == {"sentences": 0, "sample": []}
    assert 0 < card["tokens"]["p50"] <= card["tokens"]["p99"] <= card["tokens"]["max"]


def test_evaluate_tfidf_on_real_sts_with_skips(downloaded: Path, stage_env) -> None:
    out = downloaded / "metrics" / "sts.json"
    result = run_stage(
        "evaluate.py",
        ["--suites", "sts", "--model", "tfidf", "--out-dir", str(out.parent)],
        downloaded,
        stage_env,
    )
    assert result.returncode == 0, result.stderr
    metrics = json.loads(out.read_text())
    assert {"STS13", "STSBenchmark", "avg"} <= set(metrics)
    assert metrics["avg"] == pytest.approx((metrics["STS13"] + metrics["STSBenchmark"]) / 2)
    assert set(metrics["skipped"]) == {"STS12", "STS14", "STS15", "STS16", "SICK"}


def test_evaluate_tiny_model_on_real_chinese_sets(
    downloaded: Path, tiny_model_dir: Path, mirror: Path, stage_env
) -> None:
    out = downloaded / "metrics" / "chinese.json"
    (downloaded / "zh").mkdir()
    params = write_params(
        downloaded / "zh", mirror, eval={"chinese": {"tasks": ["PAWSX", "STS-B"]}}
    )
    args = ["--suites", "chinese", "--model", str(tiny_model_dir), "--out-dir", str(out.parent)]
    args += ["--data", str(mirror), "--params", str(params)]
    result = run_stage("evaluate.py", args, downloaded, stage_env)
    assert result.returncode == 0, result.stderr
    metrics = json.loads(out.read_text())
    assert set(metrics) == {"PAWSX", "STS-B", "avg", "seconds"}
    assert all(-100 <= metrics[k] <= 100 for k in ("PAWSX", "STS-B", "avg"))


def write_own_sets(root: Path) -> list[dict]:
    """An STS table, reranking samples and a BEIR folder under `root/data/own`, as eval.own."""
    own = root / "data" / "own"
    (own / "docs" / "qrels").mkdir(parents=True)
    pairs = [(f"a cat sat on mat {i}", f"a dog ran to park {i % 3}", i % 5) for i in range(6)]
    (own / "pairs.tsv").write_text(
        "sentence1\tsentence2\tscore\n" + "".join(f"{a}\t{b}\t{y}\n" for a, b, y in pairs)
    )
    samples = [
        {"query": f"how to fix {i}", "positive": [f"fix {i}"], "negative": ["unrelated", "x y"]}
        for i in range(4)
    ]
    (own / "faq.jsonl").write_text("".join(json.dumps(s) + "\n" for s in samples))
    documents = "".join(json.dumps({"_id": f"d{i}", "text": f"paper {i}"}) + "\n" for i in range(5))
    (own / "docs" / "corpus.jsonl").write_text(documents)
    (own / "docs" / "queries.jsonl").write_text('{"_id": "q", "text": "paper"}\n')
    (own / "docs" / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq\td1\t1\n")
    return [
        {"name": "pairs", "kind": "sts", "path": "data/own/pairs.tsv"},
        {"name": "faq", "kind": "reranking", "path": "data/own/faq.jsonl"},
        {"name": "docs", "kind": "retrieval", "path": "data/own/docs"},
    ]


def test_evaluate_scores_own_sets_and_keeps_their_pairs_and_items(
    downloaded: Path, tiny_model_dir: Path, mirror: Path, stage_env
) -> None:
    """eval.own's sets scored by the evaluate stage: each set's headline under its name, the
    kinds' other metrics under `<set>/<metric>`, the STS set's pairs and the others' items'
    headline scores in the predictions; with no set, a metrics file of its seconds only."""
    (downloaded / "p").mkdir()
    params = write_params(downloaded / "p", mirror, eval={"own": write_own_sets(downloaded)})
    out, kept = downloaded / "m", downloaded / "pred"
    args = ["--suites", "own", "--model", str(tiny_model_dir), "--out-dir", str(out)]
    args += ["--data", str(mirror), "--params", str(params), "--predictions-dir", str(kept)]
    result = run_stage("evaluate.py", args, downloaded, stage_env)
    assert result.returncode == 0, result.stderr
    metrics = json.loads((out / "own.json").read_text())
    assert set(metrics) == {
        "pairs",
        "faq",
        "faq/map",
        "faq/mrr@10",
        "docs",
        "docs/ndcg@10",
        "docs/mrr@10",
        "docs/recall@100",
        "seconds",
    }
    assert metrics["faq"] == metrics["faq/map"] and metrics["docs"] == metrics["docs/ndcg@10"]
    with np.load(kept / "own.npz") as arrays:
        assert set(arrays.files) == {"pairs/predicted", "pairs/gold", "faq/items", "docs/items"}
        assert arrays["faq/items"].mean() == pytest.approx(metrics["faq"])
        assert len(arrays["docs/items"]) == 1
    none = write_params(downloaded / "p", mirror)
    args = ["--suites", "own", "--model", str(tiny_model_dir), "--out-dir", str(out)]
    result = run_stage("evaluate.py", [*args, "--params", str(none)], downloaded, stage_env)
    assert result.returncode == 0, result.stderr
    assert set(json.loads((out / "own.json").read_text())) == {"seconds"}


def test_bad_param_is_one_clear_error_and_no_output(
    downloaded: Path, mirror: Path, stage_env
) -> None:
    bad = downloaded / "bad"
    bad.mkdir()
    params = write_params(bad, mirror, eval={"sts": {"taks": ["STS13"]}})
    out = bad / "sts.json"
    args = ["--suites", "sts", "--model", "tfidf", "--out-dir", str(bad), "--params", str(params)]
    result = run_stage("evaluate.py", args, downloaded, stage_env)
    assert result.returncode == 1
    assert (
        result.stderr.strip()
        .splitlines()[-1]
        .startswith("error: eval.sts: unknown key(s) ['taks']")
    )
    assert not out.exists()


def test_train_stage_end_to_end(
    downloaded: Path, tiny_model_dir: Path, mirror: Path, stage_env
) -> None:
    work = downloaded / "train"
    params = tiny_training(work, tiny_model_dir, mirror, 4)
    args = train_args(params, work, "sscl+dclr")
    result = run_stage("train.py", args, downloaded, stage_env)
    assert result.returncode == 0, result.stderr[-3000:]
    metrics = json.loads((work / "train.json").read_text())
    assert (
        metrics["method"] == "sscl+dclr" and metrics["steps"] == 4 and metrics["sentences"] == 500
    )
    assert [p["step"] for p in json.loads((work / "plots/dev_curve.json").read_text())] == [2, 4]
    assert (work / "plots/train_curves.png").read_bytes()[:4] == b"\x89PNG"
    assert (work / "model" / "model.safetensors").is_file()
    assert metrics["seconds"] > 0  # the stage's wall time
    precision = read_yaml(params)["train"].get("precision", "auto")  # `auto` resolved here
    assert metrics["autocast"] == precision_used(precision, torch.device("cpu"))
    assert "step 4/4: loss " in result.stderr  # no terminal: the bar's news as log lines
    assert "base_model: " in (work / "model" / "README.md").read_text()  # its model card
    artifacts = Path(stage_env["MLFLOW_TRACKING_URI"].removeprefix("sqlite:///")).parent
    where = (  # an MLflow model where the pinned versions allow the flavour, else the folder
        "mlartifacts/*/artifacts/model/model"
        if tracking.flavour_unsupported()
        else "mlartifacts/models/*/artifacts/model.sentence_transformer"
    )
    logged = list(artifacts.glob(where))
    assert logged, result.stderr[-3000:]
    assert {"model.safetensors", "modules.json", "1_Pooling"} <= {
        p.name for p in logged[0].iterdir()
    }


@pytest.mark.slow
def test_train_nproc_runs_the_stage_under_torchrun(
    downloaded: Path, tiny_model_dir: Path, mirror: Path, stage_env
) -> None:
    """`train.nproc: 2`: the stage launches itself in 2 processes (gloo on this CPU; no manual
    torchrun, no `dvc commit`), which split the global batch of 16; rank 0 writes the outputs
    once and the exit status is torchrun's."""
    work = downloaded / "ddp"
    params = tiny_training(work, tiny_model_dir, mirror, 2)
    values = read_yaml(params)
    values["train"]["nproc"] = 2
    params.write_text(yaml.safe_dump(values))
    env = {**stage_env, "CUDA_VISIBLE_DEVICES": "", "OMP_NUM_THREADS": "1"}
    result = run_stage(
        "train.py", train_args(params, work, "simcse"), downloaded, env, process=True
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "2 processes, 8 sentences of each batch apiece" in result.stderr
    assert result.stderr.count("INFO train: best dev ") == 1  # rank 0 alone reports
    metrics = json.loads((work / "train.json").read_text())
    assert metrics["steps"] == 2 and (work / "model" / "model.safetensors").is_file()


@pytest.mark.parametrize(
    ("method", "argument", "message"),
    [
        ("simcse+dlcr", None, "error: method: 'simcse+dlcr' must join distinct known methods"),
        ("simcse", "dlcr", "error: method: 'dlcr' must join distinct known methods"),
        (
            ["simcse", "dclr"],
            None,
            "error: method: one experiment is one method, got the list ['simcse', 'dclr']; "
            "queue one experiment per method: dvc exp run --queue -S method=simcse,dclr",
        ),
    ],
)
def test_train_unknown_method_fails_cleanly(
    downloaded: Path, mirror: Path, tmp_path: Path, stage_env, method, argument, message: str
) -> None:
    """The method comes from params.yaml (what `dvc exp run -S method=...` sets) unless
    `--method` names one; a typo or a list is one error before anything is written."""
    params = write_params(tmp_path, mirror, method=method)
    args = train_args(params, tmp_path, argument)
    assert last_error(run_stage("train.py", args, downloaded, stage_env)).startswith(message)
    assert not (tmp_path / "model").exists() and not (tmp_path / "train.json").exists()


def test_phrases_then_paser_training(
    downloaded: Path, tiny_model_dir: Path, mirror: Path, stage_env
) -> None:
    work = downloaded / "paser"
    phrases = work / "phrases"
    params = tiny_training(
        work,
        tiny_model_dir,
        mirror,
        2,
        phrases={"workers": 2, "chunk_size": 100},
        paser={"phrases": str(phrases / "rake.jsonl"), "decoder_layers": 1},
    )
    metrics = work / "phrases.json"
    args = ["--params", str(params), "--out", str(phrases), "--metrics", str(metrics)]
    result = run_stage("phrases.py", args, downloaded, stage_env)
    assert result.returncode == 0, result.stderr[-3000:]
    assert json.loads(metrics.read_text())["sentences"] == 500
    for name in ("rake.jsonl", "keywords.jsonl"):
        assert len((phrases / name).read_text().splitlines()) == 500
    result = run_stage("train.py", train_args(params, work, "paser"), downloaded, stage_env)
    assert result.returncode == 0, result.stderr[-3000:]
    assert (work / "model/paser_decoder/model.safetensors").is_file()


def test_phrases_bad_param_leaves_no_output(downloaded: Path, mirror: Path, stage_env) -> None:
    work = downloaded / "bad-phrases"
    work.mkdir()
    params = write_params(work, mirror, phrases={"top_k": 0})
    args = ["--params", str(params), "--out", str(work / "out"), "--metrics", str(work / "m.json")]
    result = run_stage("phrases.py", args, downloaded, stage_env)
    assert result.returncode == 1
    assert result.stderr.strip().splitlines()[-1] == "error: phrases.top_k: must be >= 1, got 0"
    assert not (work / "out").exists() and not (work / "m.json").exists()


def test_refine_then_evaluate_with_and_without_refinement(
    tiny_model_dir: Path, mirror: Path, stage_env, tmp_path: Path
) -> None:
    """phrases -> refine -> evaluate on real STS-B and two Chinese sets with the tiny model."""
    datasets = ["wiki1m", "STSBenchmark", "PAWSX", "STS-B-zh", "MRPC"]
    params = write_params(
        tmp_path,
        mirror,
        data={"datasets": datasets},
        phrases={"workers": 1},
        eval={
            "chinese": {"tasks": ["PAWSX", "STS-B"]},
            "retrieval": {"offline_sets": ["PAWSX", "MRPC"]},
        },
        refine={"corpus_size": 400, "suites": ["sts", "chinese", "retrieval"]},
    )
    params.write_text(
        params.read_text().replace(
            "name_or_path: sentence-transformers/all-MiniLM-L6-v2",
            f"name_or_path: {tiny_model_dir}",
        )
    )
    for script, args in (
        ("download.py", []),
        ("corpus.py", []),
        ("phrases.py", ["--metrics", "phrases.json"]),
        ("refine.py", ["--out", "refined", "--metrics", "refine.json", "--plots", "plots"]),
    ):
        result = run_stage(script, args, tmp_path, {**stage_env, "no_proxy": "*"})
        assert result.returncode == 0, result.stderr[-3000:]
    assert (tmp_path / "data/phrases/idf.json").is_file()
    fitted = json.loads((tmp_path / "refine.json").read_text())
    assert set(fitted) == {"fit_on", "english", "chinese/PAWSX", "chinese/STS-B", "seconds"}
    for scope in ("english", "chinese/PAWSX"):
        assert {"lambda1", "lambda2", "dev/repal", "cosine/whitening", "whitening/dims"} <= set(
            fitted[scope]
        )
        assert fitted[scope]["dev/repal"] >= fitted[scope]["dev/none"]  # λ = 0 is on the grid
    curve = json.loads((tmp_path / "plots/refine_bound.json").read_text())
    assert [p["lambda2"] for p in curve] == yaml.safe_load(params.read_text())["refine"]["repal"][
        "lambda2"
    ]
    assert (tmp_path / "plots/refine_bound.png").read_bytes()[:4] == b"\x89PNG"
    params.write_text(params.read_text().replace("tasks: [MR, CR", "tasks: [MRPC, CR"))
    args = ["--refined", "refined", "--out-dir", "scores", "--predictions-dir", "predictions"]
    result = run_stage("evaluate.py", args, tmp_path, stage_env)  # every suite, one process
    assert result.returncode == 0, result.stderr[-3000:]
    assert sorted(p.name for p in (tmp_path / "predictions").iterdir()) == [
        "chinese.npz",
        "mteb.npz",  # eval.mteb lists no task: an empty archive
        "own.npz",  # eval.own lists no set: an empty archive
        "sts.npz",
    ]
    for suite in SUITES:
        metrics = json.loads((tmp_path / "scores" / f"{suite}.json").read_text())
        assert metrics["seconds"] >= 0
        plain = {k for k in metrics if k not in (*REFINEMENTS, "skipped", "seconds")}
        if suite in ("own", "mteb"):  # no set or task listed: nothing scored, nothing refined
            assert plain == set() and "repal" not in metrics
            continue
        if suite == "transfer":  # not in refine.suites: plain scores only
            assert "repal" not in metrics and "MRPC" in plain
            continue
        assert set(metrics["repal"]) == set(metrics["whitening"]) == plain
        assert metrics["repal"]["avg"] != metrics["avg"]
    scored = np.load(tmp_path / "predictions/sts.npz")
    assert sorted(scored.files) == ["STSBenchmark/gold", "STSBenchmark/predicted"]
    sts = json.loads((tmp_path / "scores/sts.json").read_text())
    assert (
        spearman(scored["STSBenchmark/predicted"], scored["STSBenchmark/gold"])
        == sts["STSBenchmark"]
    )
    assert sorted(np.load(tmp_path / "predictions/chinese.npz").files) == [
        "PAWSX/gold",
        "PAWSX/predicted",
        "STS-B/gold",
        "STS-B/predicted",
    ]
    args = ["--suites", "transfer", "--out-dir", "t", "--predictions-dir", "p"]
    result = run_stage("evaluate.py", args, tmp_path, stage_env)
    assert result.returncode == 1 and "error: --predictions-dir: only for" in result.stderr
    args = ["--suites", "sts", "--model", "tfidf", "--refined", "refined", "--out-dir", "t"]
    result = run_stage("evaluate.py", args, tmp_path, stage_env)
    assert result.returncode == 1 and "error: --refined: the TF-IDF baseline" in result.stderr
    assert not (tmp_path / "t").exists() and not (tmp_path / "p").exists()


def fake_run(root: Path, name: str, noise: float, rng: np.random.Generator, analysis: dict) -> None:
    """A run's files as train/evaluate/analyze write them, with scores computed from
    synthetic pair predictions (STS12 of two subsets, STS-B; two Chinese sets)."""
    sets = {
        "sts": {"STS12/a": 40, "STS12/b": 30, "STSBenchmark": 60},
        "chinese": {"ATEC": 50, "BQ": 40},
    }
    for suite, sizes in sets.items():
        arrays = {}
        for name_, size in sizes.items():
            gold = np.random.default_rng(size).uniform(0, 5, size)
            arrays[f"{name_}/gold"] = gold
            arrays[f"{name_}/predicted"] = gold / 5 + rng.normal(0, noise, size)
        (root / "predictions" / name).mkdir(parents=True, exist_ok=True)
        np.savez(root / "predictions" / name / f"{suite}.npz", **arrays)
        tasks = {}
        for task in dict.fromkeys(k.split("/")[0] for k in sizes):
            keys = [k for k in sizes if k.split("/")[0] == task]
            tasks[task] = spearman(
                np.concatenate([arrays[f"{k}/predicted"] for k in keys]),
                np.concatenate([arrays[f"{k}/gold"] for k in keys]),
            )
        metrics = {**tasks, "avg": float(np.mean(list(tasks.values())))}
        if suite == "sts":
            metrics["repal"] = {k: v + 1 for k, v in metrics.items()}
        write_json_file(root / "metrics/runs" / name / f"{suite}.json", metrics)
    write_json_file(
        root / "metrics/runs" / name / "transfer.json", {"MR": 70.0 + noise, "avg": 70.0}
    )
    write_json_file(root / "metrics/runs" / name / "retrieval.json", {"avg": 50.0})
    write_json_file(
        root / "metrics/runs" / name / "train.json", {"sentences": 500, "autocast": "fp32"}
    )
    write_json_file(root / "metrics/runs" / name / "refine.json", {"fit_on": "eval"})
    write_json_file(root / "metrics/runs" / name / "analysis.json", analysis)
    for kind in ("loss", "dev"):
        curve = [{"step": s, kind: 1.0 / s + noise} for s in (1, 2, 3)]
        write_json_file(root / "plots/runs" / name / f"{kind}_curve.json", curve)


def write_json_file(path: Path, data: object) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data))


def test_analyze_then_summary(
    tiny_model_dir: Path, mirror: Path, stage_env, tmp_path: Path
) -> None:
    """analyze (tiny model, real STS-B test), then the summary of 2 seeds of synthetic runs:
    headline, report, plots; a missing run file is one error and writes nothing."""
    params = write_params(tmp_path, mirror, compare={"resamples": 200}, method="sscl", seeds=[1, 2])
    analysis = tmp_path / "analysis.json"
    args = ["--model", str(tiny_model_dir), "--out", str(analysis), "--data", str(mirror)]
    result = run_stage("analyze.py", args, tmp_path, stage_env)
    assert result.returncode == 0, result.stderr[-3000:]
    measured = json.loads(analysis.read_text())
    assert measured["sentences"] > 2000 and measured["positive_pairs"] > 100
    assert len(measured["token_wise"]) == 3 and len(measured["inter_layer"]) == 2
    assert measured["uniformity"] < 0 < measured["alignment"]
    rng = np.random.default_rng(0)
    for seed in (1, 2):
        fake_run(tmp_path, str(seed), 0.2, rng, measured)
    for folder in ("metrics/reference", "metrics/tfidf"):
        for suite in SUITES:
            write_json_file(tmp_path / folder / f"{suite}.json", {"avg": 40.0})
    write_json_file(tmp_path / "metrics/reference/analysis.json", measured)
    result = run_stage("summary.py", ["--params", str(params)], tmp_path, stage_env)
    assert result.returncode == 0, result.stderr[-3000:]
    headline = json.loads((tmp_path / "metrics/summary.json").read_text())
    assert set(headline) == {"trained", "untrained", "tfidf"}
    assert set(headline["trained"]) == {"sts", "sts/repal", "transfer", "chinese", "retrieval"}
    assert set(headline["trained"]["sts"]) == {"STS12", "STSBenchmark", "avg"}
    assert "seconds" not in headline  # the headline holds scores alone
    report = (tmp_path / "reports/summary.md").read_text()
    assert "# Summary: sscl" in report and "| sscl + RepAL |" in report
    assert "| untrained model |" in report and "## Deviations from the papers" in report
    assert "- refinements fitted on: eval" in report  # as the runs' refine.json say
    for name in ("training", "alignment_uniformity", "cosine_density", "layers"):
        assert (tmp_path / f"plots/summary/{name}.png").read_bytes()[:4] == b"\x89PNG"
    (tmp_path / "metrics/runs/2/chinese.json").unlink()
    (tmp_path / "reports/summary.md").unlink()
    result = run_stage("summary.py", ["--params", str(params)], tmp_path, stage_env)
    assert last_error(result).startswith("error: metrics/runs/2/chinese.json: not found")
    assert not (tmp_path / "reports/summary.md").exists()


def test_model_needing_remote_code_is_refused(
    downloaded: Path, tiny_model_dir: Path, tmp_path: Path, stage_env
) -> None:
    from support.models import broken_copy

    model = broken_copy(tiny_model_dir, tmp_path / "model", "remote code")
    out = tmp_path / "sts.json"
    args = ["--suites", "sts", "--model", str(model), "--out-dir", str(tmp_path)]
    error = last_error(run_stage("evaluate.py", args, downloaded, stage_env))
    assert error.startswith(f"error: model.name_or_path: {model} needs its own Python code")
    assert not out.exists()


def test_full_disk_stops_training_with_one_error(
    downloaded: Path, tiny_model_dir: Path, mirror: Path, full_disk: Path, stage_env
) -> None:
    work = downloaded / "full"
    params = tiny_training(work, tiny_model_dir, mirror, 2)
    args = train_args(params, work, "simcse")
    args[args.index("--out") + 1] = str(full_disk / "model")
    error = last_error(run_stage("train.py", args, downloaded, stage_env))
    assert error.startswith(f"error: {full_disk / 'model'}: not written, the disk is full")
    assert sorted(p.name for p in full_disk.iterdir()) == ["filler"]
    assert not (work / "train.json").exists()


def test_read_only_output_folder_is_one_error(downloaded: Path, read_only: Path, stage_env) -> None:
    args = ["--suites", "sts", "--model", "tfidf", "--out-dir", str(read_only)]
    error = last_error(run_stage("evaluate.py", args, downloaded, stage_env))
    assert error.startswith(f"error: {read_only / 'sts.json'}: not written: ")
    assert [p.name for p in read_only.iterdir()] == ["earlier.json"]
    assert (read_only / "earlier.json").read_text() == "{}\n"


@pytest.mark.parametrize(
    ("name", "data", "train", "message"),
    [
        ("c.txt", None, {}, "train.corpus: c.txt: no such file"),
        ("c.txt", b"fine\nbad \xff\n", {}, "{path}:2: not valid utf-8"),
        (
            "c.csv",
            b"id,body\n1,a\n",
            {},
            "{path}:1: column 'text' (train.text_column) is not among",
        ),
        ("c.jsonl", b'{"text": " "}\n{"text": null}\n', {}, "{path}: no usable sentence"),
        ("c.txt", b"a\nb\n", {"batch_size": 3}, "{path}: 2 sentences kept, fewer than a batch"),
        ("c.json", b"[]", {}, "train.corpus: {path}: not a known format"),
    ],
)
def test_corpus_stage_refuses_a_bad_corpus_and_writes_nothing(
    downloaded: Path,
    mirror: Path,
    stage_env,
    tmp_path: Path,
    name: str,
    data: bytes | None,
    train: dict,
    message: str,
) -> None:
    """One error naming the file (and line) or the param; the user's file is untouched and no
    output is written."""
    path = tmp_path / name
    if data is not None:
        path.write_bytes(data)
    params = write_params(tmp_path, mirror, train={"corpus": name, **train})
    args = ["--params", str(params), "--data", str(downloaded / "data/raw")]
    args += ["--out", str(tmp_path / "corpus.out"), "--metrics", str(tmp_path / "card.json")]
    error = last_error(run_stage("corpus.py", args, tmp_path, stage_env))
    assert error.startswith(f"error: {message.format(path=path)}"), error
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        {"params.yaml", *([name] if data is not None else [])}
    )
    if data is not None:
        assert path.read_bytes() == data


def test_corpus_stage_cards_a_jsonl_corpus_that_holds_test_sentences(
    downloaded: Path, mirror: Path, stage_env, tmp_path: Path
) -> None:
    """Two STS-B test sentences in a user's corpus: counted, listed and warned about."""
    test = (mirror / "senteval/data/downstream/STS/STSBenchmark/sts-test.csv").read_text()
    leaked = [line.split("\t")[5] for line in test.splitlines()[:2]]
    rows = [{"text": s} for s in ["An own sentence.", *leaked, "Another one.", "An own sentence."]]
    corpus = tmp_path / "mine.jsonl"
    corpus.write_text("".join(json.dumps(r) + "\n" for r in rows))
    params = write_params(
        tmp_path, mirror, train={"corpus": "mine.jsonl", "batch_size": 2, "drop_duplicates": True}
    )
    args = ["--params", str(params), "--data", str(downloaded / "data/raw")]
    args += ["--out", str(tmp_path / "corpus.txt"), "--metrics", str(tmp_path / "card.json")]
    result = run_stage("corpus.py", args, tmp_path, stage_env)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "2 training sentences are also test sentences" in result.stderr
    kept = ["An own sentence.", *leaked, "Another one."]
    assert (tmp_path / "corpus.txt").read_text().splitlines() == kept
    card = json.loads((tmp_path / "card.json").read_text())
    assert card["source"] == "mine.jsonl"
    assert (card["read"], card["kept"], card["duplicates"]) == (5, 4, 1)
    assert card["dropped"] == {"blank": 0, "duplicate": 1, "beyond_corpus_size": 0}
    assert card["test_overlap"] == {"sentences": 2, "sample": leaked}
