"""Params section `model`: the encoder every stage loads, readable without torch.

`model.pooler` names a pooler of `sentemb.pooling.POOLERS` (or `auto`: the model's own pooling).
That registry lives beside the poolers' torch code, so the name is checked by `check_pooler`
where the torch side reads this section: before an evaluation encoder is loaded
(`evaluation.encoders.load_encoder`) and before training starts (`training.run.prepare`).
"""

from __future__ import annotations

from dataclasses import dataclass

from sentemb.config import Count

DEFAULT_MODEL = "sentence-transformers/all-MiniLM-L6-v2"
PRECISIONS = ("auto", "fp32", "bf16", "fp16")


@dataclass
class ModelConfig:
    """Params section `model`."""

    name_or_path: str = DEFAULT_MODEL
    pooler: str = "auto"
    max_length: Count | None = None  # checked against the model's positions where it loads
    batch_size: Count = 128
    trust_remote_code: bool = False
    precision: str = "auto"

    def validate(self) -> list[str]:
        if self.precision not in PRECISIONS:
            return [f"precision: {self.precision!r} is not one of {list(PRECISIONS)}"]
        return []
