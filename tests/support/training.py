"""Tiny-model training jobs (`make_job`, for the tests and the multi-process worker scripts), a
training process that holds its checkpoint folder, and the STS-B files several tests write."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path

import torch

from sentemb.config import section
from sentemb.encoder import Encoder
from sentemb.losses import method_loss
from sentemb.methods.paser import PaSeRConfig
from sentemb.model_config import ModelConfig
from sentemb.phrases import PhrasesConfig, extract
from sentemb.st_model import st_model
from sentemb.training.config import TrainConfig
from sentemb.training.run import TrainingJob
from sentemb.training.selection import Selection

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


def paser_params(folder: Path, sentences: list[str] = SENTENCES) -> dict:
    """A small PaSeR (1 decoder layer) reading the RAKE phrases of `sentences` from `folder`."""
    path = folder / "rake.jsonl"
    if not path.is_file():
        extract(lambda: iter(sentences), len(sentences), PhrasesConfig(workers=1), folder)
    return {"phrases": str(path), "decoder_layers": 1, "max_target_length": 8}


def probe(encoder: Encoder) -> float:
    """A deterministic function of the weights, standing in for the dev score."""
    vectors = encoder.encode(["a probe sentence", "another one"], show_progress=False)
    return float(vectors.sum())


def make_job(
    model_dir: Path,
    spec: str,
    checkpoints: Path,
    seed: int = 0,
    dropout_free: bool = False,
    evaluate: Callable[[Encoder], float] = probe,
    method_params: dict | None = None,
    sentences: list[str] | None = None,
    **config: object,
) -> TrainingJob:
    """A tiny-BERT training job: batch 8, 6 steps, dev probe every 3, a checkpoint at every
    step (`checkpoint_minutes: 0`), a log line per step, fp32 on the CPU.

    `method_params` updates the params sections of the methods (e.g. `simcse.temperature`)."""
    defaults = {"batch_size": 8, "max_steps": 6, "eval_steps": 3, "checkpoint_minutes": 0.0}
    defaults |= {"log_steps": 1, "precision": "fp32", "device": "cpu"}
    train = TrainConfig(**{**defaults, **config})
    model = st_model(str(model_dir), train.pooler, train.max_length, attention=train.attention)
    if dropout_free:
        for module in model.modules():
            if isinstance(module, torch.nn.Dropout):
                module.p = 0.0
    params = {**PARAMS, **(method_params or {})}
    sentences = list(sentences or SENTENCES)
    data = {}
    if "paser" in spec:
        folder = checkpoints.parent / f"phrases-{checkpoints.name}"
        params["paser"] = paser_params(folder, sentences) | params.get("paser", {})
        data["paser"] = section(params, "paser", PaSeRConfig).sentence_data(params, sentences)
    loss = method_loss(spec, model, params, seed=seed, mlp_head=train.mlp_head)
    encoder = Encoder(model[0].auto_model, model[0].tokenizer, train.eval_pooler, precision="fp32")
    run_key = {
        "method": spec,
        "seed": seed,
        "train": asdict(train),
        "simcse": asdict(loss.base),
        **{name: asdict(part.config) for name, part in loss.parts.items()},
        "params": params,
    }
    return TrainingJob(
        spec,
        seed,
        ModelConfig(name_or_path=str(model_dir)),
        train,
        sentences,
        "corpus.txt",
        model,
        encoder,
        loss,
        run_key,
        Selection(
            "stsb",
            lambda encoder: {"STSBenchmark/dev": evaluate(encoder)},
            ["STSBenchmark/dev"],
            [],
        ),
        data,
    )


HOLDER = """
import sys, time
sys.path.insert(0, {here!r})
from pathlib import Path
from support.training import make_job
job = make_job(Path({model!r}), "simcse", Path({ck!r}))
score = job.dev_score
def dev_score():
    if job.loss.step >= 3:  # scored after step 3, checkpoints 1-2 written: hold until killed
        Path({ready!r}).touch()
        time.sleep(600)
    return score()
job.dev_score = dev_score
job.train(Path({out!r}), Path({ck!r}))
"""


def hold_checkpoints(model: Path, checkpoints: Path, work: Path) -> subprocess.Popen:
    """A real training process that holds `checkpoints` (checkpoints of steps 1-2 written)."""
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
