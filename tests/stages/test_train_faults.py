"""`stages/train.py` as users run it, given faults: bad params and missing inputs are one error
line before anything is built; a resumed run is the same run (params, corpus, dev data, model,
spec written with spaces) or starts afresh saying why; divergence stops with one error and keeps
the last good checkpoint; a run that learns nothing is warned about in the metrics; one process
per checkpoint folder."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml
from safetensors.torch import load_file, save_file

from sentemb.precision import native_bf16
from sentemb.training.checkpoint import LOCK_FILE, STATE_FILE

from support import REPO
from support.stages import last_error, run_stage, train_args, write_params
from support.training import hold_checkpoints

OUTPUTS = ("model", "train.json", "plots", "checkpoints")
STAMP = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d ")  # a log line's time (cli.LOG_FORMAT)


@pytest.fixture(scope="module")
def data(downloaded: Path) -> Path:
    """`data/raw` of the download stage (STS13 and STS-B, no SICK) beside the corpus stage's
    `data/corpus.txt` (500 wiki sentences)."""
    return downloaded / "data" / "raw"


def training(work: Path, mirror: Path, model_dir: Path, **sections: dict) -> Path:
    """Params for 4 steps of batch 16 on `model_dir` (sections update the defaults) in `work`."""
    work.mkdir(exist_ok=True)
    train = {"batch_size": 16, "max_steps": 4, "eval_steps": 2, "checkpoint_minutes": 0.0}
    params = write_params(work, mirror, model={"name_or_path": str(model_dir)})
    values = yaml.safe_load(params.read_text())
    values["train"].update(train)
    values["iscse"].update(buffer_size=32, k=2, clusters=2)
    for name, section in sections.items():
        values[name].update(section)
    params.write_text(yaml.safe_dump(values))
    return params


def train(
    work: Path, params: Path, data: Path, stage_env: dict, method: str = "simcse"
) -> subprocess.CompletedProcess:
    """The train stage on `data` and the corpus beside it (`data/corpus.txt`)."""
    args = [*train_args(params, work, method), "--data", str(data)]
    args += ["--corpus", str(data.parent / "corpus.txt")]
    return run_stage("train.py", args, work, stage_env)


def nothing_written(work: Path) -> bool:
    return not any((work / name).exists() for name in OUTPUTS)


def data_copy(data: Path, folder: Path) -> Path:
    """A copy of `data` and the corpus beside it in `folder`."""
    copy = folder / "raw"
    shutil.copytree(data, copy)
    shutil.copyfile(data.parent / "corpus.txt", folder / "corpus.txt")
    return copy


@pytest.mark.parametrize(
    ("sections", "method", "message"),
    [
        (
            {"train": {"batch_size": 600}},
            "simcse",
            "train.batch_size: 600 is more than the 500 sentences of {corpus}",
        ),
        ({"train": {"batch_size": 1}}, "sscl", "train.batch_size: 1 leaves no in-batch negative"),
        ({"train": {"log_steps": 0}}, "simcse", "train.log_steps: must be >= 1, got 0"),
        ({"train": {"max_steps": -1}}, "simcse", "train.max_steps: must be >= 1 or null, got -1"),
        ({"train": {"epochs": 0}}, "simcse", "train.epochs: must be >= 1, got 0"),
        ({"train": {"weight_decay": -0.1}}, "simcse", "train.weight_decay: must be >= 0, got -0.1"),
        ({"train": {"warmup_steps": -5}}, "simcse", "train.warmup_steps: must be >= 0, got -5"),
        (
            {"train": {"learning_rate": float("nan")}},
            "simcse",
            "train.learning_rate: expected a finite number, got nan",
        ),
        ({"train": {"pooler": "max"}}, "simcse", "train.pooler: 'max' is not one of"),
        ({"train": {"eval_pooler": "cls "}}, "simcse", "train.eval_pooler: 'cls ' is not one of"),
        ({"model": {"pooler": "max"}}, "simcse", "model.pooler: 'max' is not one of ['auto', "),
        (
            {"dclr": {"complementary_pooler": "max"}},
            "dclr",
            "dclr.complementary_pooler: 'max' is not one of ['auto', ",
        ),
        ({"train": {"device": "gpu0"}}, "simcse", "train.device: 'gpu0' is not a device"),
        ({"train": {"device": "cuda"}}, "simcse", "train.device: 'cuda', but torch"),
        (
            {"train": {"selection": "stsb+sick"}},
            "simcse",
            "{data}/senteval/data/downstream/SICK/SICK_trial.txt: "
            "not found; train.selection: stsb+sick selects the model on it",
        ),
        (
            {"paser": {"phrases": "absent/rake.jsonl"}},
            "simcse+paser",
            "paser.phrases: absent/rake.jsonl: not found; run the phrases stage first",
        ),
        # the class of numbers that only the model (or another section) bounds
        *(
            ({"train": {"max_length": n}}, "simcse", "train.max_length: must be in [3, 128] for")
            for n in (1, 2, 129, 100_000)
        ),
        ({"sscl": {"layers": [-3]}}, "sscl", "sscl.layers: -3 is not in [-2, -2]: the model"),
        # the class of params inside their type's range that cannot train (issue 55)
        ({"simcse": {"temperature": 1e300}}, "simcse", "simcse.temperature: must be in [0.001, 1]"),
        (
            {"train": {"weight_decay": 1e300}},
            "simcse",
            "train.weight_decay: 1e+300 x train.learning_rate 3e-05 is 3e+295; it must be <= 0.01",
        ),
        ({"dclr": {"noise_ratio": 1e-9}}, "dclr", "dclr.noise_ratio: 1e-09 x train.batch_size 16"),
        (
            {"paser": {"mlm_probability": 1e-12}},
            "simcse+paser",
            "paser.mlm_probability: 1e-12 x train.max_length 32",
        ),
        (
            {"paser": {"mask_phrases": 6}},
            "simcse+paser",
            "paser.mask_phrases: 6 is more than the 5 phrases the phrases stage keeps",
        ),
        (
            {"train": {"warmup_steps": 4}},
            "simcse",
            "train.warmup_steps: 4 is not below the run's 4 steps",
        ),
        # every method's section is read whichever method runs: a typo is no silent rerun
        ({"iscse": {"bufer_size": 5}}, "simcse", "iscse: unknown key(s) ['bufer_size']"),
        ({"dclr": {"phi": 7.0}}, "simcse", "dclr.phi: must be in [0, 1], got 7.0"),
        ({"paser": {"mask_phrases": 0}}, "sscl", "paser.mask_phrases: must be >= 1, got 0"),
        # the class of counts too large for any library: one bound for every unbounded integer
        *(
            ({name: {key: 10**20}}, method, f"{name}.{key}: must be <= 2147483647")
            for name, key, method in (
                ("iscse", "buffer_size", "iscse"),
                ("paser", "max_target_length", "simcse+paser"),
                ("train", "max_steps", "simcse"),
            )
        ),
        ({}, "simcse+", "method: 'simcse+' must join distinct known methods"),
        ({}, "simcse + simcse", "method: 'simcse + simcse' must join distinct known methods"),
    ],
)
def test_bad_params_are_one_error_before_anything_is_written(
    data: Path,
    tiny_model_dir: Path,
    mirror: Path,
    stage_env: dict,
    tmp_path: Path,
    sections: dict,
    method: str,
    message: str,
) -> None:
    if sections.get("train", {}).get("device") == "cuda" and torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    assert_refused(tmp_path, mirror, tiny_model_dir, data, stage_env, sections, method, message)


def assert_refused(
    work: Path,
    mirror: Path,
    model_dir: Path,
    data: Path,
    stage_env: dict,
    sections: dict,
    method: str,
    message: str,
) -> None:
    """Training `method` on `model_dir` with `sections` stops with one error starting with
    `message` (`{data}` and `{corpus}` filled in) and writes nothing in `work`."""
    params = training(work, mirror, model_dir, **sections)
    error = last_error(train(work, params, data, stage_env, method))
    expected = message.format(data=data, corpus=data.parent / "corpus.txt")
    assert error.startswith(f"error: {expected}"), error
    assert nothing_written(work)


def test_bad_params_are_one_error_before_torchrun_starts_its_processes(
    data: Path, tiny_model_dir: Path, mirror: Path, stage_env: dict, tmp_path: Path
) -> None:
    """`train.nproc: 2` hands the stage to torchrun: the params are checked first, so the error
    is printed once, with no process started and no torchrun traceback."""
    params = training(tmp_path, mirror, tiny_model_dir, train={"nproc": 2})
    values = yaml.safe_load(params.read_text())
    params.write_text(yaml.safe_dump({**values, "method": "simcse+bogus"}))
    result = train(tmp_path, params, data, stage_env)
    assert result.returncode == 1
    assert result.stderr.count("error: method: 'simcse+bogus' must join") == 1, result.stderr
    assert "Traceback" not in result.stderr and "torchrun" not in result.stderr
    assert nothing_written(tmp_path)


@pytest.fixture(scope="module")
def distilbert_dir(tmp_path_factory: pytest.TempPathFactory, tiny_model_dir: Path) -> Path:
    """A 1-layer random DistilBERT (no pooler layer) with the tiny BERT's tokenizer."""
    from transformers import DistilBertConfig, DistilBertModel

    folder = tmp_path_factory.mktemp("distilbert")
    DistilBertModel(DistilBertConfig(dim=32, n_layers=1, n_heads=2, hidden_dim=64)).save_pretrained(
        folder
    )
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(tiny_model_dir / name, folder / name)
    return folder


@pytest.mark.parametrize(
    ("sections", "method", "param"),
    [
        ({"train": {"pooler": "cls"}}, "simcse", "train.pooler"),
        ({"train": {"eval_pooler": "cls"}}, "simcse", "train.eval_pooler"),
        ({"dclr": {"complementary_pooler": "cls"}}, "dclr", "dclr.complementary_pooler"),
    ],
)
def test_a_pooler_the_backbone_cannot_give_is_refused_before_training(
    data: Path,
    distilbert_dir: Path,
    mirror: Path,
    stage_env: dict,
    tmp_path: Path,
    sections: dict,
    method: str,
    param: str,
) -> None:
    """`cls` needs the backbone's pooler layer, which DistilBERT has not: one error naming the
    param that chose it and the model, before the first step."""
    message = (
        f"{param}: 'cls' needs a backbone with a pooler layer; model.name_or_path: "
        f"{distilbert_dir} (DistilBertModel) has none; cls_before_pooler reads [CLS] without one"
    )
    assert_refused(tmp_path, mirror, distilbert_dir, data, stage_env, sections, method, message)


def test_missing_dev_set_is_found_before_training(
    data: Path, tiny_model_dir: Path, mirror: Path, stage_env: dict, tmp_path: Path
) -> None:
    """STS-B dev absent (the download left it out): refused before the model is loaded, not
    after `eval_steps` steps of training."""
    copy = data_copy(data, tmp_path)
    sts = copy / "senteval" / "data" / "downstream" / "STS"
    shutil.rmtree(sts / "STSBenchmark")
    params = training(tmp_path, mirror, tiny_model_dir, train={"eval_steps": 1000})
    error = last_error(train(tmp_path, params, copy, stage_env))
    dev = sts / "STSBenchmark" / "sts-dev.csv"
    assert error.startswith(f"error: {dev}: not found; train.selection: stsb selects the model on")
    assert nothing_written(tmp_path)


KILLED = """
import os, runpy, signal, sys
from sentemb.losses import MethodLoss
forward = MethodLoss.forward
def killing(self, features, labels=None):
    if self.step == 2 and self.model.training:  # the checkpoint of step 2 is written
        os.kill(os.getpid(), signal.SIGKILL)
    return forward(self, features, labels)
MethodLoss.forward = killing
sys.argv = [{stage!r}, *{args!r}]
runpy.run_path({stage!r}, run_name="__main__")
"""


def changed_weights(model: Path) -> None:
    """The same folder with other weights (a model updated in place)."""
    path = model / "model.safetensors"
    tensors = load_file(path)
    name = sorted(tensors)[0]
    tensors[name] = tensors[name] + 0.01
    save_file(tensors, path, metadata={"format": "pt"})


@pytest.mark.slow
def test_resume_only_the_same_run(
    data: Path, tiny_model_dir: Path, mirror: Path, stage_env: dict, tmp_path: Path
) -> None:
    """A run killed at step 2 is resumed only by the same run: another corpus, another param of
    a part of the spec (written with spaces) or other weights at the same model path each start
    afresh, say which part differs and leave the killed run's checkpoint; the same run, its spec
    written with spaces, resumes at step 2."""
    model = tmp_path / "model-in"
    shutil.copytree(tiny_model_dir, model)
    params = training(tmp_path, mirror, model)
    args = [*train_args(params, tmp_path, "simcse+iscse"), "--data", str(data)]
    args += ["--corpus", str(data.parent / "corpus.txt")]
    stage = str(REPO / "stages" / "train.py")
    killed = subprocess.run(
        [sys.executable, "-c", KILLED.format(stage=stage, args=args)],
        cwd=tmp_path,
        env=stage_env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-3000:]
    checkpoint = max((tmp_path / "checkpoints").glob("*/checkpoint-*"))
    assert json.loads((checkpoint / STATE_FILE).read_text())["step"] == 2

    smaller = data_copy(data, tmp_path / "smaller")
    corpus = smaller.parent / "corpus.txt"
    corpus.write_text("\n".join(corpus.read_text().splitlines()[:400]) + "\n")
    original = model / "model.safetensors"
    backup = original.read_bytes()
    cases = [
        ("data.corpus", smaller, params, lambda: None),
        ("iscse.k", data, training(tmp_path / "k", mirror, model, iscse={"k": 3}), lambda: None),
        ("model.weights", data, params, lambda: changed_weights(model)),
    ]
    for differs, root, case_params, change in cases:
        change()
        result = train(tmp_path, case_params, root, stage_env, "simcse + iscse")
        assert result.returncode == 0, result.stderr[-3000:]
        fresh = [
            STAMP.sub("", line) for line in result.stderr.splitlines() if "starting afresh" in line
        ]
        assert fresh == [
            f"WARNING sentemb.training.checkpoint: starting afresh, not resuming {checkpoint}: "
            f"that checkpoint is of another run (it differs in {differs}); it is left in place"
        ]
        assert "resuming from" not in result.stderr
        assert json.loads((checkpoint / STATE_FILE).read_text())["step"] == 2
        original.write_bytes(backup)
    result = train(tmp_path, params, data, stage_env, "simcse + iscse")
    assert result.returncode == 0, result.stderr[-3000:]
    assert f"resuming from {checkpoint} at step 2" in result.stderr
    assert json.loads((tmp_path / "train.json").read_text())["method"] == "simcse+iscse"
    assert not checkpoint.parent.exists()


# `auto` precision is suspected where it runs bf16 autocast: not on a CPU without bf16
AUTOCAST = native_bf16() or torch.cuda.is_available()
LIKELY = r"likely: train.learning_rate \({lr}\) too high, simcse.temperature \(0.05\) too low" + (
    r", train.precision \(auto; fp32 is safer\)$" if AUTOCAST else "$"
)


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        (
            {"learning_rate": 1e30, "checkpoint_minutes": 0.0},
            r"training diverged at step 1: the weight norm is inf in float32; no checkpoint was "
            r"written; " + LIKELY.format(lr=r"1e\+30"),
        ),
        (
            {"learning_rate": 1e10, "checkpoint_minutes": 0.0, "eval_steps": 4},
            r"training diverged at step 2: the loss is nan; the last good checkpoint \(step 1\) "
            r"is kept in {checkpoints}/\w+; " + LIKELY.format(lr=r"1e\+10"),
        ),
        (
            {"learning_rate": 1e10, "checkpoint_minutes": 1000.0, "eval_steps": 1},
            r"training diverged at step 1: the dev set cannot be scored: .*non-finite vectors.*; "
            r"no checkpoint was written; " + LIKELY.format(lr=r"1e\+10"),
        ),
    ],
)
def test_divergence_is_one_error_and_keeps_the_last_good_checkpoint(
    data: Path,
    tiny_model_dir: Path,
    mirror: Path,
    stage_env: dict,
    tmp_path: Path,
    settings: dict,
    message: str,
) -> None:
    """`train.learning_rate: 1e30` makes the weights overflow at step 1; 1e10 makes the loss NaN
    at step 2, or the dev vectors at step 1: one error naming the step and the likely params, no
    model/metrics/plots or lock file, and the checkpoint left, if any, is the last finite one."""
    params = training(tmp_path, mirror, tiny_model_dir, train=settings)
    error = last_error(train(tmp_path, params, data, stage_env))
    checkpoints = re.escape(str(tmp_path / "checkpoints"))
    assert re.match(f"error: {message.replace('{checkpoints}', checkpoints)}", error), error
    assert not any((tmp_path / name).exists() for name in ("model", "train.json", "plots"))
    assert not (tmp_path / "checkpoints" / LOCK_FILE).exists()  # the run let go of the folder
    for weights in (tmp_path / "checkpoints").glob("*/checkpoint-*/model.safetensors"):
        assert all(torch.isfinite(t).all() for t in load_file(weights).values())


def test_training_that_learns_nothing_is_warned_in_the_metrics(
    data: Path, tiny_model_dir: Path, mirror: Path, stage_env: dict, tmp_path: Path
) -> None:
    """`simcse.temperature: 0.001` (the least the params take) on a model whose views and
    vectors are far apart (no dropout, mean pooling): the loss underflows to 0 at every logged
    step; exit 0 with a warning in the log and in train.json."""
    model = tmp_path / "model-in"
    shutil.copytree(tiny_model_dir, model)
    config = json.loads((model / "config.json").read_text())
    config.update(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    (model / "config.json").write_text(json.dumps(config))
    params = training(
        tmp_path,
        mirror,
        model,
        train={"pooler": "mean", "eval_pooler": "mean", "log_steps": 1},
        simcse={"temperature": 0.001},
    )
    result = train(tmp_path, params, data, stage_env)
    assert result.returncode == 0, result.stderr[-3000:]
    metrics = json.loads((tmp_path / "train.json").read_text())
    assert metrics["final_loss"] == 0.0
    assert metrics["warnings"][0].startswith("the loss was 0 at every logged step")
    assert f"WARNING sentemb.training.run: {metrics['warnings'][0]}" in result.stderr


def test_second_process_on_a_checkpoint_folder_is_one_error(
    data: Path, tiny_model_dir: Path, mirror: Path, stage_env: dict, tmp_path: Path
) -> None:
    """A training process holds checkpoints/; the stage given the same folder says so in one
    line and writes nothing."""
    checkpoints = tmp_path / "checkpoints"
    holder = hold_checkpoints(tiny_model_dir, checkpoints, tmp_path)
    try:
        before = sorted(checkpoints.rglob("*"))
        params = training(tmp_path, mirror, tiny_model_dir)
        error = last_error(train(tmp_path, params, data, stage_env))
        assert error == (
            f"error: {checkpoints}: another training process is using this checkpoint folder; "
            "wait for it to end or give this run another one (--checkpoints)"
        )
        assert sorted(checkpoints.rglob("*")) == before
        assert not any((tmp_path / name).exists() for name in ("model", "train.json", "plots"))
    finally:
        os.kill(holder.pid, signal.SIGKILL)
        holder.wait()
