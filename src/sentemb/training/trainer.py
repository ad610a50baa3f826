"""sentence-transformers' trainer as the train stage runs it, with the pipeline's guarantees.

The loop, DDP, mixed precision, fused AdamW, torch.compile, the data loader's workers, clipping,
checkpoints and their resume are `SentenceTransformerTrainer`'s (Hugging Face's `Trainer`); the
loss's own weights are in the model it trains (`sentemb.trained_parts`), so they are too.
The pipeline drops the library's model card (it writes its own) and adds one callback,
`sentemb.training.callback.RunCallback`: it scores the untrained model, stops a diverged run,
keeps the best model and writes checkpoints. Before each optimizer step it has the trainer note,
on the device, whether the loss (of any process) or the clipped gradients' norm is non-finite
(`Trainer.check_step`); fused AdamW then skips that step on the device (`skip_on_device`), so no
update comes from a non-finite gradient and nothing waits for the GPU (with
`train.fused_adamw: false` the flag is read at every step instead).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

import torch
import torch.distributed as dist
from sentence_transformers import SentenceTransformerTrainer
from sentence_transformers.base.evaluation import BaseEvaluator

from sentemb.config import ConfigError

if TYPE_CHECKING:
    from sentemb.losses import MethodLoss
    from sentemb.training.config import TrainConfig


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


class Run(Protocol):
    """The pipeline's callback as the trainer sees it (`sentemb.training.callback.RunCallback`):
    the run's result, and the divergence it raises."""

    result: Any

    def raise_if_diverged(self) -> None: ...


class Trainer(SentenceTransformerTrainer):
    """`SentenceTransformerTrainer` that notes non-finite steps and skips them (module
    docstring). `loss` is a `sentemb.losses.MethodLoss`; `run` the pipeline's callback, where
    one was added (`training.build`)."""

    loss: MethodLoss
    run: Run | None = None

    def check_step(self) -> None:
        """Before the optimizer step (its gradients clipped): note whether the loss of any
        process, or the gradients' norm, is non-finite, and skip such a step's update. Under
        several processes the loss's flag is shared (one small collective): DDP has averaged
        the gradients, so every process then skips, or stops, alike."""
        loss_bad = ~torch.isfinite(self.loss.last)
        if self.args.world_size > 1:
            flag = loss_bad.to(self.args.device, torch.float32)
            dist.all_reduce(flag, op=dist.ReduceOp.MAX)
            loss_bad = flag > 0
        step = self.state.global_step + 1
        if self.accelerator.scaler is not None:  # fp16: the scaler skips overflowing steps
            self.watch.note(step, self.loss.last, loss_bad, None)
            return
        grads = [p.grad for p in self.model.parameters() if p.grad is not None]
        bad = self.watch.note(step, self.loss.last, loss_bad, total_norm(grads))
        optimizer = self.optimizer.optimizer
        if is_fused(optimizer):
            skip_on_device(optimizer, bad)
        elif bool(bad) and self.run is not None:  # an unfused optimizer cannot: read it now
            self.run.raise_if_diverged()

    def add_model_card_callback(self, default_args_dict: dict[str, Any]) -> None:
        """No sentence-transformers model card: the pipeline writes its own with the model
        (`training.modelcard`); theirs would sample the corpus for examples at every start."""

    @property
    def watch(self) -> Watch:
        if getattr(self, "_watch", None) is None:
            self._watch = Watch(self.args.device)
        return self._watch


def is_fused(optimizer: torch.optim.Optimizer) -> bool:
    """Whether `optimizer` is torch's fused Adam(W), which can skip a step on the device."""
    fused = all(group.get("fused") for group in optimizer.param_groups)
    return isinstance(optimizer, torch.optim.Adam | torch.optim.AdamW) and fused


def skip_on_device(optimizer: torch.optim.Optimizer, bad: torch.Tensor) -> None:
    """Make fused Adam(W)'s next step skip its update where `bad` (a device flag) is true,
    without reading it: its `found_inf`, the flag torch's gradient scaler hands it. The one
    attribute of a library the pipeline sets (no public call skips a step on the device;
    `docs/training.md`); `tests/training/test_trainer.py::test_fused_adamw_skips_on_found_inf`
    fails if torch stops reading it."""
    optimizer.found_inf = bad.float()


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
