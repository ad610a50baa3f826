"""The only training loop: unsupervised SimCSE's recipe with any method as a plug-in.

Recipe (Gao et al., 2021, §3 and App. A): two dropout views of each sentence in one forward pass,
an MLP head (dense + tanh, freshly initialised) over the [CLS] vector in training only, the raw
[CLS] vector at test, max length 32, batch 64, lr 3e-5, 1 epoch, AdamW with linear decay, model
selection on STS-B dev every `eval_steps`. CUDA when present, CPU otherwise; bf16 autocast
under `precision: auto` (fp16 on a GPU without bf16, fp32 on a CPU without bf16 instructions).
`torchrun --nproc_per_node=K` splits the global batch across processes and gathers the vectors
with gradient, so the in-batch negatives are those of the global batch; gradients are then
averaged, which gives exactly the single-process gradient of the global batch.

Safety: a batch that cannot train, a device the machine lacks or a corpus smaller than one batch
is refused when the `Trainer` is made, before anything moves or trains; a non-finite loss,
gradient, weight or dev score stops the run at that step (`DivergenceError`) and keeps the last
good checkpoint; the untrained model is scored once (`initial_dev`) and a run that ends below it,
or whose loss never moved, is warned about (`TrainResult.warnings`). One process at a time holds
a checkpoint folder.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import shutil
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from tqdm.auto import tqdm

from sentemb.config import ConfigError, UserError
from sentemb.encoder import Encoder, EncoderOutput, autocast, autocast_dtype
from sentemb.evaluation.base import UnusableVectors, scoring
from sentemb.io import atomic_path
from sentemb.methods.base import CombinedMethod, TrainState, Views
from sentemb.pooling import pool
from sentemb.tracking import time_left
from sentemb.training.checkpoint import (
    exclusive,
    key_differences,
    load_checkpoint,
    params_hash,
    rng_state,
    save_checkpoint,
    seed_everything,
    set_rng_state,
)
from sentemb.training.config import TrainConfig

log = logging.getLogger(__name__)


class DivergenceError(UserError):
    """Training stopped: the loss, a gradient, a weight or the dev score is no longer finite."""


class MLPHead(nn.Module):
    """SimCSE's training-only head: dense + tanh over the pooled vector."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.dense = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.dense(x))


@dataclass
class TrainResult:
    """What a run produced: the best dev score and step, the untrained model's dev score, the
    curves, and warnings about a run that did not learn."""

    best_score: float
    best_step: int
    steps: int
    dev_curve: list[dict[str, float]] = field(default_factory=list)
    loss_curve: list[dict[str, float]] = field(default_factory=list)
    resumed_from: int = 0
    initial_dev: float = math.nan
    warnings: list[str] = field(default_factory=list)


def distributed() -> tuple[int, int]:
    """(rank, world size), initialising the process group under `torchrun`."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world > 1 and not dist.is_initialized():
        dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
    return (dist.get_rank(), world) if world > 1 else (0, 1)


def average_gradients(params: Sequence[nn.Parameter], world: int, device: torch.device) -> None:
    """Average the gradients of `params` across the `world` processes, as one process with the
    global batch has them. A rank may have reached fewer parameters (PaSeR's decoder, on a share
    with no phrase to rebuild): it adds zeros, so every rank runs the same collectives; a
    parameter no rank reached keeps no gradient, as in one process."""
    reached = torch.tensor([p.grad is not None for p in params], dtype=torch.int32, device=device)
    dist.all_reduce(reached)
    for p, count in zip(params, reached.tolist(), strict=True):
        if count:
            if p.grad is None:
                p.grad = torch.zeros_like(p)
            dist.all_reduce(p.grad)
            p.grad /= world


def pick_device(name: str, rank: int) -> torch.device:
    """The device `train.device` names for process `rank`; one this machine lacks is an error."""
    if name == "cpu" or (name == "auto" and not torch.cuda.is_available()):
        return torch.device("cpu")
    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if count == 0:
        raise ConfigError(
            f"train.device: {name!r}, but torch {torch.__version__} sees no CUDA device on this "
            "machine; use auto or cpu"
        )
    device = torch.device(name if name != "auto" else "cuda")
    if device.index is None:
        return torch.device("cuda", rank % count)
    if device.index >= count:
        raise ConfigError(
            f"train.device: {name!r}, but this machine has {count} CUDA device(s), "
            f"cuda:0 to cuda:{count - 1}"
        )
    return device


def check_batches(
    config: TrainConfig, sentences: int, corpus: str, contrastive: bool, world: int
) -> None:
    """Refuse a batch the run cannot train with, naming `train.batch_size`: one that does not
    split across the processes, one with no in-batch negative (InfoNCE over a single candidate
    is 0 whatever the model, so nothing would be learnt), or one larger than the corpus."""
    size = config.batch_size
    if size % world:
        raise ConfigError(
            f"train.batch_size: {size} does not split across {world} processes; "
            f"use a multiple of {world}"
        )
    if contrastive and size // world < 2:
        share = f"{size // world} sentence per process ({world} processes)" if world > 1 else "1"
        raise ConfigError(
            f"train.batch_size: {share} leaves no in-batch negative: the contrastive loss "
            "would be 0 at every step and nothing would be learnt; use at least 2 per process"
        )
    if sentences < size:
        raise ConfigError(
            f"train.batch_size: {size} is more than the {sentences} sentences of {corpus}; "
            "lower it or train on a larger corpus (data.corpus_size)"
        )


class Trainer:
    """Trains `encoder` with `method` on `sentences`; `evaluate` scores the dev set.

    `run_key` is everything that defines the run (params, data and model hashes): a checkpoint in
    `checkpoint_dir` resumes only a run with the same key. `corpus` names the sentences in errors.
    """

    def __init__(
        self,
        encoder: Encoder,
        method: CombinedMethod,
        config: TrainConfig,
        sentences: Sequence[str],
        evaluate: Callable[[Encoder], float],
        seed: int,
        checkpoint_dir: Path,
        run_key: dict[str, Any],
        on_log: Callable[[dict[str, float], int], None] | None = None,
        corpus: str = "the training corpus",
    ) -> None:
        self.rank, self.world = distributed()
        check_batches(config, len(sentences), corpus, method.contrastive, self.world)
        if self.world > 1 and self.rank == 0:
            share = config.batch_size // self.world
            log.info("%d processes, %d sentences of each batch apiece", self.world, share)
        self.device = pick_device(config.device, self.rank)
        if self.device.type == "cuda":  # NCCL's collectives use the current device of each rank
            torch.cuda.set_device(self.device)
        seed_everything(seed)  # the same head on every process
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
        self.order: tuple[int, torch.Tensor] = (-1, torch.empty(0, dtype=torch.long))
        self.total_steps = config.max_steps or config.epochs * self.steps_per_epoch
        if config.warmup_steps >= self.total_steps > 0:
            raise ConfigError(
                f"train.warmup_steps: {config.warmup_steps} is not below the run's "
                f"{self.total_steps} steps: the learning rate would never reach "
                "train.learning_rate; lower it"
            )
        trainable = [p for m in (self.encoder, self.head, self.method) for p in m.parameters()]
        self.params = [p for p in trainable if p.requires_grad]
        self.optimizer = torch.optim.AdamW(
            self.params, lr=config.learning_rate, weight_decay=config.weight_decay
        )
        self.generator = torch.Generator(self.device).manual_seed(seed)
        self.checkpoint_dir, self.run_key = checkpoint_dir, run_key
        self.run_dir = checkpoint_dir / params_hash(run_key)[:16]
        self.saved_step: int | None = None  # the step of the last checkpoint written or resumed
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

    def epoch_order(self, epoch: int) -> torch.Tensor:
        """The corpus order of `epoch`, a shuffle seeded by the run's seed plus the epoch, drawn
        once per epoch (a permutation of SimCSE's 1M sentences takes ~14 ms: 40% of a MiniLM
        step on an H100, benchmarks/README.md)."""
        if self.order[0] != epoch:
            generator = torch.Generator().manual_seed(self.seed + epoch)
            self.order = (epoch, torch.randperm(len(self.sentences), generator=generator))
        return self.order[1]

    def batch_sentences(self, step: int) -> list[str]:
        """This process's share of the global batch at `step` (a seeded shuffle per epoch)."""
        epoch, position = divmod(step, self.steps_per_epoch)
        order = self.epoch_order(epoch)
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
            average_gradients(self.params, self.world, self.device)
        return {"loss": loss.item(), "lr": self.lr_at(step), **logs}, views

    def step(self, step: int) -> dict[str, float]:
        """One optimisation step, then the methods' state updates (e.g. IS-CSE's buffer).

        A non-finite loss or gradient is a `DivergenceError` before anything is updated (under
        fp16 the gradient scaler itself skips steps whose scaled gradients overflow).
        """
        logs, views = self.compute_gradients(step)
        if not math.isfinite(logs["loss"]):
            raise self.diverged(step + 1, f"the loss is {logs['loss']}")
        if not self.scaler.is_enabled():
            norm = total_norm(p.grad for p in self.params if p.grad is not None)
            if not math.isfinite(norm):
                raise self.diverged(step + 1, f"the gradient norm is {norm} in float32")
        self.scaler.step(self.optimizer)
        self.scaler.update()
        with torch.no_grad():
            self.method.after_step(views)
        return logs

    def diverged(self, step: int, what: str) -> DivergenceError:
        """The error for a run that stopped at `step`, naming the params that likely caused it."""
        config = self.config
        likely = [f"train.learning_rate ({config.learning_rate:g}) too high"]
        if self.method.contrastive:
            likely.append(f"simcse.temperature ({self.method.base.temperature:g}) too low")
        likely += [
            f"{name}.{key} ({getattr(part.config, key):g})"
            for name, part in self.method.parts.items()
            for key in part.unstable_params()
        ]
        if autocast_dtype(config.precision, self.device) is not None:
            likely.append(f"train.precision ({config.precision}; fp32 is safer)")
        kept = (
            f"the last good checkpoint (step {self.saved_step}) is kept in {self.run_dir}"
            if self.saved_step is not None
            else "no checkpoint was written"
        )
        return DivergenceError(
            f"training diverged at step {step}: {what}; {kept}; likely: {', '.join(likely)}"
        )

    def check_weights(self, step: int) -> None:
        """A `DivergenceError` if the norm of the trainable weights is no longer a finite float32
        after `step` steps (a weight is NaN or inf, or they all grew beyond ~1e18)."""
        norm = total_norm(p.detach() for p in self.params)
        if not math.isfinite(norm):
            raise self.diverged(step, f"the weight norm is {norm} in float32")

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
        """Write `last` (never with non-finite weights: the previous one stays)."""
        self.check_weights(step)
        rngs = self._rngs()
        if self.rank == 0:
            state = {
                "step": step,
                "run_key": self.run_key,
                "result": asdict(result),
                "scaler": self.scaler.state_dict(),  # fp16's loss scale ({} when it is off)
            }
            save_checkpoint(self.run_dir / "last", self.modules, self.optimizer, rngs, state)
        self.saved_step = step

    def _resume(self) -> TrainResult:
        last = self.run_dir / "last"
        if not (last / "state.json").is_file():
            self._explain_fresh_start()
            return TrainResult(-math.inf, 0, 0)
        state, rng = load_checkpoint(last, self.modules, self.optimizer, self.rank)
        set_rng_state(rng, self.generator)
        self.scaler.load_state_dict(state["scaler"])
        result = TrainResult(**state["result"])
        result.resumed_from = self.saved_step = state["step"]
        log.info("resuming from %s at step %d", last, state["step"])
        return result

    def _explain_fresh_start(self) -> None:
        """Say which part of the run key differs from the newest checkpoint of another run in
        the folder, the one this run would have resumed before (it is left in place)."""
        if self.rank != 0:
            return
        others = [
            state
            for state in self.checkpoint_dir.glob("*/last/state.json")
            if state.parent.parent != self.run_dir
        ]
        if not others:
            return
        newest = max(others, key=lambda state: state.stat().st_mtime)
        try:
            old_key = json.loads(newest.read_text()).get("run_key")
        except (OSError, ValueError, AttributeError):
            old_key = None
        differs = (
            ", ".join(key_differences(old_key, self.run_key))
            if isinstance(old_key, dict)
            else "unknown parts: it records no run key"
        )
        log.warning(
            "starting afresh, not resuming %s: that checkpoint is of another run (it differs "
            "in %s); it is left in place",
            newest.parent,
            differs,
        )

    def train(
        self, output: Path, finish: Callable[[Path, TrainResult], None] | None = None
    ) -> TrainResult:
        """Train to `total_steps`, evaluating every `eval_steps`; the best model goes to `output`
        (`finish(folder, result)` adds files to it, such as its model card, before it appears).

        Checkpoints live in `checkpoint_dir/<run key hash>/`, so a killed run restarted with the
        same key resumes, and one with another key starts afresh saying which part differs;
        removed on success. The folder is held by this process alone for the whole run.
        """
        hold = exclusive(self.checkpoint_dir) if self.rank == 0 else contextlib.nullcontext()
        with hold:
            return self._train(output, finish)

    def _train(
        self, output: Path, finish: Callable[[Path, TrainResult], None] | None
    ) -> TrainResult:
        result = self._resume()
        if result.steps == 0:
            if self.rank == 0:
                with scoring(self.encoder.name):
                    result.initial_dev = self.dev_score()
                log.info("step 0: dev %.2f (the untrained model)", result.initial_dev)
            if self.world > 1:
                dist.barrier()
        best_dir = self.run_dir / "best"
        started, first = time.perf_counter(), result.steps
        quiet = True if self.rank != 0 else None  # None: a bar only when stderr is a terminal
        bar = tqdm(range(result.steps, self.total_steps), desc="train", disable=quiet)
        log_lines = self.rank == 0 and bar.disable  # a log file gets the bar's news as lines
        for step in bar:
            logs = self.step(step)
            result.steps = step + 1
            if result.steps % self.config.log_steps == 0 or result.steps == self.total_steps:
                result.loss_curve.append({"step": result.steps, "loss": logs["loss"]})
                self.on_log(logs, result.steps)
                bar.set_postfix(loss=f"{logs['loss']:.4f}")
                if log_lines:
                    per_step = (time.perf_counter() - started) / (result.steps - first)
                    left = time_left(per_step * (self.total_steps - result.steps))
                    log.info(
                        "step %d/%d: loss %.4f, %s",
                        result.steps,
                        self.total_steps,
                        logs["loss"],
                        left,
                    )
            if result.steps % self.config.eval_steps == 0 or result.steps == self.total_steps:
                self._evaluate(result, best_dir)
            if result.steps % self.config.checkpoint_steps == 0:
                self._checkpoint(result.steps, result)
        log.info("trained %d steps in %.0f s", result.steps, time.perf_counter() - started)
        result.warnings = self._warnings(result) if self.rank == 0 else []
        if self.rank == 0:
            with atomic_path(output, folder=True) as tmp:
                shutil.copytree(best_dir, tmp)
                if finish is not None:
                    finish(tmp, result)
            shutil.rmtree(self.run_dir)
        return result

    def _warnings(self, result: TrainResult) -> list[str]:
        """What says the run did not learn, each also logged: a loss that never moved, a best
        dev score below the untrained model's."""
        found = []
        losses = [point["loss"] for point in result.loss_curve]
        if len(losses) > 1 and max(losses) - min(losses) <= 1e-6 * max(1.0, abs(losses[0])):
            temperature = (
                f", simcse.temperature {self.method.base.temperature:g}"
                if self.method.contrastive
                else ""
            )
            found.append(
                f"the loss was {losses[0]:g} at every logged step: the model did not learn "
                f"(train.learning_rate {self.config.learning_rate:g}, "
                f"train.batch_size {self.config.batch_size}{temperature})"
            )
        if result.best_score < result.initial_dev:
            found.append(
                f"the best dev score {result.best_score:.2f} (step {result.best_step}) is below "
                f"the untrained model's {result.initial_dev:.2f}: training made the model worse "
                f"(train.learning_rate {self.config.learning_rate:g} too high?)"
            )
        for warning in found:
            log.warning("%s", warning)
        return found

    def _evaluate(self, result: TrainResult, best_dir: Path) -> None:
        """Score the dev set (rank 0); vectors or a score that are not finite are divergence."""
        self.check_weights(result.steps)
        if self.rank == 0:
            try:
                score = self.dev_score()
            except UnusableVectors as err:
                raise self.diverged(result.steps, f"the dev set cannot be scored: {err}") from err
            if not math.isfinite(score):
                raise self.diverged(result.steps, f"the dev score is {score}")
            result.dev_curve.append({"step": result.steps, "dev": score})
            self.on_log({"dev": score}, result.steps)
            log.info("step %d: dev %.2f", result.steps, score)
            if score > result.best_score:
                result.best_score, result.best_step = score, result.steps
                with atomic_path(best_dir, folder=True) as tmp:
                    self.save_best(tmp)
        if self.world > 1:
            dist.barrier()


def total_norm(tensors: Iterable[torch.Tensor]) -> float:
    """The 2-norm of all `tensors` together, in their float32: nan or inf when an entry is not
    finite (or the norm overflows). Measured on MiniLM's 22.7M weights: 0.01 s, where the
    max-norm takes 0.5 s."""
    return float(torch.nn.utils.get_total_norm(list(tensors)))
