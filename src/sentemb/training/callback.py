"""The pipeline's callback around sentence-transformers' trainer loop (`RunCallback`): it scores
the untrained model first, stops a diverged run (`DivergenceError`, read where a step is logged,
scored or checkpointed), keeps the best model by dev score, writes checkpoints by wall time
(decided at logged steps, by rank 0) with the loss's state beside the trainer's, and logs each
logged step with the time left."""

from __future__ import annotations

import json
import logging
import math
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
import torch.distributed as dist
from transformers import TrainerCallback, set_seed

from sentemb.clock import time_left
from sentemb.config import UserError
from sentemb.evaluation.base import UnusableVectors
from sentemb.io import atomic_path
from sentemb.training.checkpoint import LOSS_FILE, STATE_FILE
from sentemb.training.trainer import Trainer, total_norm

if TYPE_CHECKING:
    from transformers import TrainerControl, TrainerState, TrainingArguments

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

    def on_pre_optimizer_step(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any
    ) -> None:
        self.trainer.check_step()

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
