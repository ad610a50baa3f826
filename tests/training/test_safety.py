"""Training safety around the trainer's loop: divergence stops at its step and keeps the last
good checkpoint, no update comes from a non-finite step, a run that learns nothing is warned
about, batches and devices that cannot train are refused, `train` params are validated, one
process per checkpoint folder, run keys and specs."""

from __future__ import annotations

import fcntl
import json
import logging
import math
import os
import re
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from sentemb import precision
from sentemb.config import ConfigError, from_dict, parse_spec, section
from sentemb.evaluation.base import UnusableVectors
from sentemb.io import CheckpointError
from sentemb.training.callback import DivergenceError
from sentemb.training.checkpoint import (
    LOCK_FILE,
    STATE_FILE,
    exclusive,
    key_differences,
    latest_checkpoint,
)
from sentemb.training.config import TrainConfig
from sentemb.training.processes import ONE_GPU, one_gpu, pick_device
from sentemb.training.trainer import check_run

from support.training import hold_checkpoints, make_job

HERE = Path(__file__).resolve().parent


def last_checkpoint(checkpoints: Path) -> tuple[int, dict[str, torch.Tensor]]:
    """The step and model weights of the run's newest complete checkpoint."""
    folder = latest_checkpoint(next(checkpoints.iterdir()))
    state = json.loads((folder / STATE_FILE).read_text())
    return state["step"], load_file(folder / "model.safetensors")


@pytest.mark.parametrize("fused", [True, False])
@pytest.mark.parametrize(
    ("fault", "message"),
    [
        ("nan loss", "the loss is nan"),
        ("inf loss", "the loss is inf"),
        ("nan grad", "the gradient norm is nan in float32"),
    ],
)
def test_non_finite_loss_or_gradient_stops_at_its_step(
    monkeypatch: pytest.MonkeyPatch,
    tiny_model_dir: Path,
    tmp_path: Path,
    fault: str,
    message: str,
    fused: bool,
) -> None:
    """Injected in step 5 (a checkpoint after every step): one error naming step 5 and the
    likely params (`auto` precision among them: bf16 autocast here, as on a CPU with bf16
    instructions); the step's update is skipped (fused AdamW, on the device) or never made
    (unfused, read at once), the step-4 checkpoint kept, no output."""
    monkeypatch.setattr(precision, "native_bf16", lambda: True)
    job = make_job(tiny_model_dir, "simcse", tmp_path / "ck", precision="auto", fused_adamw=fused)
    forward, first = job.loss.forward, next(p for p in job.loss.parameters() if p.requires_grad)
    updated: list[torch.Tensor] = []

    def faulty(features, labels=None):
        terms = forward(features, labels)
        if job.loss.step == 5 and job.model.training:
            updated.append(first.detach().clone())
            if fault == "nan grad":
                first.register_hook(lambda grad: grad * math.nan)
            elif fault.endswith("loss"):
                bad = math.nan if fault == "nan loss" else math.inf
                terms["contrastive_loss"] = terms["contrastive_loss"] * bad
                job.loss.last = job.loss.last * bad
        return terms

    job.loss.forward = faulty
    expected = (
        rf"^training diverged at step 5: {message}; the last good checkpoint \(step 4\) is kept"
        rf" in {re.escape(str(tmp_path / 'ck'))}/\w+; likely: train.learning_rate \(3e-05\) "
        r"too high, simcse.temperature \(0.05\) too low, train.precision \(auto; fp32 is safer\)$"
    )
    with pytest.raises(DivergenceError, match=expected):
        job.train(tmp_path / "out", tmp_path / "ck")
    assert not (tmp_path / "out").exists()
    saved, tensors = last_checkpoint(tmp_path / "ck")
    assert saved == 4 and all(torch.isfinite(t).all() for t in tensors.values())
    assert torch.equal(first.detach(), updated[0])  # the bad step was not applied
    assert all(torch.isfinite(p).all() for p in job.loss.parameters())


@pytest.mark.parametrize(
    ("learning_rate", "config", "message"),
    [
        (
            1e10,
            {"checkpoint_minutes": 0.0},
            r"2: the loss is nan; the last good checkpoint \(step 1\)",
        ),
        (1e10, {"eval_steps": 1}, "1: the dev score is nan; no checkpoint was written"),
        (
            1e30,
            {"checkpoint_minutes": 0.0},
            "1: the weight norm is inf in float32; no checkpoint was",
        ),
        (
            1e30,
            {"checkpoint_minutes": 0.0, "warmup_steps": 4},
            r"2: the weight norm is inf in float32; the last good checkpoint \(step 1\)",
        ),
    ],
)
def test_real_divergence_is_one_error_and_no_bad_checkpoint(
    tiny_model_dir: Path, tmp_path: Path, learning_rate: float, config: dict, message: str
) -> None:
    """`train.learning_rate` 1e10 / 1e30: the loss, the dev score (vectors of weights ~1e10) or
    the weights themselves stop being finite; whichever comes first stops the run at its step,
    and only finite checkpoints are kept."""
    config = {"eval_steps": 6, "checkpoint_minutes": 1000.0, **config}
    job = make_job(tiny_model_dir, "simcse", tmp_path / "ck", learning_rate=learning_rate, **config)
    with pytest.raises(DivergenceError, match=rf"^training diverged at step {message}.*rate"):
        job.train(tmp_path / "out", tmp_path / "ck")
    assert not (tmp_path / "out").exists()
    if any((tmp_path / "ck").glob(f"*/checkpoint-*/{STATE_FILE}")):
        _, tensors = last_checkpoint(tmp_path / "ck")
        assert all(torch.isfinite(t).all() for t in tensors.values())


def test_loss_that_never_moves_is_warned(
    tiny_model_dir: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """simcse.temperature 1e-6, identical views and distinct mean-pooled vectors: the loss is 0
    at every step and the model never changes; the run completes, warning in the log and in
    `warnings`. The params refuse such a temperature, so it is set on the loss itself: the
    warning is for any run whose loss never moves."""
    job = make_job(tiny_model_dir, "simcse", tmp_path / "ck", dropout_free=True, pooler="mean")
    job.loss.base.temperature = 1e-6
    with caplog.at_level(logging.WARNING):
        result = job.train(tmp_path / "out", tmp_path / "ck")
    assert {point["loss"] for point in result.loss_curve} == {0.0}
    assert len(result.warnings) == 1
    assert result.warnings[0].startswith("the loss was 0 at every logged step: the model did not")
    assert "simcse.temperature 1e-06" in result.warnings[0]
    assert result.warnings[0] in caplog.text
    assert result.best_score == result.initial_dev  # the untrained model, bit for bit


def scores(values: list[float]) -> Iterator[float]:
    yield from values


@pytest.mark.parametrize(
    ("dev", "warned"),
    [
        (
            [50.0, 40.0, 30.0],
            "the best dev score 40.00 (step 3) is below the untrained model's 50.00",
        ),
        ([50.0, 55.0, 60.0], None),
    ],
)
def test_best_dev_below_the_untrained_model_is_warned(
    tiny_model_dir: Path, tmp_path: Path, dev: list[float], warned: str | None
) -> None:
    """The dev set is scored once before the first step (`initial_dev`); a best below it is a
    warning, a run that improves has none."""
    values = scores(dev)
    job = make_job(tiny_model_dir, "simcse", tmp_path / "ck", evaluate=lambda encoder: next(values))
    result = job.train(tmp_path / "out", tmp_path / "ck")
    assert result.initial_dev == 50.0
    assert [point["dev"] for point in result.dev_curve] == dev[1:]
    if warned is None:
        assert result.warnings == []
    else:
        assert len(result.warnings) == 1 and result.warnings[0].startswith(warned)


@pytest.mark.parametrize(
    ("train", "world", "contrastive", "sentences", "message"),
    [
        ({"batch_size": 1}, 1, True, 64, "train.batch_size: 1 leaves no in-batch negative"),
        (
            {"batch_size": 2},
            2,
            True,
            64,
            r"train.batch_size: 1 sentence per process \(2 processes\) leaves no",
        ),
        ({"batch_size": 3}, 2, True, 64, "train.batch_size: 3 does not split across 2 processes"),
        (
            {"batch_size": 65},
            1,
            True,
            64,
            "train.batch_size: 65 is more than the 64 sentences of corpus.txt",
        ),
        ({"batch_size": 9}, 1, False, 8, "train.batch_size: 9 is more than the 8 sentences of"),
        (
            {"batch_size": 8, "warmup_steps": 8},
            1,
            True,
            64,
            "train.warmup_steps: 8 is not below the run's 8 steps",
        ),
        (
            {"batch_size": 8, "max_steps": 3, "warmup_steps": 3},
            1,
            True,
            64,
            "train.warmup_steps: 3 is not below the run's 3 steps",
        ),
        (
            {"batch_size": 8, "device": "cuda:1"},
            2,
            True,
            64,
            "train.device: 'cuda:1' names one GPU, but 2 processes train",
        ),
    ],
)
def test_a_run_that_cannot_train_is_refused(
    train: dict, world: int, contrastive: bool, sentences: int, message: str
) -> None:
    with pytest.raises(ConfigError, match=f"^{message}"):
        check_run(TrainConfig(**train), sentences, "corpus.txt", contrastive, world)


def test_fp16_with_an_unfused_adamw_is_a_run() -> None:
    """The loss's own gradients are the model's (`TrainedParts`): the trainer zeroes them after
    a step the gradient scaler skips as after any, so the pair is no longer refused."""
    config = section({"train": {"precision": "fp16", "fused_adamw": False}}, "train", TrainConfig)
    assert config.precision == "fp16" and not config.fused_adamw


def test_the_run_steps_are_max_steps_or_epochs_of_whole_batches() -> None:
    assert TrainConfig(batch_size=8, epochs=2).steps(20) == 4
    assert TrainConfig(batch_size=8, max_steps=3).steps(20) == 3


def test_batch_of_one_is_fine_without_in_batch_negatives() -> None:
    """PaSeR alone reconstructs phrases: no negatives, so a batch of 1 trains."""
    check_run(TrainConfig(batch_size=1), 10, "corpus.txt", False, 1)


def test_batch_of_one_is_refused_before_training(tiny_model_dir: Path, tmp_path: Path) -> None:
    job = make_job(tiny_model_dir, "sscl", tmp_path / "ck", batch_size=1)
    with pytest.raises(ConfigError, match=r"^train.batch_size: 1 leaves no in-batch"):
        job.train(tmp_path / "out", tmp_path / "ck")
    assert not (tmp_path / "ck").exists()


@pytest.mark.parametrize(
    ("name", "cuda_devices", "message"),
    [
        ("cuda", 0, "train.device: 'cuda', but torch .* sees no CUDA device on this machine"),
        ("cuda:0", 0, "train.device: 'cuda:0', but torch .* sees no CUDA device"),
        ("cuda:3", 2, r"train.device: 'cuda:3', but this machine has 2 CUDA device\(s\)"),
    ],
)
def test_device_the_machine_lacks_is_refused(
    monkeypatch: pytest.MonkeyPatch, name: str, cuda_devices: int, message: str
) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: cuda_devices > 0)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: cuda_devices)
    with pytest.raises(ConfigError, match=f"^{message}"):
        pick_device(name, 0)


def test_devices_the_machine_has(monkeypatch: pytest.MonkeyPatch) -> None:
    assert pick_device("cpu", 0) == torch.device("cpu")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert pick_device("auto", 1) == torch.device("cpu")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    assert pick_device("auto", 3) == pick_device("cuda", 3) == torch.device("cuda", 1)
    assert pick_device("cuda:1", 0) == torch.device("cuda", 1)


LEARNING_RATE = (
    "must be in (0, 3.4e+37) (AdamW's first step, 10 x learning_rate, must be a float32)"
)


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("log_steps", 0, "must be >= 1, got 0"),
        ("eval_steps", 0, "must be >= 1, got 0"),
        ("checkpoint_minutes", -2, "must be >= 0, got -2.0"),
        ("checkpoint_minutes", math.nan, "expected a finite number, got nan"),
        ("max_grad_norm", -1, "must be >= 0, got -1.0"),
        ("max_grad_norm", math.inf, "expected a finite number, got inf"),
        ("compile", "yes", "expected bool, got 'yes'; or 'yes' is not one of ['auto']"),
        ("attention", "flash", "'flash' is not one of ['sdpa', 'eager']"),
        ("workers", -1, "must be >= 0, got -1; or -1 is not one of ['auto']"),
        ("epochs", 0, "must be >= 1, got 0"),
        ("max_steps", 0, "must be >= 1 or null, got 0"),
        ("batch_size", 0, "must be >= 1, got 0"),
        ("max_length", 0, "must be >= 1, got 0"),
        ("warmup_steps", -1, "must be >= 0, got -1"),
        ("weight_decay", -0.01, "must be >= 0, got -0.01"),
        ("weight_decay", math.nan, "expected a finite number, got nan"),
        ("learning_rate", 0, f"{LEARNING_RATE}, got 0.0"),
        ("learning_rate", -1e-5, f"{LEARNING_RATE}, got -1e-05"),
        ("learning_rate", 1e38, f"{LEARNING_RATE}, got 1e+38"),
        ("learning_rate", math.inf, "expected a finite number, got inf"),
        ("learning_rate", math.nan, "expected a finite number, got nan"),
        ("device", "gpu0", "'gpu0' is not a device; use auto, cpu, cuda or cuda:<index>"),
        ("device", "cuda:x", "'cuda:x' is not a device; use auto, cpu, cuda or cuda:<index>"),
        ("device", "", "'' is not a device; use auto, cpu, cuda or cuda:<index>"),
    ],
)
def test_train_params_out_of_range_are_refused(key: str, value: object, message: str) -> None:
    with pytest.raises(ConfigError) as raised:
        from_dict(TrainConfig, {key: value}, "train")
    assert str(raised.value) == f"train.{key}: {message}"


def test_valid_train_params_pass() -> None:
    for device in ("auto", "cpu", "cuda", "cuda:1"):
        from_dict(TrainConfig, {"device": device, "warmup_steps": 0, "weight_decay": 0}, "train")


@pytest.mark.parametrize(
    ("spec", "names"),
    [
        ("simcse + iscse", ["simcse", "iscse"]),
        (" iscse+dclr ", ["iscse", "dclr"]),
        ("sscl", ["sscl"]),
    ],
)
def test_spec_is_read_in_one_place(spec: str, names: list[str]) -> None:
    assert parse_spec(spec) == names


@pytest.mark.parametrize(
    "spec", ["", "+", "simcse+", "+iscse", "simcse++iscse", "simcse + ", "simcse+simcse", "simsce"]
)
def test_bad_spec_is_refused(spec: str) -> None:
    with pytest.raises(ConfigError, match=rf"^method: {re.escape(repr(spec))} must join"):
        parse_spec(spec)


def test_key_differences_name_every_differing_part() -> None:
    old = {"method": "simcse", "train": {"batch_size": 64, "lr": 1}, "data": {"corpus": "a"}}
    new = {"method": "simcse", "train": {"batch_size": 32, "lr": 1}, "data": {"corpus": "b"}}
    assert key_differences(old, new) == ["data.corpus", "train.batch_size"]
    assert key_differences(old, {**old, "iscse": {"k": 2}}) == ["iscse"]
    assert key_differences(old, old) == []


def test_second_process_on_a_checkpoint_folder_is_refused_until_the_first_dies(
    tiny_model_dir: Path, tmp_path: Path
) -> None:
    """A second run on the folder is one `CheckpointError` naming it, and touches nothing;
    once the holder is killed (SIGKILL: the kernel drops its lock) the next run resumes its
    last checkpoint."""
    checkpoints = tmp_path / "ck"
    holder = hold_checkpoints(tiny_model_dir, checkpoints, tmp_path)
    try:
        second = make_job(tiny_model_dir, "simcse", checkpoints)
        before = sorted(p.relative_to(checkpoints) for p in checkpoints.rglob("*"))
        with pytest.raises(CheckpointError, match=f"^{checkpoints}: another training process"):
            second.train(tmp_path / "out", checkpoints)
        assert sorted(p.relative_to(checkpoints) for p in checkpoints.rglob("*")) == before
        assert not (tmp_path / "out").exists()
    finally:
        os.kill(holder.pid, signal.SIGKILL)
        holder.wait()
    assert (checkpoints / LOCK_FILE).is_file()  # left behind by the killed holder
    result = make_job(tiny_model_dir, "simcse", checkpoints).train(tmp_path / "out", checkpoints)
    assert result.resumed_from == 2 and result.steps == 6
    assert list(checkpoints.iterdir()) == []  # the killed holder's lock file went with this run


@pytest.mark.parametrize(
    ("before", "left"),
    [
        ([], []),  # made by the run: removed, with the parent it made
        (["ck"], ["ck"]),  # the user's empty folder: kept
        (["ck/abc/last"], ["ck", "ck/abc", "ck/abc/last"]),  # a checkpoint: kept
    ],
)
def test_leaving_the_checkpoint_folder_removes_the_lock_and_the_folders_made(
    tmp_path: Path, before: list[str], left: list[str]
) -> None:
    """Success or error, the holder removes its lock file and the folders it made that are
    left empty; a folder that was there, or holds a checkpoint, stays."""
    for folder in before:
        (tmp_path / folder).mkdir(parents=True)
    with pytest.raises(RuntimeError, match=r"^the run failed$"), exclusive(tmp_path / "ck" / "x"):
        assert (tmp_path / "ck" / "x" / LOCK_FILE).is_file()
        raise RuntimeError("the run failed")
    assert sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*")) == left


def test_a_lock_taken_on_a_file_its_holder_removed_is_taken_anew(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """This process opens the lock file; its holder then leaves (removing the file and the
    folder) before this process locks it. The lock it gets is on a file no longer at the path:
    it locks the path anew, so a third process can never take the path's file meanwhile."""
    folder = tmp_path / "ck"
    holder = exclusive(folder)
    holder.__enter__()
    flock = fcntl.flock
    calls = []

    def late(handle: object, operation: int) -> None:
        if not calls:  # opened, not yet locked: the holder leaves now
            holder.__exit__(None, None, None)
        calls.append(operation)
        flock(handle, operation)

    monkeypatch.setattr(fcntl, "flock", late)
    with exclusive(folder):
        monkeypatch.setattr(fcntl, "flock", flock)
        assert len(calls) == 2  # the first lock was on the removed file
        with (folder / LOCK_FILE).open() as third, pytest.raises(BlockingIOError):
            fcntl.flock(third, fcntl.LOCK_EX | fcntl.LOCK_NB)
    assert not folder.exists()


def test_an_untrained_model_whose_dev_set_cannot_be_scored_is_named(
    tiny_model_dir: Path, tmp_path: Path
) -> None:
    """The first dev score is refused naming the model; the run leaves no lock or folder."""

    def unusable(encoder: object) -> float:
        raise UnusableVectors("the encoder gave the same vector for all 3 sentences")

    job = make_job(tiny_model_dir, "simcse", tmp_path / "ck", evaluate=unusable)
    with pytest.raises(UnusableVectors, match=f"^{tiny_model_dir}: the encoder gave the same"):
        job.train(tmp_path / "out", tmp_path / "ck")
    assert sorted(p.name for p in tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("spec", "named"),
    [
        ("simcse", []),
        ("sscl", []),
        ("iscse", ["iscse.beta (3)", "iscse.alpha (0.1)"]),
        ("dclr", ["dclr.noise_temperature (0.05)", "dclr.sigma (1)", "dclr.ascent_lr (0.001)"]),
        ("paser", ["paser.m (10)", "paser.n (10)", "paser.generative_weight (1)"]),
        ("iscse+dclr", ["iscse.beta (3)", "dclr.sigma (1)"]),
    ],
)
def test_a_diverged_run_names_the_scales_of_its_methods(
    tiny_model_dir: Path, tmp_path: Path, spec: str, named: list[str]
) -> None:
    """`iscse.beta: 1e-300` or `dclr.noise_temperature: 1e-300` make the loss NaN: the error
    names each method's params that can (`Method.unstable_params`), with their values, beside
    the learning rate and SimCSE's temperature (a helper's probe found them never named)."""
    job = make_job(tiny_model_dir, spec, tmp_path / "ck", method_params={"iscse": {"beta": 3.0}})
    likely = ", ".join(job.likely())
    assert likely.startswith("train.learning_rate (3e-05) too high")
    assert all(f"{name}" in likely for name in named), likely
    assert ("iscse." in likely) == ("iscse" in spec) and ("dclr." in likely) == ("dclr" in spec)


@pytest.mark.parametrize(
    ("schedule", "named", "unnamed"),
    [
        ("constant", ["iscse.alpha (0.1)"], "iscse.alpha_start"),
        ("cosine", ["iscse.alpha_start (0.005)", "iscse.alpha_end (0.05)"], "iscse.alpha ("),
    ],
)
def test_a_diverged_iscse_run_names_the_alpha_its_schedule_uses(
    tiny_model_dir: Path, tmp_path: Path, schedule: str, named: list[str], unnamed: str
) -> None:
    """eq. 8's cosine schedule scales L_smoothing by alpha_start..alpha_end, not `alpha`: the
    error names the ones the run used."""
    job = make_job(
        tiny_model_dir,
        "iscse",
        tmp_path / "ck",
        method_params={"iscse": {"alpha_schedule": schedule}},
    )
    likely = ", ".join(job.likely())
    assert all(name in likely for name in named) and unnamed not in likely, likely


@pytest.mark.parametrize(
    ("device", "visible", "shown"),
    [
        ("cuda:1", None, "1"),
        ("cuda:1", "2,3", "3"),
        ("auto", "5,6", "5"),
        ("cuda", None, "0"),
        ("cpu", "0,1", "0,1"),
        ("cuda:3", "0,1", "0,1"),  # no such GPU: pick_device names the ones there are
    ],
)
def test_a_process_training_alone_sees_one_gpu(
    monkeypatch: pytest.MonkeyPatch, device: str, visible: str | None, shown: str
) -> None:
    """Alone, the trainer takes the first GPU it sees and splits batches across several
    (DataParallel): the stage shows it only the one `train.device` names, before CUDA starts,
    and `pick_device` then reads that `cuda:N` as the one GPU left."""
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    monkeypatch.delenv(ONE_GPU, raising=False)
    if visible is None:
        monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    else:
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
    one_gpu({"train": {"device": device}})
    assert os.environ.get("CUDA_VISIBLE_DEVICES") == shown
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    if os.environ.get(ONE_GPU) == device and device.startswith("cuda:"):
        assert pick_device(device, 0) == torch.device("cuda", 0)


def test_a_gpu_hidden_by_cuda_visible_devices_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3")
    with pytest.raises(ConfigError, match=r"sees no CUDA device on this machine \(CUDA_VISIBLE"):
        pick_device("cuda:3", 0)


def test_processes_under_torchrun_keep_their_gpus(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    one_gpu({"train": {"device": "cuda:1"}})
    assert os.environ["CUDA_VISIBLE_DEVICES"] == "0,1"
