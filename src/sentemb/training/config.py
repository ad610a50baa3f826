"""Params section `train`, apart from the loop so that stages reading it import no training code
(nor torch: the poolers it names are checked where training starts, `training.run.prepare`)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from sentemb.config import at_least

DEVICES = r"auto|cpu|cuda(:\d+)?"  # whether the machine has it is checked where training starts
# AdamW's first update is learning_rate / (1 - beta1) = 10 x learning_rate, which must be a float32
FLOAT32_MAX = 3.4028234663852886e38  # torch.finfo(torch.float32).max, without importing torch
MAX_LEARNING_RATE = FLOAT32_MAX / 10


@dataclass
class TrainConfig:
    """Params section `train` (unsupervised SimCSE's defaults)."""

    max_length: int = 32
    batch_size: int = 64
    learning_rate: float = 3e-5
    epochs: int = 1
    max_steps: int | None = None
    weight_decay: float = 0.0
    warmup_steps: int = 0
    pooler: str = "cls_before_pooler"
    mlp_head: bool = True
    eval_pooler: str = "cls_before_pooler"
    eval_steps: int = 125
    selection: Literal["stsb", "stsb+sick"] = "stsb"
    checkpoint_steps: int = 50
    log_steps: int = 10
    precision: Literal["auto", "fp32", "bf16", "fp16"] = "auto"
    device: str = "auto"
    corpus: Literal["wiki", "sts"] = "wiki"

    def validate(self) -> list[str]:
        problems = at_least(
            self,
            1,
            "max_length",
            "batch_size",
            "epochs",
            "max_steps",
            "eval_steps",
            "checkpoint_steps",
            "log_steps",
        )
        problems += at_least(self, 0, "warmup_steps", "weight_decay")
        if not 0 < self.learning_rate < MAX_LEARNING_RATE:
            problems.append(
                f"learning_rate: must be > 0 and < {MAX_LEARNING_RATE:.3g} (AdamW's first step, "
                f"10 x learning_rate, must be a float32), got {self.learning_rate}"
            )
        if not re.fullmatch(DEVICES, self.device):
            problems.append(
                f"device: {self.device!r} is not a device; use auto, cpu, cuda or cuda:<index>"
            )
        return problems
