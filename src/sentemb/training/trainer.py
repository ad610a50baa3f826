"""sentence-transformers' trainer as the train stage runs it, with the pipeline's guarantees.

The loop, DDP, mixed precision, fused AdamW, torch.compile, the data loader's workers, clipping,
checkpoints and their resume are `SentenceTransformerTrainer`'s (Hugging Face's `Trainer`). The
pipeline changes one hook, drops the library's model card (it writes its own), and adds one
callback:

- `Trainer._clip_grad_norm` covers the loss's own modules too (SimCSE's head is part of its
  model, `BertForCL`, so the original clips it): under several processes it first averages
  their gradients (the model's are DDP's), in one collective; it notes on the device whether
  the loss or the gradient norm is non-finite, and fused AdamW then skips that step on the
  device (`found_inf`, as a gradient scaler does), so no update comes from a non-finite
  gradient and nothing waits for the GPU (with `train.fused_adamw: false` the flag is read at
  every step instead);
- `RunCallback` scores the untrained model first, stops a diverged run (`DivergenceError`, read
  where a step is logged, scored or checkpointed), keeps the best model by dev score, writes
  checkpoints by wall time (decided at logged steps, by rank 0) with the loss's state beside
  the trainer's, and logs each logged step with the time left.
"""

from __future__ import annotations

import json
import logging
import math
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import torch
import torch.distributed as dist
from sentence_transformers import SentenceTransformerTrainer
from sentence_transformers.base.evaluation import BaseEvaluator
from transformers import TrainerCallback, set_seed

from sentemb.clock import time_left
from sentemb.config import ConfigError, UserError
from sentemb.evaluation.base import UnusableVectors
from sentemb.io import atomic_path
from sentemb.training.checkpoint import LOSS_FILE, STATE_FILE

if TYPE_CHECKING:
    from transformers import TrainerControl, TrainerState, TrainingArguments

    from sentemb.losses import MethodLoss
    from sentemb.training.config import TrainConfig

log = logging.getLogger(__name__)


class DivergenceError(UserError):
    """Training stopped: the loss, a gradient, a weight or the dev score is no longer finite."""


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


def check_run(
    config: TrainConfig, sentences: int, corpus: str, contrastive: bool, world: int
) -> None:
    """Refuse a run that cannot train, naming the param: a batch that does not split across the
    processes, one with no in-batch negative (InfoNCE over a single candidate is 0 whatever the
    model, so nothing would be learnt), one larger than the corpus; a warm-up as long as the
    run; one GPU named for several processes."""
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
    steps = config.steps(sentences)
    if config.warmup_steps >= steps:
        raise ConfigError(
            f"train.warmup_steps: {config.warmup_steps} is not below the run's {steps} steps: "
            "the learning rate would never reach train.learning_rate; lower it"
        )
    if world > 1 and ":" in config.device:
        raise ConfigError(
            f"train.device: {config.device!r} names one GPU, but {world} processes train, each "
            "on its own; use cuda or auto"
        )


def total_norm(tensors: list[torch.Tensor]) -> torch.Tensor:
    """The 2-norm of all `tensors` together (nan or inf when an entry is not finite)."""
    return torch.nn.utils.get_total_norm(tensors)


class Watch:
    """The first non-finite loss or gradient norm of a run, kept on the device (read only where
    a step is logged, scored or checkpointed): its step, what it was, and its value."""

    KINDS: ClassVar[dict[int, str]] = {1: "the loss is {}", 2: "the gradient norm is {} in float32"}

    def __init__(self, device: torch.device) -> None:
        self.step = torch.full((), -1, dtype=torch.long, device=device)
        self.kind = torch.zeros((), dtype=torch.long, device=device)
        self.value = torch.zeros((), device=device)

    def note(
        self, step: int, loss: torch.Tensor, loss_bad: torch.Tensor, norm: torch.Tensor | None
    ) -> torch.Tensor:
        """Note step `step`: its loss, whether a loss of any process is non-finite
        (`loss_bad`), and its gradient norm (None: not checked); whether the step is bad."""
        bad_norm = ~torch.isfinite(norm) if norm is not None else torch.zeros_like(loss_bad)
        bad = loss_bad | bad_norm
        first = bad & (self.step < 0)
        self.step = torch.where(first, step, self.step)
        self.kind = torch.where(first, torch.where(loss_bad, 1, 2), self.kind)
        value = torch.where(loss_bad, loss.float(), norm.float() if norm is not None else loss)
        self.value = torch.where(first, value, self.value)
        return bad

    def problem(self) -> tuple[int, str] | None:
        """(step, what) of the first non-finite value, or None (reads the device)."""
        step = int(self.step)
        if step < 0:
            return None
        return step, self.KINDS[int(self.kind)].format(float(self.value))


class Trainer(SentenceTransformerTrainer):
    """`SentenceTransformerTrainer` whose gradient clipping covers the loss's own modules and
    notes non-finite steps (module docstring). `loss` is a `sentemb.losses.MethodLoss`."""

    loss: MethodLoss

    def _clip_grad_norm(self, model: torch.nn.Module) -> torch.Tensor:
        """Average the loss's own gradients across processes, clip every trainable gradient to
        `max_grad_norm` (inf: no clipping), note a non-finite step: its update is skipped.
        Returns the norm before clipping, as the trainer's own does."""
        params = [p for p in self.loss.parameters() if p.requires_grad]
        loss_bad = ~torch.isfinite(self.loss.last)
        if self.args.world_size > 1:  # every process then skips, or stops, alike
            loss_bad = average_own_gradients(self.loss, loss_bad)
        self.accelerator.unscale_gradients()
        norm = total_norm([p.grad for p in params if p.grad is not None])
        if math.isfinite(self.args.max_grad_norm):
            torch.nn.utils.clip_grads_with_norm_(params, self.args.max_grad_norm, norm)
        step = self.state.global_step + 1
        if self.accelerator.scaler is not None:  # fp16: the scaler skips overflowing steps
            self.watch.note(step, self.loss.last, loss_bad, None)
            return norm
        bad = self.watch.note(step, self.loss.last, loss_bad, norm)
        optimizer = self.optimizer.optimizer
        if is_fused(optimizer):  # skips the step on the device where `bad` is true
            optimizer.found_inf = bad.float()
        elif bool(bad) and self.run is not None:  # an unfused optimizer cannot: read it now
            self.run.raise_if_diverged()
        return norm

    def add_model_card_callback(self, default_args_dict: dict[str, Any]) -> None:
        """No sentence-transformers model card: the pipeline writes its own with the model
        (`training.modelcard`); theirs would sample the corpus for examples at every start."""

    @property
    def watch(self) -> Watch:
        if getattr(self, "_watch", None) is None:
            self._watch = Watch(self.args.device)
        return self._watch

    @property
    def run(self) -> RunCallback | None:
        """The pipeline's callback, where it was added."""
        return next(
            (c for c in self.callback_handler.callbacks if isinstance(c, RunCallback)), None
        )


def is_fused(optimizer: torch.optim.Optimizer) -> bool:
    """Whether `optimizer` is torch's fused Adam(W), which reads `found_inf` before a step."""
    supports = getattr(optimizer, "_step_supports_amp_scaling", False)
    return supports and all(group.get("fused") for group in optimizer.param_groups)


def average_own_gradients(loss: MethodLoss, loss_bad: torch.Tensor) -> torch.Tensor:
    """Average across processes the gradients of the loss's own trainable modules (the head,
    PaSeR's decoder), which DDP, wrapping the model alone, leaves to each process, and
    whether any process's loss is non-finite (PaSeR's differ by process): one all-reduce of
    them flattened; a module a process did not reach adds zeros, so every process runs the
    same collective. Returns the flag of every process."""
    own = loss.own_parameters()
    grads = [(p.grad if p.grad is not None else torch.zeros_like(p)).flatten() for p in own]
    flat = torch.cat([*grads, loss_bad.to(loss.last.device, torch.float32).reshape(1)])
    dist.all_reduce(flat)  # a sum: the gradients are divided by the processes below
    offset, world = 0, dist.get_world_size()
    for p in own:
        p.grad = (flat[offset : offset + p.numel()] / world).view_as(p)
        offset += p.numel()
    return flat[-1] > 0


class DevScore(BaseEvaluator):
    """The model-selection score as a sentence-transformers evaluator (`dev`, higher better):
    `score(step)` of the callback, which names a divergence."""

    def __init__(self, score: Callable[[int], float]) -> None:
        super().__init__()
        self.score, self.primary_metric = score, "dev"

    def __call__(
        self, model: Any, output_path: str | None = None, epoch: float = -1, steps: int = -1
    ) -> dict[str, float]:
        return {"dev": self.score(steps)}


@dataclass
class RunHooks:
    """What the callback needs from the run: the untrained-or-current model's dev score, saving
    the best model into a folder, the names of the likely params of a divergence, the run key
    and where the run's checkpoints live, and where logged metrics go."""

    dev_score: Callable[[], float]
    save_best: Callable[[Path], None]
    likely: Callable[[], list[str]]
    run_key: dict[str, Any]
    run_dir: Path
    on_log: Callable[[dict[str, float], int], None]


class RunCallback(TrainerCallback):
    """The pipeline's guarantees around the trainer's loop (module docstring)."""

    def __init__(self, hooks: RunHooks, config: TrainConfig, resume: Path | None) -> None:
        self.hooks, self.config, self.resume = hooks, config, resume
        self.trainer: Trainer  # set once the trainer is made (it takes `score` as evaluator)
        self.result = TrainResult(-math.inf, 0, 0)
        self.saved_step: int | None = None
        self.last_save = time.monotonic()
        self.started = time.perf_counter()
        self.first = 0

    @property
    def rank(self) -> int:
        return self.trainer.args.process_index

    @property
    def best_dir(self) -> Path:
        return self.hooks.run_dir / "best"

    def on_train_begin(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any
    ) -> None:
        if self.resume is not None:
            saved = json.loads((self.resume / STATE_FILE).read_text())
            self.result = TrainResult(**saved["result"])
            self.result.resumed_from = self.saved_step = saved["step"]
            own = torch.load(self.resume / LOSS_FILE, map_location="cpu", weights_only=True)
            self.trainer.loss.load_state(own)
            log.info("resuming from %s at step %d", self.resume, saved["step"])
        else:
            self.result.initial_dev = self.score(0)
            log.info("step 0: dev %.2f (the untrained model)", self.result.initial_dev)
            set_seed(args.seed + self.rank)  # a different dropout stream on each process
        self.first, self.started, self.last_save = (
            state.global_step,
            time.perf_counter(),
            time.monotonic(),
        )

    def on_epoch_begin(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any
    ) -> None:
        collate = self.trainer.data_collator
        if hasattr(collate, "epoch"):
            collate.epoch = int(state.epoch or 0)

    def on_step_end(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any
    ) -> None:
        if state.global_step >= state.max_steps:
            control.should_log = True
        if state.global_step < state.max_steps and self.checkpoint_due(control):
            control.should_save = True
        if control.should_log or control.should_evaluate or control.should_save:
            self.raise_if_diverged()
        if control.should_evaluate or control.should_save:
            self.check_weights(state.global_step)

    def score(self, step: int) -> float:
        """The dev score of the model as it is after `step` steps; vectors that cannot be
        scored after a step are a divergence."""
        try:
            return self.hooks.dev_score()
        except UnusableVectors as err:
            if step == 0:  # the untrained model: not a divergence (the error names it)
                raise
            raise self.diverged(step, f"the dev set cannot be scored: {err}") from err

    def checkpoint_due(self, control: TrainerControl) -> bool:
        """Whether `train.checkpoint_minutes` of wall time passed since the last checkpoint:
        every step with 0, else at a logged step, by rank 0's clock, which every process
        follows (a save is collective: processes deciding apart would wait on each other)."""
        minutes = self.config.checkpoint_minutes
        if minutes == 0:
            return True
        if not control.should_log:
            return False
        due = torch.tensor(int(time.monotonic() - self.last_save >= 60 * minutes))
        if self.trainer.args.world_size > 1:
            due = due.to(self.trainer.args.device)
            dist.broadcast(due, src=0)
        return bool(due)

    def raise_if_diverged(self) -> None:
        problem = self.trainer.watch.problem()
        if problem is not None:
            raise self.diverged(*problem)

    def check_weights(self, step: int) -> None:
        """A `DivergenceError` if the trainable weights' norm is not a finite float32 after
        `step` steps (a weight is NaN or inf, or they all grew beyond ~1e18)."""
        norm = float(total_norm([p.detach() for p in self.trainer.loss.parameters()]))
        if not math.isfinite(norm):
            raise self.diverged(step, f"the weight norm is {norm} in float32")

    def diverged(self, step: int, what: str) -> DivergenceError:
        """The error for a run that stopped at `step`, naming the params that likely caused it."""
        kept = (
            f"the last good checkpoint (step {self.saved_step}) is kept in {self.hooks.run_dir}"
            if self.saved_step is not None
            else "no checkpoint was written"
        )
        likely = ", ".join(self.hooks.likely())
        return DivergenceError(
            f"training diverged at step {step}: {what}; {kept}; likely: {likely}"
        )

    def on_log(
        self,
        args: TrainingArguments,
        state: TrainerState,
        control: TrainerControl,
        logs: dict[str, float] | None = None,
        **kwargs: Any,
    ) -> None:
        if not logs or "loss" not in logs:
            return
        step, result = state.global_step, self.result
        # the logged step's own loss and terms (the trainer's "loss" is a mean since its last
        # log, which a resumed run starts afresh: the curve would depend on where it resumed)
        metrics = {"lr": float(logs.get("learning_rate", 0.0))} | self.trainer.loss.logs()
        if "grad_norm" in logs:
            metrics["grad_norm"] = float(logs["grad_norm"])
        result.loss_curve.append({"step": step, "loss": metrics["loss"]})
        result.steps = step
        if self.rank == 0:
            self.hooks.on_log(metrics, step)
            per_step = (time.perf_counter() - self.started) / max(1, step - self.first)
            left = time_left(per_step * (state.max_steps - step))
            log.info("step %d/%d: loss %.4f, %s", step, state.max_steps, metrics["loss"], left)

    def on_evaluate(
        self,
        args: TrainingArguments,
        state: TrainerState,
        control: TrainerControl,
        metrics: dict[str, float] | None = None,
        **kwargs: Any,
    ) -> None:
        score, step, result = float((metrics or {})["eval_dev"]), state.global_step, self.result
        if not math.isfinite(score):
            raise self.diverged(step, f"the dev score is {score}")
        result.dev_curve.append({"step": step, "dev": score})
        result.steps = step
        log.info("step %d: dev %.2f", step, score)
        if self.rank == 0:
            self.hooks.on_log({"dev": score}, step)
            if score > result.best_score:
                with atomic_path(self.best_dir, folder=True) as tmp:
                    self.hooks.save_best(tmp)
        if score > result.best_score:
            result.best_score, result.best_step = score, step

    def on_save(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any
    ) -> None:
        """Beside the trainer's checkpoint: the loss's state, then the run's state (its key,
        curves and best score), the file whose presence says the checkpoint is complete."""
        if self.trainer.args.world_size > 1:
            dist.barrier()  # every process's random states are written
        folder = self.hooks.run_dir / f"checkpoint-{state.global_step}"
        if self.rank == 0:
            torch.save(self.trainer.loss.state(), folder / LOSS_FILE)
            record = {
                "step": state.global_step,
                "run_key": self.hooks.run_key,
                "result": asdict(self.result),
            }
            with atomic_path(folder / STATE_FILE) as tmp:
                tmp.write_text(json.dumps(record, indent=1))
        self.saved_step, self.last_save = state.global_step, time.monotonic()
