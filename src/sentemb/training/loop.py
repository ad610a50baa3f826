"""The only training loop: unsupervised SimCSE's recipe with any method as a plug-in.

Recipe (Gao et al., 2021, §3 and App. A): two dropout views of each sentence in one forward pass,
an MLP head (dense + tanh, freshly initialised) over the [CLS] vector in training only, the raw
[CLS] vector at test, max length 32, batch 64, lr 3e-5, 1 epoch, AdamW with linear decay, model
selection on STS-B dev every `eval_steps`. CUDA when present, CPU otherwise; bf16 autocast on
both under `precision: auto` (fp16 on a GPU without bf16). `torchrun --nproc_per_node=K` splits
the global batch across processes and gathers the vectors with gradient, so the in-batch
negatives are those of the global batch; gradients are then averaged, which gives exactly the
single-process gradient of the global batch.
"""

from __future__ import annotations

import logging
import math
import os
import shutil
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from tqdm.auto import tqdm

from sentemb.encoder import Encoder, EncoderOutput, autocast, autocast_dtype, pool
from sentemb.io import atomic_path
from sentemb.methods import CombinedMethod
from sentemb.methods.base import TrainState, Views
from sentemb.training.checkpoint import (
    load_checkpoint,
    params_hash,
    rng_state,
    save_checkpoint,
    seed_everything,
    set_rng_state,
)
from sentemb.training.config import TrainConfig

log = logging.getLogger(__name__)


class MLPHead(nn.Module):
    """SimCSE's training-only head: dense + tanh over the pooled vector."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.dense = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.dense(x))


@dataclass
class TrainResult:
    """What a run produced: the best dev score and step, and the curves."""

    best_score: float
    best_step: int
    steps: int
    dev_curve: list[dict[str, float]] = field(default_factory=list)
    loss_curve: list[dict[str, float]] = field(default_factory=list)
    resumed_from: int = 0


def distributed() -> tuple[int, int]:
    """(rank, world size), initialising the process group under `torchrun`."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world > 1 and not dist.is_initialized():
        dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
    return (dist.get_rank(), world) if world > 1 else (0, 1)


def pick_device(name: str, rank: int) -> torch.device:
    if name != "auto":
        return torch.device(name)
    if torch.cuda.is_available():
        return torch.device("cuda", rank % torch.cuda.device_count())
    return torch.device("cpu")


class Trainer:
    """Trains `encoder` with `method` on `sentences`; `evaluate` scores the dev set."""

    def __init__(
        self,
        encoder: Encoder,
        method: CombinedMethod,
        config: TrainConfig,
        sentences: Sequence[str],
        evaluate: Callable[[Encoder], float],
        seed: int,
        checkpoint_dir: Path,
        run_params: dict[str, Any],
        on_log: Callable[[dict[str, float], int], None] | None = None,
    ) -> None:
        self.rank, self.world = distributed()
        if config.batch_size % self.world:
            raise ValueError(f"train.batch_size {config.batch_size} not divisible by {self.world}")
        seed_everything(seed)  # the same head on every process
        self.device = pick_device(config.device, self.rank)
        self.encoder, self.method, self.config = (
            encoder.to(self.device),
            method.to(self.device),
            config,
        )
        self.encoder.pooler = config.pooler
        hidden = encoder.backbone.config.hidden_size
        self.head = MLPHead(hidden).to(self.device) if config.mlp_head else nn.Identity()
        seed_everything(seed + self.rank)  # a different dropout stream on each process
        self.sentences, self.evaluate, self.seed = list(sentences), evaluate, seed
        self.steps_per_epoch = len(self.sentences) // config.batch_size
        if self.steps_per_epoch == 0:
            raise ValueError(f"corpus has {len(self.sentences)} sentences, < one batch")
        self.total_steps = config.max_steps or config.epochs * self.steps_per_epoch
        trainable = [p for m in (self.encoder, self.head, self.method) for p in m.parameters()]
        self.params = [p for p in trainable if p.requires_grad]
        self.optimizer = torch.optim.AdamW(
            self.params, lr=config.learning_rate, weight_decay=config.weight_decay
        )
        self.generator = torch.Generator(self.device).manual_seed(seed)
        self.checkpoint_dir, self.run_hash = checkpoint_dir, params_hash(run_params)
        self.on_log = on_log or (lambda metrics, step: None)
        fp16 = autocast_dtype(config.precision, self.device) == torch.float16
        self.scaler = torch.amp.GradScaler(enabled=fp16)
        self.encoder.train()  # dropout on from the first `step` (from_pretrained gives eval mode)

    @property
    def modules(self) -> dict[str, nn.Module]:
        return {"encoder": self.encoder, "head": self.head, "method": self.method}

    def lr_at(self, step: int) -> float:
        """Linear warm-up then linear decay to 0 (HF's `get_linear_schedule_with_warmup`)."""
        warmup = self.config.warmup_steps
        if step < warmup:
            return self.config.learning_rate * step / max(1, warmup)
        remaining = max(0, self.total_steps - step) / max(1, self.total_steps - warmup)
        return self.config.learning_rate * remaining

    def batch_sentences(self, step: int) -> list[str]:
        """This process's share of the global batch at `step` (a seeded shuffle per epoch)."""
        epoch, position = divmod(step, self.steps_per_epoch)
        order = torch.randperm(
            len(self.sentences), generator=torch.Generator().manual_seed(self.seed + epoch)
        )
        size = self.config.batch_size
        start = position * size + self.rank * (size // self.world)
        return [self.sentences[i] for i in order[start : start + size // self.world].tolist()]

    def project(self, view: EncoderOutput, layer: int) -> torch.Tensor:
        """Pool hidden layer `layer` of a view as the last one is, then the training head."""
        hidden = view.hidden_states[: len(view.hidden_states) + layer + 1]
        pooler_layer = getattr(self.encoder.backbone, "pooler", None)
        return self.head(pool(self.config.pooler, hidden, view.attention_mask, pooler_layer))

    def tokenize(self, texts: list[str]) -> dict[str, torch.Tensor]:
        return dict(self.encoder.tokenize(texts, self.config.max_length).to(self.device))

    def loss(self, sentences: list[str], step: int) -> tuple[torch.Tensor, dict[str, float], Views]:
        """The method's loss for one batch (both dropout views in one forward pass)."""
        views = Views(
            sentences,
            self.tokenize(sentences),
            self.tokenize,
            lambda batch: self.encoder(**batch),
            self.head,
            self.project,
        )
        with autocast(self.config.precision, self.device):
            output = self.method(views, TrainState(step, self.total_steps, self.generator))
        return output.loss.float(), output.logs, views

    def compute_gradients(self, step: int) -> tuple[dict[str, float], Views]:
        """Loss and gradients of one batch, averaged across processes (not yet applied)."""
        for group in self.optimizer.param_groups:
            group["lr"] = self.lr_at(step)
        self.optimizer.zero_grad(set_to_none=True)
        loss, logs, views = self.loss(self.batch_sentences(step), step)
        self.scaler.scale(loss).backward()
        if self.world > 1:
            for p in self.params:
                if p.grad is not None:
                    dist.all_reduce(p.grad)
                    p.grad /= self.world
        return {"loss": loss.item(), "lr": self.lr_at(step), **logs}, views

    def step(self, step: int) -> dict[str, float]:
        """One optimisation step, then the methods' state updates (e.g. IS-CSE's buffer)."""
        logs, views = self.compute_gradients(step)
        self.scaler.step(self.optimizer)
        self.scaler.update()
        with torch.no_grad():
            self.method.after_step(views)
        return logs

    def dev_score(self) -> float:
        """The selection score with the evaluation pooler, in eval mode."""
        self.encoder.pooler = self.config.eval_pooler
        try:
            return self.evaluate(self.encoder)
        finally:
            self.encoder.pooler = self.config.pooler
            self.encoder.train()

    def save_best(self, folder: Path) -> None:
        self.encoder.pooler = self.config.eval_pooler
        try:
            self.encoder.save(folder)
            self.method.save(folder)
        finally:
            self.encoder.pooler = self.config.pooler

    def _rngs(self) -> list[dict[str, torch.Tensor]]:
        mine = rng_state(self.generator)
        if self.world == 1:
            return [mine]
        everyone: list[Any] = [None] * self.world
        dist.all_gather_object(everyone, mine)
        return everyone

    def _checkpoint(self, step: int, result: TrainResult) -> None:
        rngs = self._rngs()
        if self.rank == 0:
            state = {"step": step, "run_hash": self.run_hash, "result": asdict(result)}
            save_checkpoint(self.checkpoint_dir / "last", self.modules, self.optimizer, rngs, state)

    def _resume(self) -> TrainResult:
        last = self.checkpoint_dir / "last"
        if not (last / "state.json").is_file():
            return TrainResult(-math.inf, 0, 0)
        state, rng = load_checkpoint(last, self.modules, self.optimizer, self.rank)
        set_rng_state(rng, self.generator)
        result = TrainResult(**state["result"])
        result.resumed_from = state["step"]
        log.info("resuming from %s at step %d", last, state["step"])
        return result

    def train(self, output: Path) -> TrainResult:
        """Train to `total_steps`, evaluating every `eval_steps`; the best model goes to `output`.

        Checkpoints live in `checkpoint_dir/<params hash>/`, so a killed run restarted with the
        same params resumes, and one with other params starts afresh; removed on success.
        """
        self.checkpoint_dir = self.checkpoint_dir / self.run_hash[:16]
        result = self._resume()
        best_dir = self.checkpoint_dir / "best"
        started = time.perf_counter()
        bar = tqdm(range(result.steps, self.total_steps), desc="train", disable=self.rank != 0)
        for step in bar:
            logs = self.step(step)
            result.steps = step + 1
            if result.steps % self.config.log_steps == 0 or result.steps == self.total_steps:
                result.loss_curve.append({"step": result.steps, "loss": logs["loss"]})
                self.on_log(logs, result.steps)
                bar.set_postfix(loss=f"{logs['loss']:.4f}")
            if result.steps % self.config.eval_steps == 0 or result.steps == self.total_steps:
                self._evaluate(result, best_dir)
            if result.steps % self.config.checkpoint_steps == 0:
                self._checkpoint(result.steps, result)
        log.info("trained %d steps in %.0f s", result.steps, time.perf_counter() - started)
        if self.rank == 0:
            with atomic_path(output) as tmp:
                shutil.copytree(best_dir, tmp)
            shutil.rmtree(self.checkpoint_dir)
        return result

    def _evaluate(self, result: TrainResult, best_dir: Path) -> None:
        if self.rank == 0:
            score = self.dev_score()
            result.dev_curve.append({"step": result.steps, "dev": score})
            self.on_log({"dev": score}, result.steps)
            if score > result.best_score:
                result.best_score, result.best_step = score, result.steps
                with atomic_path(best_dir) as tmp:
                    self.save_best(tmp)
        if self.world > 1:
            dist.barrier()
