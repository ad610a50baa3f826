"""The training loop: determinism, resume after SIGKILL, model output, 2-process gradients,
tampered checkpoints."""

from __future__ import annotations

import json
import logging
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from sentemb.encoder import Encoder
from sentemb.io import CheckpointError
from sentemb.registry import METHODS
from sentemb.training.checkpoint import load_checkpoint, rng_state, save_checkpoint
from sentemb.training.loop import TrainResult
from sentemb.training.run import torchrun_command

from support.training import TESTS, make_trainer, probe

HERE = Path(__file__).resolve().parent


def curves(result) -> tuple[list, list, float, int]:
    return result.loss_curve, result.dev_curve, result.best_score, result.best_step


@pytest.mark.parametrize("spec", [*METHODS, "iscse+dclr", "simcse+paser"])
def test_same_seed_same_run(tiny_model_dir: Path, tmp_path: Path, spec: str) -> None:
    first = make_trainer(tiny_model_dir, spec, tmp_path / "a").train(tmp_path / "out-a")
    second = make_trainer(tiny_model_dir, spec, tmp_path / "b").train(tmp_path / "out-b")
    assert curves(first) == curves(second)
    assert all(torch.isfinite(torch.tensor(p["loss"])) for p in first.loss_curve)


def test_each_logged_step_says_the_time_left(
    tiny_model_dir: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Without a terminal (a log file, `dvc repro` under `make repro`) each logged step is a line
    with the time left at this run's own pace, none after the last step; a huge
    `train.epochs` is seen at once for what it is."""
    with caplog.at_level(logging.INFO, logger="sentemb.training.loop"):
        make_trainer(tiny_model_dir, "simcse", tmp_path / "ck").train(tmp_path / "out")
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("step ")]
    logged = [line for line in lines if "loss" in line]
    assert [line.split(":")[0] for line in logged] == [f"step {k}/6" for k in range(1, 7)]
    assert all(re.fullmatch(r"step \d/6: loss \d+\.\d{4}, ~\d+ s left", line) for line in logged)
    assert logged[-1].endswith("~0 s left")


def test_dropout_is_on_from_the_first_step(tiny_model_dir: Path, tmp_path: Path) -> None:
    """`from_pretrained` gives eval mode; SimCSE's two views differ only by dropout."""
    trainer = make_trainer(tiny_model_dir, "simcse", tmp_path / "ck")
    assert all(m.training for m in trainer.encoder.modules())
    sentences = trainer.batch_sentences(0)
    first, second = (trainer.loss(sentences, 0)[0] for _ in range(2))
    assert first.item() != second.item()


def test_each_epoch_is_one_seeded_shuffle_drawn_once(
    tiny_model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Step t of epoch e takes rows [t*B, (t+1)*B) of randperm(seed + e), and the permutation is
    drawn once per epoch, not once per step."""
    trainer = make_trainer(tiny_model_dir, "simcse", tmp_path / "ck", seed=3)
    n, size, per_epoch = len(trainer.sentences), trainer.config.batch_size, trainer.steps_per_epoch
    orders = [torch.randperm(n, generator=torch.Generator().manual_seed(3 + e)) for e in (0, 1)]
    draws = []
    randperm = torch.randperm
    monkeypatch.setattr(torch, "randperm", lambda *a, **k: draws.append(a) or randperm(*a, **k))
    for step in range(2 * per_epoch):
        epoch, t = divmod(step, per_epoch)
        rows = orders[epoch][t * size : (t + 1) * size].tolist()
        assert trainer.batch_sentences(step) == [trainer.sentences[i] for i in rows]
    assert draws == [(n,), (n,)]


def test_best_model_is_saved_and_loads(tiny_model_dir: Path, tmp_path: Path) -> None:
    result = make_trainer(tiny_model_dir, "simcse", tmp_path / "ck").train(tmp_path / "out")
    assert (tmp_path / "out" / "model.safetensors").is_file()
    assert not (tmp_path / "ck").exists()  # the run's folder, its lock and the folder made
    loaded = Encoder.from_pretrained(str(tmp_path / "out"))
    assert loaded.pooler == "cls_before_pooler"

    assert probe(loaded) == pytest.approx(result.best_score, rel=1e-5)
    from sentence_transformers import SentenceTransformer

    st = SentenceTransformer(str(tmp_path / "out"), device="cpu")
    sentences = ["a probe sentence", "and a second, longer one to pad the first"]
    for precision in ("fp32", "bf16"):  # the export gives our vectors at the same precision
        loaded.precision = precision
        with loaded.autocast():
            theirs = st.encode(sentences)
        ours = loaded.encode(sentences, show_progress=False)
        assert np.allclose(theirs, ours, atol=1e-5), precision


KILL_SCRIPT = """
import os, signal, sys
sys.path.insert(0, {here!r})
from pathlib import Path
from support.training import make_trainer
trainer = make_trainer(Path({model!r}), {spec!r}, Path({ck!r}))
original = trainer.step
def step(i):
    if i == {kill_at}:
        os.kill(os.getpid(), signal.SIGKILL)
    return original(i)
trainer.step = step
trainer.train(Path({out!r}))
"""


@pytest.mark.parametrize(("spec", "kill_at"), [("iscse", 3), ("simcse+dclr", 5), ("paser", 3)])
def test_killed_run_resumes_to_identical_result(
    tiny_model_dir: Path, tmp_path: Path, spec: str, kill_at: int
) -> None:
    reference = make_trainer(tiny_model_dir, spec, tmp_path / "ref").train(tmp_path / "ref-out")
    script = KILL_SCRIPT.format(
        here=str(TESTS),
        model=str(tiny_model_dir),
        spec=spec,
        ck=str(tmp_path / "ck"),
        out=str(tmp_path / "out"),
        kill_at=kill_at,
    )
    killed = subprocess.run([sys.executable, "-c", script], capture_output=True, timeout=300)
    assert killed.returncode == -signal.SIGKILL
    assert not (tmp_path / "out").exists()
    resumed = make_trainer(tiny_model_dir, spec, tmp_path / "ck").train(tmp_path / "out")
    assert resumed.resumed_from == (kill_at // 2) * 2
    assert curves(resumed) == curves(reference)


def two_processes(worker: str, args: list[str], hide_cuda: bool) -> None:
    """Run `worker` (beside this file) in 2 processes as `train.nproc: 2` launches the train
    stage (`torchrun_command`); it must exit 0. `hide_cuda` keeps it on gloo (the trainer picks
    NCCL whenever CUDA is visible)."""
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    if hide_cuda:
        env["CUDA_VISIBLE_DEVICES"] = ""
    command = torchrun_command(2, [str(HERE / worker), *args])
    result = subprocess.run(command, capture_output=True, text=True, timeout=300, env=env)
    assert result.returncode == 0, result.stderr[-3000:]


BACKENDS = [
    "gloo",
    pytest.param(
        "nccl",
        marks=pytest.mark.skipif(
            torch.cuda.device_count() < 2, reason="NCCL needs a GPU per process (< 2 GPUs here)"
        ),
    ),
]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("spec", ["simcse", "sscl+dclr"])
def test_two_processes_match_one_process_with_global_batch(
    tiny_model_dir: Path, tmp_path: Path, spec: str, backend: str
) -> None:
    """2 processes (gloo: on CPU, CUDA hidden; nccl: on 2 GPUs) give the same loss and gradients
    as 1 process with the global batch. NCCL refuses two ranks on one GPU ("Duplicate GPU
    detected"), so a machine with one GPU checks gloo alone."""
    out = tmp_path / "ddp.json"
    two_processes(
        "ddp_worker.py", [str(tiny_model_dir), spec, str(out)], hide_cuda=backend == "gloo"
    )
    ddp = json.loads(out.read_text())
    # fp32 on both sides: bf16 rounds a batch split across processes differently
    single = make_trainer(
        tiny_model_dir,
        spec,
        tmp_path / "ck",
        dropout_free=True,
        precision="fp32",
        device="cpu" if backend == "gloo" else "cuda:0",
    )
    logs, _ = single.compute_gradients(0)
    assert ddp["loss"] == pytest.approx(logs["loss"], rel=1e-5)
    grads = {n: p.grad.cpu() for n, p in single.encoder.named_parameters() if p.grad is not None}
    assert set(ddp["grads"]) == set(grads)
    for name, grad in grads.items():
        assert torch.allclose(torch.tensor(ddp["grads"][name]), grad, atol=1e-6, rtol=1e-4), name


def test_gradients_a_rank_did_not_reach_are_averaged_as_zeros(tmp_path: Path) -> None:
    """PaSeR's decoder gets no gradient on a rank whose share has no phrase; all-reducing only
    the gradients each rank has made the ranks' collectives differ (gloo: "Received data size
    doesn't match"; NCCL hangs). That rank now adds zeros; a parameter no rank reached keeps
    none."""
    out = tmp_path / "grads"
    two_processes("average_worker.py", [str(out)], hide_cuda=True)
    for rank in (0, 1):
        grads = json.loads(Path(f"{out}.{rank}.json").read_text(encoding="utf-8"))
        assert grads == [[2.0, 3.0], [1.0, 1.0], None]


def test_resume_restores_the_fp16_loss_scale(tiny_model_dir: Path, tmp_path: Path) -> None:
    """fp16's gradient scaler (CUDA's; the CPU one here) resumes with the scale and growth
    count it had, not a fresh 65536 that would take steps the first run skipped."""
    trainers = [make_trainer(tiny_model_dir, "simcse", tmp_path / "ck") for _ in range(2)]
    for trainer in trainers:
        trainer.scaler = torch.amp.GradScaler("cpu", init_scale=2.0**20, growth_interval=3)
    first, resumed = trainers
    for step in range(2):
        first.step(step)
    first.scaler.update(123.0)  # a scale no fresh scaler has
    first._checkpoint(2, TrainResult(0.0, 0, 2))
    resumed._resume()
    assert resumed.scaler.state_dict() == first.scaler.state_dict()
    assert resumed.scaler.get_scale() == 123.0


class Payload:
    """What a tampered optimizer.pt would carry: unpickling it runs `touch`."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (Path.touch, (self.marker,))


@pytest.mark.parametrize("damage", ["pickle payload", "truncated weights"])
def test_tampered_checkpoint_is_refused_without_running_code(
    tiny_model_dir: Path, tmp_path: Path, damage: str
) -> None:
    trainer = make_trainer(tiny_model_dir, "simcse", tmp_path / "ck")
    folder = tmp_path / "last"
    rngs = [rng_state(trainer.generator)]
    save_checkpoint(folder, trainer.modules, trainer.optimizer, rngs, {"step": 2})
    marker = tmp_path / "code-ran"
    if damage == "pickle payload":
        torch.save({"state": Payload(marker), "param_groups": []}, folder / "optimizer.pt")
    else:
        weights = folder / "model.safetensors"
        weights.write_bytes(weights.read_bytes()[:1000])
    with pytest.raises(CheckpointError, match=rf"^{folder}: checkpoint damaged or unsafe"):
        load_checkpoint(folder, trainer.modules, trainer.optimizer)
    assert not marker.exists()
