"""DCLR: debiased contrastive learning (Zhou et al., ACL 2022), eq. 1-6.

Noise negatives drawn from N(0, σ²) (eq. 1), k = ratio × batch size, moved by t steps of
normalised gradient ascent on the non-uniformity loss (eq. 2-4), join the in-batch negatives;
a frozen complementary model zeroes the in-batch negatives it finds too similar (sim ≥ φ,
eq. 5), and the debiased InfoNCE of eq. 6 is the result. The complementary model is the initial
encoder by default (with the pooling its folder names, e.g. mean for MiniLM), or the model at
`complementary_model`.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

import torch

from sentemb.encoder import Encoder, saved_pooler
from sentemb.methods.base import Method, Objective, TrainState, Views, register_method
from sentemb.methods.functional import (
    complementary_weights,
    cosine_matrix,
    gather_with_grad,
    noise_negatives,
    non_uniformity_ascent,
)


@dataclass
class DCLRConfig:
    """Params section `dclr` (the paper's §5.1 values)."""

    noise_ratio: float = 1.0
    sigma: float = 1.0
    ascent_steps: int = 4
    ascent_lr: float = 1e-3
    noise_temperature: float = 0.05
    phi: float = 0.9
    complementary_model: str | None = None
    complementary_pooler: str = "auto"

    def validate(self) -> list[str]:
        problems = []
        if self.noise_ratio < 0:
            problems.append(f"noise_ratio: must be >= 0, got {self.noise_ratio}")
        if self.sigma <= 0 or self.noise_temperature <= 0:
            problems.append("sigma, noise_temperature: must be > 0")
        if self.ascent_steps < 0 or self.ascent_lr < 0:
            problems.append("ascent_steps, ascent_lr: must be >= 0")
        if not 0 <= self.phi <= 1:
            problems.append(f"phi: must be in [0, 1], got {self.phi}")
        return problems


@register_method("dclr", config=DCLRConfig)
class DCLR(Method):
    """Noise negatives plus complementary-model instance weights."""

    def __init__(self, config: DCLRConfig, encoder: Encoder) -> None:
        super().__init__(config, encoder)
        if config.complementary_model is None:
            complementary = copy.deepcopy(encoder)
            complementary.pooler = (
                config.complementary_pooler
                if config.complementary_pooler != "auto"
                else saved_pooler(encoder.backbone.name_or_path) or encoder.pooler
            )
        else:
            complementary = Encoder.from_pretrained(
                config.complementary_model,
                config.complementary_pooler,
                param="dclr.complementary_model",
            )
        complementary.eval().requires_grad_(False)
        # A list hides it from `parameters()` and `state_dict()`: frozen, rebuilt on resume.
        self._complementary = [complementary]

    @torch.no_grad()
    def _complementary_similarities(self, views: Views) -> torch.Tensor:
        model = self._complementary[0].to(views.anchors.device)
        batch = views.batch
        embeddings = model(batch["input_ids"], batch["attention_mask"]).pooled
        embeddings = gather_with_grad(embeddings.float())
        return cosine_matrix(embeddings, embeddings)

    def contribute(self, objective: Objective, views: Views, state: TrainState) -> None:
        config = self.config
        anchors = objective.anchors
        if config.noise_ratio > 0:
            noise = noise_negatives(
                anchors.shape[0],
                anchors.shape[1],
                config.noise_ratio,
                config.sigma,
                generator=state.generator,
                device=state.generator.device,
            ).to(anchors.device, anchors.dtype)
            noise = non_uniformity_ascent(
                noise,
                anchors,
                steps=config.ascent_steps,
                step_size=config.ascent_lr,
                temperature=config.noise_temperature,
            )
            objective.add_negatives(noise)
        weights = complementary_weights(self._complementary_similarities(views), config.phi)
        objective.weigh_negatives(weights.weights.to(anchors.dtype))
        objective.logs["dclr/zeroed_share"] = float(weights.zeroed_share)
