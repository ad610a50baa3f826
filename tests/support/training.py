"""Tiny-model trainers (`make_trainer`, for the tests and the 2-process worker scripts), a
training process that holds its checkpoint folder, and the STS-B files several tests write."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch

from sentemb.encoder import Encoder
from sentemb.methods.base import CombinedMethod
from sentemb.phrases import PhrasesConfig, extract
from sentemb.training.config import TrainConfig
from sentemb.training.loop import Trainer

TESTS = Path(__file__).resolve().parents[1]  # what a script puts on its path to import support
SENTENCES = [f"sentence number {i} talks about topic {i % 7} and item {i % 5}" for i in range(64)]
PARAMS = {"iscse": {"buffer_size": 16, "k": 2, "clusters": 2}}
STSB = "senteval/data/downstream/STS/STSBenchmark"


def write_stsb(root: Path, lines: list[str]) -> None:
    """STS-B's three files under `root`, each holding `lines` (all three: the dataset counts as
    downloaded only whole)."""
    folder = root / STSB
    folder.mkdir(parents=True)
    for split in ("train", "dev", "test"):
        (folder / f"sts-{split}.csv").write_text("".join(f"{line}\n" for line in lines))


def paser_params(folder: Path) -> dict:
    """A small PaSeR (1 decoder layer) reading the RAKE phrases of SENTENCES from `folder`."""
    path = folder / "rake.jsonl"
    if not path.is_file():
        extract(lambda: iter(SENTENCES), len(SENTENCES), PhrasesConfig(workers=1), folder)
    return {"phrases": str(path), "decoder_layers": 1, "max_target_length": 8}


def probe(encoder: Encoder) -> float:
    """A deterministic function of the weights, standing in for the dev score."""
    vectors = encoder.encode(["a probe sentence", "another one"], show_progress=False)
    return float(vectors.sum())


def make_trainer(
    model_dir: Path,
    spec: str,
    checkpoints: Path,
    seed: int = 0,
    dropout_free: bool = False,
    evaluate: Callable[[Encoder], float] = probe,
    method_params: dict | None = None,
    **config: object,
) -> Trainer:
    """A tiny-BERT trainer: batch 8, 6 steps, dev probe every 3, checkpoint every 2.

    `method_params` updates the params sections of the methods (e.g. `simcse.temperature`)."""
    encoder = Encoder.from_pretrained(str(model_dir), "cls_before_pooler")
    if dropout_free:
        for module in encoder.modules():
            if isinstance(module, torch.nn.Dropout):
                module.p = 0.0
    params = {**PARAMS, **(method_params or {})}
    if "paser" in spec:
        params["paser"] = paser_params(checkpoints.parent / "phrases")
    method = CombinedMethod(spec, params, encoder, seed)
    defaults = {"batch_size": 8, "max_steps": 6, "eval_steps": 3, "checkpoint_steps": 2}
    train_config = TrainConfig(**{**defaults, "log_steps": 1, **config})
    run_key = {"spec": spec, "params": params, **config}
    return Trainer(encoder, method, train_config, SENTENCES, evaluate, seed, checkpoints, run_key)


HOLDER = """
import sys, time
sys.path.insert(0, {here!r})
from pathlib import Path
from support.training import make_trainer
trainer = make_trainer(Path({model!r}), "simcse", Path({ck!r}))
original = trainer.step
def step(i):
    if i == 3:  # after the checkpoint of step 2: hold the folder until killed
        Path({ready!r}).touch()
        time.sleep(600)
    return original(i)
trainer.step = step
trainer.train(Path({out!r}))
"""


def hold_checkpoints(model: Path, checkpoints: Path, work: Path) -> subprocess.Popen:
    """A real training process that holds `checkpoints` (checkpoint of step 2 written)."""
    ready = work / "holding"
    script = HOLDER.format(
        here=str(TESTS),
        model=str(model),
        ck=str(checkpoints),
        ready=str(ready),
        out=str(work / "o"),
    )
    holder = subprocess.Popen(
        [sys.executable, "-c", script], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    deadline = time.monotonic() + 300
    while not ready.exists():
        assert holder.poll() is None, holder.stderr.read().decode()[-3000:]
        assert time.monotonic() < deadline
        time.sleep(0.05)
    return holder
