"""Params section `train`, apart from the loop so that stages reading it import no training code
(nor torch: the poolers it names are checked where training starts, `training.run.prepare`)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Annotated, Literal

from sentemb.config import Count, NonNegative, NonNegativeInt, Range

DEVICES = r"auto|cpu|cuda(:\d+)?"  # whether the machine has it is checked where training starts
# AdamW's first update is learning_rate / (1 - beta1) = 10 x learning_rate, which must be a float32
FLOAT32_MAX = 3.4028234663852886e38  # torch.finfo(torch.float32).max, without importing torch
MAX_LEARNING_RATE = FLOAT32_MAX / 10
WHY = "AdamW's first step, 10 x learning_rate, must be a float32"
# the built-in corpora: files the download stage writes (by their names of old)
WIKI = "data/raw/corpus/wiki1m_for_simcse.txt"
BUILT_IN = {"wiki": WIKI, "sts": "data/raw/corpus/sts.txt"}
LearningRate = Annotated[float, Range(0, MAX_LEARNING_RATE, open_low=True, open_high=True, why=WHY)]
# AdamW's decoupled decay multiplies every weight by 1 - learning_rate x weight_decay each step:
# at 0.01 a weight the loss does not hold halves in 69 steps (BERT fine-tuning: 2e-5 x 0.01)
MAX_DECAY = 0.01


@dataclass
class TrainConfig:
    """Params section `train` (unsupervised SimCSE's defaults; the trainer's flags)."""

    max_length: Count = 32  # checked against the model's tokens and positions where it loads
    batch_size: Count = 64
    nproc: Count = 1  # processes: above 1 the train stage runs itself under torchrun
    learning_rate: LearningRate = 3e-5
    epochs: Count = 1
    max_steps: Count | None = None
    weight_decay: NonNegative = 0.0
    warmup_steps: NonNegativeInt = 0
    max_grad_norm: NonNegative = 1.0  # clip the gradient norm (HF Trainer's default); 0: off
    pooler: str = "cls_before_pooler"
    mlp_head: bool = True
    eval_pooler: str = "cls_before_pooler"
    eval_steps: Count = 125
    selection: str = "stsb"  # stsb | stsb+sick | an eval.own set's name (training.selection)
    checkpoint_minutes: NonNegative = 2.0  # wall time between checkpoints; 0: every step
    log_steps: Count = 10
    precision: Literal["auto", "fp32", "bf16", "fp16"] = "auto"
    device: str = "auto"
    corpus: str = WIKI  # a file (sentemb.data.corpus): the repo's path, or an absolute one
    text_column: str = "text"  # the text's column in a .csv, .tsv, .jsonl or .parquet corpus
    drop_duplicates: bool = False  # SimCSE trains on wiki1m's repeats (366 in the mirror's head)
    compile: bool | Literal["auto"] = "auto"  # torch.compile the model; auto: on CUDA only
    attention: Literal["sdpa", "eager"] = "sdpa"  # transformers' attention implementation
    fused_adamw: bool = True  # one fused kernel per step; skips a non-finite step on the device
    workers: NonNegativeInt | Literal["auto"] = "auto"  # data loader processes; auto: CUDA 4, CPU 0

    def steps(self, sentences: int) -> int:
        """The run's optimizer steps on a corpus of `sentences`: `max_steps`, else `epochs` of
        whole batches."""
        return self.max_steps or self.epochs * (sentences // self.batch_size)

    def validate(self) -> list[str]:
        problems = []
        if not re.fullmatch(DEVICES, self.device):
            problems.append(
                f"device: {self.device!r} is not a device; use auto, cpu, cuda or cuda:<index>"
            )
        if self.corpus in BUILT_IN:
            problems.append(f"corpus: {self.corpus!r} is now a file: {BUILT_IN[self.corpus]}")
        elif not self.corpus.strip():
            problems.append(f"corpus: a path of a corpus file, got {self.corpus!r}")
        if not self.text_column:
            problems.append("text_column: the name of the text's column, got ''")
        if (decay := self.learning_rate * self.weight_decay) > MAX_DECAY:
            problems.append(
                f"weight_decay: {self.weight_decay} x train.learning_rate {self.learning_rate} "
                f"is {decay:.3g}; it must be <= {MAX_DECAY} (AdamW shrinks every weight by that "
                "share each step)"
            )
        return problems
