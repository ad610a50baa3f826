"""SSCL: self-contrastive negatives from intermediate layers (Chen et al., ACL 2023 Findings).

Eq. 4 adds the pooled intermediate-layer vectors ``h_i^-`` as negatives of the last-layer anchor
``h_i``. `layers: [-2]` is SSCL (the penultimate layer); `[-2, -3]` stacks the last two below the
top (Progressive SSCL, §5.2). `variant` picks the reading of eq. 4 (note 1 below):
``self``: each sentence's own intermediate vector is its one extra negative; ``batch``: the
intermediate vectors of both views of every sentence are negatives of every anchor, and with
`average_with_simcse` that loss is averaged with the loss without them, as the authors' code does.

Ambiguity resolved (and how)
----------------------------
1. SSCL eq. 4 literally reads ``Σ^N (e^{Ψ(h_i,h_j)/τ} + e^{Ψ(h_i,h_i^-)/τ})``, which counts the
   sentence's own intermediate vector N times. Two readings are offered (`sscl_negatives`):
   "self" -- each anchor's own intermediate vector(s) once each (``extra_weights=N`` would recover
   the literal N-fold count); "batch" -- "SSCL enlarges the size of mini-batch negatives from N
   pairs to 2N pairs" (App. B.2) and the authors' released code (`construct_negtives`): the pooled
   intermediate-layer vectors of every sentence, both dropout views, of each of the last k layers,
   are shared negatives, and that loss is averaged with the plain SimCSE loss
   (``loss = (loss + r_loss) / 2``; the `sscl.average_with_simcse` param). The anchor is the
   last-layer ``h_i`` ("we treat the last layer representation as the final sentence
   representation"), the temperature is the same τ = 0.05 ("τ is set to 0.05"), the layers are the
   M-th (best: 11 of 12) or, progressively, the last k stacked ("stacking 2 layers represents
   utilizing 11-th and 10-th transformer layers"). The intermediate vectors are not detached
   (neither the paper nor the code stops their gradient).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Annotated, Literal

import torch
from torch import Tensor

from sentemb.config import ConfigError, Range
from sentemb.losses import OneMethodLoss
from sentemb.methods.base import Method, MethodConfig, Objective, RunShape, TrainState, Views
from sentemb.methods.functional import gather_with_grad
from sentemb.registry import register_method

if TYPE_CHECKING:
    from sentence_transformers import SentenceTransformer

SSCLVariant = Literal["self", "batch"]


def sscl_negatives(intermediate: Sequence[Tensor], variant: SSCLVariant) -> Tensor:
    """Intermediate-layer negatives ``h_i^-`` of SSCL eq. 4, in the form `info_nce` takes.

    Args:
        intermediate: pooled intermediate-layer sentence vectors, each ``[B, d]`` with row i
            belonging to sentence i: one layer (SSCL, best the 11th of 12), the last k layers
            (Progressive SSCL, §5.2, best k = 2: layers 11 and 10), and for the released-code
            reading both dropout views of each layer.
        variant: ``"self"``: each sentence's own vectors are its only extra negatives ->
            ``[B, m, d]`` (m = len(intermediate)), the literal ``Ψ(h_i, h_i^-)`` of eq. 4;
            ``"batch"``: every sentence's vectors are shared negatives of every anchor ->
            ``[m × B, d]``, as in the authors' code (App. B.2: "from N pairs to 2N pairs").

    The tensors are not detached (module note 1), so the loss also pushes the intermediate
    layers away from the final one.
    """
    layers = list(intermediate)
    if not layers:
        raise ValueError("intermediate must hold at least one [B, d] tensor")
    shape = layers[0].shape
    if len(shape) != 2 or any(t.shape != shape for t in layers):
        shapes = [tuple(t.shape) for t in layers]
        raise ValueError(f"every intermediate tensor must be the same [B, d], got {shapes}")
    if variant == "self":
        return torch.stack(layers, dim=1)
    if variant == "batch":
        return torch.cat(layers, dim=0)
    raise ValueError(f"variant must be 'self' or 'batch', got {variant!r}")


@dataclass
class SSCLConfig(MethodConfig):
    """Params section `sscl`."""

    # hidden layers counted from the last (-1); the model's depth bounds them (`run_problems`)
    layers: list[Annotated[int, Range(high=-2)]] = field(default_factory=lambda: [-2])
    variant: Literal["self", "batch"] = "batch"
    average_with_simcse: bool = True

    def validate(self) -> list[str]:
        problems = []
        if not self.layers:
            problems.append("layers: must name at least one layer, got []")
        if self.variant == "self" and self.average_with_simcse:
            problems.append("average_with_simcse: only meaningful with variant 'batch'")
        return problems

    def run_problems(self, run: RunShape) -> list[str]:
        return self.layer_problems(run.depth, run.model)

    def layer_problems(self, depth: int, model: str) -> list[str]:
        """What is wrong with `layers` for `model` (its name or folder), of `depth` hidden
        layers."""
        return [
            f"layers: {layer} is not in [-{depth}, -2]: the model (model.name_or_path: "
            f"{model}) has {depth} hidden layers"
            for layer in self.layers
            if -layer > depth
        ]


@register_method("sscl", config=SSCLConfig)
class SSCL(Method):
    """Intermediate-layer negatives (SSCL eq. 4), a plug-in on top of any other method."""

    hidden_states = True

    def __init__(self, config: SSCLConfig, model: SentenceTransformer) -> None:
        super().__init__(config, model)
        encoder = model[0].auto_model.config
        for problem in config.layer_problems(encoder.num_hidden_layers, encoder.name_or_path):
            raise ConfigError(f"sscl.{problem}")
        self._added: Tensor | None = None

    def contribute(self, objective: Objective, views: Views, state: TrainState) -> None:
        per_layer = []
        for layer in self.config.layers:
            per_layer.append(gather_with_grad(views.project(views.first, layer)))
            if self.config.variant == "batch":
                per_layer.append(gather_with_grad(views.project(views.second, layer)))
        negatives = sscl_negatives(per_layer, self.config.variant)
        objective.add_negatives(negatives)
        self._added = negatives
        with torch.no_grad():
            anchors = torch.nn.functional.normalize(objective.anchors, dim=-1)
            own = torch.nn.functional.normalize(per_layer[0], dim=-1)
            objective.logs["sscl/own_layer_cosine"] = (anchors * own).sum(-1).mean()

    def finish(self, objective: Objective, loss: Tensor) -> Tensor:
        if not self.config.average_with_simcse:
            return loss
        keep = [i for i, t in enumerate(objective.extra_negatives) if t is not self._added]
        without = replace(
            objective,
            extra_negatives=[objective.extra_negatives[i] for i in keep],
            extra_weights=[objective.extra_weights[i] for i in keep],
        )
        return 0.5 * (loss + without.contrastive_loss())


class SSCLLoss(OneMethodLoss[SSCLConfig]):
    """SSCL (Chen et al., ACL 2023 Findings) as a sentence-transformers loss.

    Eq. 4: SimCSE's InfoNCE with the pooled intermediate-layer vectors ``h_i^-`` as extra
    negatives of the last-layer anchor (`layers`, `variant`; module docstring).

    Example::

        from sentence_transformers import SentenceTransformer, SentenceTransformerTrainer
        from sentemb.methods.sscl import SSCLConfig, SSCLLoss

        model = SentenceTransformer("bert-base-uncased")
        loss = SSCLLoss(model, SSCLConfig(layers=[-2, -3]))  # Progressive SSCL, §5.2
        SentenceTransformerTrainer(model=model, train_dataset=sentences, loss=loss).train()
    """

    method = "sscl"
