"""Builders shared by the tests (training, the 2-process worker script) and the STS-B files
several tests write."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import torch

from sentemb.encoder import Encoder
from sentemb.methods.base import CombinedMethod
from sentemb.phrases import PhrasesConfig, extract
from sentemb.training.config import TrainConfig
from sentemb.training.loop import Trainer

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
