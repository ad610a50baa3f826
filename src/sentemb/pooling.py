"""The poolers used by SimCSE and its kin (Gao et al., 2021, §3 and their released code):

- ``cls``: the [CLS] vector passed through the backbone's pooler layer (dense + tanh), the layer
  that SimCSE trains as its MLP head;
- ``cls_before_pooler``: the raw [CLS] vector of the last layer;
- ``mean``: the average of the last layer's token vectors over the attention mask;
- ``first_last_avg``: the masked token average of the first and last transformer layers.

They are declared once, in `POOLERS`: training, evaluation (`pool`), analysis (a pooler's
per-layer `vector`, SSCL eq. 2), the saved pooler file and the sentence-transformers export all
read that table, so a new pooler is one entry there. A table, not a registry of files like
methods, suites and refinements (`sentemb.registry`): a pooler is a function and two flags with
no params section of its own, a few lines that a file and a class apiece would only spread out.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from sentemb.config import ConfigError


def masked_mean(hidden: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """Average of token vectors over the positions where `attention_mask` is 1."""
    mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
    return (hidden * mask).sum(1) / mask.sum(1).clamp(min=1.0)


def cls_vector(hidden: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """The vector of the first token ([CLS]); padding is on the right, so it is never padding."""
    return hidden[:, 0]


@dataclass(frozen=True)
class Pooler:
    """How one pooler turns a forward pass into sentence vectors.

    `vector` reduces one layer's tokens to a vector per sentence; `layers` are the hidden states
    (0 = the embedding layer) averaged before it; `dense` hands that layer to the backbone's
    pooler layer (dense + tanh on [CLS]) instead; `st_mode` is the sentence-transformers pooling
    config flag of the same pooler, if it has one (read by `saved_pooler`, written by `save`).
    """

    vector: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
    layers: tuple[int, ...] = (-1,)
    dense: bool = False
    st_mode: str | None = None


POOLERS: dict[str, Pooler] = {
    "cls": Pooler(cls_vector, dense=True),
    "cls_before_pooler": Pooler(cls_vector, st_mode="pooling_mode_cls_token"),
    "mean": Pooler(masked_mean, st_mode="pooling_mode_mean_tokens"),
    "first_last_avg": Pooler(masked_mean, layers=(1, -1)),
}


def check_pooler(pooler: str, param: str, auto: bool = False) -> str:
    """`pooler` when `POOLERS` registers it (or it is `auto`, the model's own pooling, where
    `auto` allows that); else a `ConfigError` naming `param`. Whether a model can pool with it
    is `model_checks.check_pooling`."""
    allowed = ["auto", *POOLERS] if auto else list(POOLERS)
    if pooler not in allowed:
        raise ConfigError(f"{param}: {pooler!r} is not one of {allowed}")
    return pooler


def pool(
    pooler: str,
    hidden_states: Sequence[torch.Tensor],
    attention_mask: torch.Tensor,
    pooler_layer: torch.nn.Module | None = None,
) -> torch.Tensor:
    """Pool token vectors into one sentence vector; `hidden_states[0]` is the embedding layer.
    `pooler` was checked against the backbone (`check_pooler`) where it was chosen."""
    spec = POOLERS[pooler]
    hidden = hidden_states[spec.layers[0]]
    if len(spec.layers) > 1:
        hidden = sum((hidden_states[i] for i in spec.layers[1:]), hidden) / float(len(spec.layers))
    if not spec.dense:
        return spec.vector(hidden, attention_mask)
    return pooler_layer(hidden)
