"""Training through sentence-transformers' trainer: determinism, data order, resume after SIGKILL
(byte-identical), the model output, several processes (DDP, 2 "nodes"), tampered checkpoints."""

from __future__ import annotations

import json
import logging
import os
import re
import signal
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from sentemb.encoder import Encoder
from sentemb.io import CheckpointError
from sentemb.registry import METHODS
from sentemb.training.checkpoint import STATE_FILE, latest_checkpoint
from sentemb.training.processes import torchrun_command
from sentemb.training.trainer import is_fused, skip_on_device

from support.training import TESTS, make_job, probe

HERE = Path(__file__).resolve().parent
SPECS = [*METHODS, "iscse+dclr", "simcse+paser"]


def curves(result) -> tuple[list, list, float, int]:
    return result.loss_curve, result.dev_curve, result.best_score, result.best_step


@pytest.mark.parametrize("spec", SPECS)
def test_same_seed_same_run(tiny_model_dir: Path, tmp_path: Path, spec: str) -> None:
    first = make_job(tiny_model_dir, spec, tmp_path / "a").train(tmp_path / "out-a", tmp_path / "a")
    second = make_job(tiny_model_dir, spec, tmp_path / "b")
    assert curves(second.train(tmp_path / "out-b", tmp_path / "b")) == curves(first)
    assert all(np.isfinite(point["loss"]) for point in first.loss_curve)
    weights = [(tmp_path / out / "model.safetensors").read_bytes() for out in ("out-a", "out-b")]
    assert weights[0] == weights[1]


def test_each_logged_step_says_the_time_left(
    tiny_model_dir: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Without a terminal (a log file, `dvc repro` under `make repro`) each logged step is a line
    with the time left at this run's own pace."""
    with caplog.at_level(logging.INFO, logger="sentemb.training.callback"):
        make_job(tiny_model_dir, "simcse", tmp_path / "ck").train(tmp_path / "out", tmp_path / "ck")
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("step ")]
    logged = [line for line in lines if "loss" in line]
    assert [line.split(":")[0] for line in logged] == [f"step {k}/6" for k in range(1, 7)]
    assert all(re.fullmatch(r"step \d/6: loss \d+\.\d{4}, ~\d+ s left", line) for line in logged)
    assert logged[-1].endswith("~0 s left")


def test_log_steps_apart_the_last_step_is_logged_too(tiny_model_dir: Path, tmp_path: Path) -> None:
    """`log_steps: 4` of 6 steps: the loss curve has steps 4 and 6, each that step's own loss
    (as a run logging every step has it)."""
    job = make_job(tiny_model_dir, "simcse", tmp_path / "ck", log_steps=4)
    result = job.train(tmp_path / "out", tmp_path / "ck")
    assert [point["step"] for point in result.loss_curve] == [4, 6]
    every = make_job(tiny_model_dir, "simcse", tmp_path / "ck1").train(
        tmp_path / "o", tmp_path / "ck1"
    )
    steps = {point["step"]: point["loss"] for point in every.loss_curve}
    assert [point["loss"] for point in result.loss_curve] == [steps[4], steps[6]]


def test_the_two_views_differ_by_dropout(tiny_model_dir: Path, tmp_path: Path) -> None:
    """SimCSE's two views of a sentence differ only by dropout: in training mode the same
    batch gives two losses, with dropout off one."""
    job = make_job(tiny_model_dir, "simcse", tmp_path / "ck")
    batch = job.model.tokenize(job.sentences[:8])
    job.model.train()
    assert job.loss([batch])["contrastive_loss"] != job.loss([batch])["contrastive_loss"]
    job.model.eval()
    assert job.loss([batch])["contrastive_loss"] == job.loss([batch])["contrastive_loss"]


def test_each_epoch_is_one_seeded_shuffle(tiny_model_dir: Path, tmp_path: Path) -> None:
    """Epoch e's batches are consecutive rows of randperm(seed + e) (the trainer's seedable
    sampler), so the order is the same in every run and after a resume."""
    seen: list[list[str]] = []
    job = make_job(tiny_model_dir, "simcse", tmp_path / "ck", seed=3, max_steps=16)
    forward = job.loss.forward

    def record(features, labels=None):
        if job.model.training:
            ids = features[0]["input_ids"]
            seen.append(job.model.tokenizer.batch_decode(ids, skip_special_tokens=True))
        return forward(features, labels)

    job.loss.forward = record
    job.train(tmp_path / "out", tmp_path / "ck")
    n, size = len(job.sentences), job.config.batch_size
    for epoch in (0, 1):
        order = torch.randperm(n, generator=torch.Generator().manual_seed(3 + epoch)).tolist()
        for t in range(n // size):
            rows = order[t * size : (t + 1) * size]
            assert seen[epoch * (n // size) + t] == [job.sentences[i] for i in rows]


def test_best_model_is_saved_and_loads(tiny_model_dir: Path, tmp_path: Path) -> None:
    job = make_job(tiny_model_dir, "simcse", tmp_path / "ck")
    result = job.train(tmp_path / "out", tmp_path / "ck")
    assert (tmp_path / "out" / "model.safetensors").is_file()
    assert not (tmp_path / "ck").exists()  # the run's folder, its lock and the folder made
    loaded = Encoder.from_pretrained(str(tmp_path / "out"), precision="fp32")  # as make_job's
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
from support.training import make_job
job = make_job(Path({model!r}), {spec!r}, Path({ck!r}))
forward = job.loss.forward
def killing(features, labels=None):
    if job.loss.step == {kill_at} and job.model.training:  # checkpoint {kill_at} is written
        os.kill(os.getpid(), signal.SIGKILL)
    return forward(features, labels)
job.loss.forward = killing
job.train(Path({out!r}), Path({ck!r}))
"""


@pytest.mark.parametrize(("spec", "kill_at"), [("iscse", 3), ("simcse+dclr", 5), ("paser", 3)])
def test_killed_run_resumes_to_identical_weights(
    tiny_model_dir: Path, tmp_path: Path, spec: str, kill_at: int
) -> None:
    """SIGKILL in step kill_at + 1: the restarted run resumes from checkpoint kill_at (model,
    optimizer, scheduler, random states, the loss's head, buffers and draws) and ends with the
    uninterrupted run's curves and byte-identical weights."""
    reference = make_job(tiny_model_dir, spec, tmp_path / "ref")
    expected = reference.train(tmp_path / "ref-out", tmp_path / "ref")
    script = KILL_SCRIPT.format(
        here=str(TESTS),
        model=str(tiny_model_dir),
        spec=spec,
        ck=str(tmp_path / "ck"),
        out=str(tmp_path / "out"),
        kill_at=kill_at,
    )
    killed = subprocess.run([sys.executable, "-c", script], capture_output=True, timeout=300)
    assert killed.returncode == -signal.SIGKILL, killed.stderr.decode()[-3000:]
    assert not (tmp_path / "out").exists()
    resumed = make_job(tiny_model_dir, spec, tmp_path / "ck").train(
        tmp_path / "out", tmp_path / "ck"
    )
    assert resumed.resumed_from == kill_at
    assert curves(resumed) == curves(expected)
    for name in (
        "model.safetensors",
        *(["paser_decoder/model.safetensors"] if "paser" in spec else []),
    ):
        assert (tmp_path / "out" / name).read_bytes() == (tmp_path / "ref-out" / name).read_bytes()


def test_a_checkpoint_cut_short_resumes_the_one_before(
    tiny_model_dir: Path, tmp_path: Path
) -> None:
    """A kill while a checkpoint is written leaves it without its state file: it is removed and
    the one before resumes."""
    folder = tmp_path / "run"
    for step in (2, 3):
        (folder / f"checkpoint-{step}").mkdir(parents=True)
    (folder / "checkpoint-2" / STATE_FILE).write_text("{}")
    assert latest_checkpoint(folder) == folder / "checkpoint-2"
    assert not (folder / "checkpoint-3").exists()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# 8 sentences, one with RAKE phrases: PaSeR's decoder is reached on one process only
SENTENCES = [
    "it is what it is",
    "he was there and then",
    "she is as she was",
    "the quick brown fox jumps over the lazy dog",
    "we are here",
    "they had been there",
    "you are what you are",
    "it was so",
]


def launched(layout: str, worker: list[str], hide_cuda: bool, work: Path) -> None:
    """Run `worker` in 2 processes: as `train.nproc: 2` launches the train stage (`torchrun
    --standalone`), or as 2 machines would (`--nnodes=2`, one torchrun per node, here both on
    this machine over loopback). Every process must exit 0."""
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    if hide_cuda:
        env["CUDA_VISIBLE_DEVICES"] = ""
    if layout == "processes":
        commands = [torchrun_command(2, worker)]
    else:
        port = free_port()
        node = [sys.executable, "-m", "torch.distributed.run", "--nnodes=2", "--nproc-per-node=1"]
        node += ["--master-addr=127.0.0.1", f"--master-port={port}"]
        commands = [[*node, f"--node-rank={rank}", *worker] for rank in (0, 1)]
    running = [
        subprocess.Popen(c, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env, cwd=work)
        for c in commands
    ]
    for process in running:
        _, stderr = process.communicate(timeout=300)
        assert process.returncode == 0, stderr.decode()[-3000:]


BACKENDS = [
    "gloo",
    pytest.param(
        "nccl",
        marks=pytest.mark.skipif(
            torch.cuda.device_count() < 2, reason="NCCL needs a GPU per process (< 2 GPUs here)"
        ),
    ),
]


NODES = ["simcse", "paser"]  # 2 "nodes": the launch and its rendezvous, for two methods


@pytest.fixture(scope="module")
def gradients(tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory):
    """`gradients(run)`: each spec's loss and gradients (ddp_worker.py) for `run` "one" (1
    process, the global batch) or (layout, backend), each run launched once for all its specs."""
    work = tmp_path_factory.mktemp("ddp")
    sentences = work / "sentences.json"
    sentences.write_text(json.dumps(SENTENCES))
    runs: dict = {}

    def get(run: str | tuple[str, str]) -> dict:
        if run not in runs:
            out = work / ("-".join(run) if isinstance(run, tuple) else run)
            out.mkdir()
            specs = NODES if run[0] == "nodes" else SPECS
            worker = [str(HERE / "ddp_worker.py"), str(tiny_model_dir), str(out), str(sentences)]
            worker += specs
            if run == "one":
                env = {**os.environ, "OMP_NUM_THREADS": "1", "CUDA_VISIBLE_DEVICES": ""}
                alone = subprocess.run([sys.executable, *worker], capture_output=True, env=env)
                assert alone.returncode == 0, alone.stderr.decode()[-3000:]
            else:
                layout, backend = run
                launched(layout, worker, backend == "gloo", out)
            runs[run] = {s: json.loads((out / f"{s}.json").read_text()) for s in specs}
        return runs[run]

    return get


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize(
    ("spec", "layout"),
    [*((spec, "processes") for spec in SPECS), *((spec, "nodes") for spec in NODES)],
)
def test_several_processes_give_the_single_process_gradient_of_the_global_batch(
    gradients, spec: str, layout: str, backend: str
) -> None:
    """2 processes (gloo: on the CPU, CUDA hidden; nccl: on 2 GPUs) through DDP give the loss
    and every gradient the optimizer gets (the model's, the head's, PaSeR's decoder's, reached
    by one process only) of 1 process with the global batch: the negatives of the global batch,
    a mean over PaSeR's phrases and masked tokens of the global batch. NCCL refuses two ranks
    on one GPU ("Duplicate GPU detected"), so a machine with one GPU checks gloo alone."""
    one, two = gradients("one")[spec], gradients((layout, backend))[spec]
    assert two["loss"] == pytest.approx(one["loss"], rel=1e-5)
    assert set(two["grads"]) == set(one["grads"])
    if "paser" in spec:
        assert any(name.startswith("parts.paser.decoder.") for name in one["grads"])
    for name, grad in one["grads"].items():
        got = torch.tensor(two["grads"][name])
        assert torch.allclose(got, torch.tensor(grad), atol=1e-6, rtol=1e-4), name


class Payload:
    """What a tampered checkpoint file would carry: unpickling it runs `touch`."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (Path.touch, (self.marker,))


@pytest.mark.parametrize(
    ("damage", "name"),
    [
        ("pickle payload", "optimizer.pt"),
        ("pickle payload", "sentemb_loss.pt"),
        ("truncated", "model.safetensors"),
        ("truncated", "rng_state.pth"),
        ("not JSON", STATE_FILE),
    ],
)
def test_tampered_checkpoint_is_refused_without_running_code(
    tiny_model_dir: Path, tmp_path: Path, damage: str, name: str
) -> None:
    job = make_job(tiny_model_dir, "simcse", tmp_path / "ck", max_steps=3)
    killer = job.loss.forward

    def stop(features, labels=None):
        if job.loss.step == 2 and job.model.training:
            raise KeyboardInterrupt
        return killer(features, labels)

    job.loss.forward = stop
    with pytest.raises(KeyboardInterrupt):
        job.train(tmp_path / "out", tmp_path / "ck")
    (folder,) = (tmp_path / "ck").glob("*/checkpoint-2")
    marker = tmp_path / "code-ran"
    path = folder / name
    if damage == "pickle payload":
        torch.save({"state": Payload(marker)}, path)
    elif damage == "truncated":
        path.write_bytes(path.read_bytes()[:100])
    else:
        path.write_text('{"step": 2,')
    with pytest.raises(CheckpointError, match=rf"^{folder}: checkpoint damaged or unsafe"):
        latest_checkpoint(folder.parent)
    assert not marker.exists()


@pytest.mark.parametrize(("bad", "moves"), [(True, False), (False, True)])
def test_fused_adamw_skips_on_found_inf(bad: bool, moves: bool) -> None:
    """The one library attribute the pipeline sets (`skip_on_device`): torch's fused AdamW
    skips its whole update, the weight decay too, where the flag is set, and steps where it is
    not. Fails if torch stops reading `found_inf`."""
    weight = torch.nn.Parameter(torch.ones(3))
    optimizer = torch.optim.AdamW([weight], lr=0.1, weight_decay=0.5, fused=True)
    assert is_fused(optimizer)
    weight.grad = torch.full((3,), 2.0)
    skip_on_device(optimizer, torch.tensor(bad))
    optimizer.step()
    assert torch.equal(weight.detach(), torch.ones(3)) is not moves


def test_only_fused_adam_skips_on_the_device() -> None:
    weight = torch.nn.Parameter(torch.ones(1))
    assert not is_fused(torch.optim.AdamW([weight], fused=False))
    assert not is_fused(torch.optim.SGD([weight], lr=0.1))
