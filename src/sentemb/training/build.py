"""sentence-transformers' trainer built for a training job: its arguments from params section
`train` (device, precision, compile, workers, clipping, logging and dev-score steps), the
tokenized corpus and collator, and the run's callback."""

from __future__ import annotations

import math
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import torch

from sentemb.pooling import POOLERS
from sentemb.precision import autocast_dtype
from sentemb.training.callback import RunCallback, RunHooks
from sentemb.training.data import Collator, training_dataset
from sentemb.training.processes import pick_device, process_rank
from sentemb.training.trainer import DevScore, Trainer

if TYPE_CHECKING:
    from sentence_transformers import SentenceTransformer
    from transformers import TrainerCallback

    from sentemb.losses import MethodLoss
    from sentemb.methods.base import SentenceData
    from sentemb.training.config import TrainConfig


class Job(Protocol):
    """What the trainer is built from: `sentemb.training.run.TrainingJob` is one."""

    config: TrainConfig
    model: SentenceTransformer
    loss: MethodLoss
    sentences: list[str]
    sentence_data: dict[str, SentenceData[Any]]
    seed: int


def build_trainer(
    job: Job,
    run_dir: Path,
    hooks: RunHooks,
    resume: Path | None,
    world: int,
    callbacks: Sequence[TrainerCallback] = (),
) -> Trainer:
    """sentence-transformers' trainer for `job`, its flags from params section `train`: the
    device, bf16/fp16 (`train.precision`), fused AdamW, torch.compile (`auto`: on CUDA), data
    loader workers with pinned memory (`auto`: 4 per GPU, none on the CPU), clipping, a log
    every `log_steps`, a dev score every `eval_steps`; the trainer's per-step NaN filter off."""
    from sentence_transformers import SentenceTransformerTrainingArguments
    from transformers import PrinterCallback

    config = job.config
    device = pick_device(config.device, process_rank())
    if device.type == "cuda":
        torch.cuda.set_device(device)
    dtype = autocast_dtype(config.precision, device)
    cuda = device.type == "cuda"
    compiled = cuda if config.compile == "auto" else config.compile
    workers = min(4, (os.cpu_count() or 1) // world) if config.workers == "auto" and cuda else 0
    workers = workers if config.workers == "auto" else config.workers
    job.loss.total_steps = config.steps(len(job.sentences))
    pooler_layer = getattr(job.model[0].auto_model, "pooler", None)
    if pooler_layer is not None and not POOLERS[config.pooler].dense:
        pooler_layer.requires_grad_(
            False
        )  # computed, never pooled: DDP expects every weight to learn
    inputs = job.loss.batch_inputs()
    tokenizer = job.model.tokenizer
    data = training_dataset(
        job.sentences, tokenizer, config.max_length, job.sentence_data, keep_text=bool(inputs)
    )
    collate = Collator(
        tokenizer.pad_token_id, config.max_length if compiled else None, inputs, job.seed
    )
    args = SentenceTransformerTrainingArguments(
        output_dir=str(run_dir),
        per_device_train_batch_size=config.batch_size // world,
        learning_rate=config.learning_rate,
        weight_decay=config.weight_decay,
        warmup_steps=config.warmup_steps,
        lr_scheduler_type="linear",
        num_train_epochs=config.epochs,
        max_steps=config.max_steps or -1,
        max_grad_norm=config.max_grad_norm or math.inf,
        optim="adamw_torch_fused" if config.fused_adamw else "adamw_torch",
        bf16=dtype == torch.bfloat16,
        fp16=dtype == torch.float16,
        use_cpu=not cuda,
        torch_compile=compiled,
        logging_strategy="steps",
        logging_steps=config.log_steps,
        logging_nan_inf_filter=False,
        eval_strategy="steps",
        eval_steps=config.eval_steps,
        save_strategy="no",  # the callback saves by wall time (train.checkpoint_minutes)
        save_total_limit=2,  # the newest complete one survives a kill while writing the next
        seed=job.seed,
        data_seed=job.seed,
        dataloader_num_workers=workers,
        dataloader_pin_memory=cuda,
        dataloader_drop_last=True,
        accelerator_config={"non_blocking": cuda},
        ddp_find_unused_parameters=False,
        report_to="none",
        disable_tqdm=not sys.stderr.isatty(),
    )
    callback = RunCallback(hooks, config, resume)
    trainer = Trainer(
        model=job.model,
        args=args,
        train_dataset=data,
        loss=job.loss,
        evaluator=DevScore(callback.score),
        data_collator=collate,
        callbacks=[callback, *callbacks],
    )
    trainer.remove_callback(PrinterCallback)  # the callback logs each logged step as a line
    callback.trainer, trainer.run = trainer, callback
    return trainer
