"""Which encoder this is: its weights hashed with its pooler and the width of its vectors.

A refinement records the identity of the encoder it was fitted on and refuses another; a training
run's key holds the hash of the weights it starts from; an evaluation records what it scored.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from sentemb.encoder import Encoder


@dataclass(frozen=True)
class ModelIdentity:
    """Which encoder this is: the model as named, a sha256 of its weights, its pooler and the
    width of its vectors (a refinement records the one it was fitted on; a training run's key
    records the weights). Two encoders are the same when all but the name agree."""

    model: str
    sha256: str
    pooler: str
    dim: int

    def same_vectors(self, other: ModelIdentity) -> bool:
        return (self.sha256, self.pooler, self.dim) == (other.sha256, other.pooler, other.dim)

    def __str__(self) -> str:
        return (
            f"{self.model} (weights sha256 {self.sha256[:12]}, pooler {self.pooler}, "
            f"{self.dim}-dim vectors)"
        )


def model_identity(name: str, encoder: Encoder) -> ModelIdentity:
    """`encoder`'s identity: the sha256 runs over every tensor of the backbone's state dict, by
    name, shape, dtype and bytes, so it holds whatever file format or folder the weights came
    from."""
    digest = hashlib.sha256()
    for key, tensor in sorted(encoder.backbone.state_dict().items()):
        digest.update(f"{key}:{tuple(tensor.shape)}:{tensor.dtype}".encode())
        digest.update(tensor.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy())
    width = encoder.backbone.config.hidden_size
    return ModelIdentity(name, digest.hexdigest(), encoder.pooler, width)
