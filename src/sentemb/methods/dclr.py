"""DCLR: debiased contrastive learning (Zhou et al., ACL 2022), eq. 1-6.

Noise negatives drawn from N(0, σ²) (eq. 1), k = ratio × batch size, moved by t steps of
normalised gradient ascent on the non-uniformity loss (eq. 2-4), join the in-batch negatives;
a frozen complementary model zeroes the in-batch negatives it finds too similar (sim ≥ φ,
eq. 5), and the debiased InfoNCE of eq. 6 is the result. The complementary model is the initial
encoder by default (with the pooling its folder names, e.g. mean for MiniLM), or the model at
`complementary_model`.

Ambiguities resolved (and how)
------------------------------
1. DCLR eq. 2 has only the noise in its denominator, so its numerator ``sim(h_i, h_i^+)`` is a
   constant for the noise and the gradient of eq. 4 is that of ``Σ_i log Σ_j e^{sim(h_i,ĥ_j)/τ_u}``;
   "maximizing the non-uniformity loss" means ascent (``+β g/‖g‖``, eq. 3), the gradient is
   normalised per noise vector, it is taken w.r.t. the noise only (anchors detached), and the
   projection Π, which the paper never defines, is the identity unless ``max_norm`` asks for the
   L2 ball. The returned noise is detached: the encoder loss may push the anchors away from it,
   but no gradient flows into it.
2. DCLR eq. 5 weights "a negative representation h^- from {h̃^-} or {ĥ^-}", but a noise vector has no
   text for the complementary model to encode: noise negatives get weight 1 unless the caller
   passes ``noise_weights``. The positive is always kept (its complementary similarity with the
   original sentence is ≈1 ≥ φ and would otherwise be zeroed); a negative is dropped when
   ``sim_C ≥ φ`` (φ = 0.9), kept when ``< φ``.
3. DCLR "k is the ratio of the noise-based negatives to the batch size" and "we generate
   1 × batch_size noise-based negatives as the common negatives of all instance in it": one shared
   ``[round(ratio × B), d]`` set for the whole batch.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, NamedTuple

import torch
from torch import Tensor

from sentemb.config import (
    LARGEST,
    ConfigError,
    NonNegative,
    NonNegativeInt,
    Positive,
    Probability,
    Temperature,
)
from sentemb.losses import OneMethodLoss
from sentemb.methods.base import Method, MethodConfig, Objective, RunShape, TrainState, Views
from sentemb.methods.functional import (
    NORM_EPS,
    Reduction,
    check_pairs,
    check_temperature,
    cosine_matrix,
    gather_with_grad,
    in_fp32,
    normalize,
    reduce_losses,
)
from sentemb.model_files import saved_pooler
from sentemb.pooling import check_pooler
from sentemb.registry import register_method

if TYPE_CHECKING:
    from sentence_transformers import SentenceTransformer


def noise_negatives(
    batch_size: int,
    dim: int,
    ratio: float = 1.0,
    sigma: float = 1.0,
    *,
    generator: torch.Generator | None = None,
    device: torch.device | str | None = None,
    dtype: torch.dtype | None = None,
) -> Tensor:
    """DCLR eq. 1: ``{ĥ_1, ..., ĥ_k} ~ N(0, σ²)``, ``[k, dim]`` with ``k = round(ratio × B)``.

    Shared by every sentence of the batch ("1 × batch_size noise-based negatives as the common
    negatives of all instance"); σ = 1 in the paper. ``device`` defaults to the generator's.
    """
    if batch_size < 0 or dim <= 0 or ratio < 0 or sigma < 0:
        raise ValueError(
            f"need batch_size >= 0, dim > 0, ratio >= 0, sigma >= 0; got {batch_size}, {dim}, "
            f"{ratio}, {sigma}"
        )
    count = math.floor(ratio * batch_size + 0.5)
    if device is None and generator is not None:
        device = generator.device
    noise = torch.randn(count, dim, generator=generator, device=device, dtype=dtype)
    return noise * sigma


@in_fp32
def non_uniformity_loss(
    anchors: Tensor,
    positives: Tensor,
    noise: Tensor,
    temperature: float,
    reduction: Reduction = "mean",
) -> Tensor:
    """DCLR eq. 2: ``L_U = -log e^{sim(h_i,h_i^+)/τ_u} / Σ_{ĥ_j} e^{sim(h_i,ĥ_j)/τ_u}``.

    As printed, the denominator holds the noise only (no positive, no in-batch negatives).
    """
    check_pairs(anchors, positives)
    check_temperature(temperature)
    if noise.dim() != 2 or noise.shape[0] == 0:
        raise ValueError(f"noise must be a non-empty [k, d], got {tuple(noise.shape)}")
    positive_logits = (normalize(anchors) * normalize(positives)).sum(dim=1) / temperature
    noise_logits = cosine_matrix(anchors, noise) / temperature
    return reduce_losses(torch.logsumexp(noise_logits, dim=1) - positive_logits, reduction)


@in_fp32
def non_uniformity_ascent(
    noise: Tensor,
    anchors: Tensor,
    *,
    steps: int,
    step_size: float,
    temperature: float,
    max_norm: float | None = None,
) -> Tensor:
    """DCLR eq. 3-4: ``t`` steps of ``ĥ_j ← Π(ĥ_j + β g(ĥ_j)/‖g(ĥ_j)‖_2)``, ``g = ∇_{ĥ_j} L_U``.

    Ascent (the noise moves to where ``L_U`` is larger, i.e. towards the anchors' directions).
    The gradient is w.r.t. the noise only: anchors are detached, and the numerator of eq. 2 does
    not depend on the noise, so ``g`` is the gradient of ``Σ_i log Σ_j e^{sim(h_i,ĥ_j)/τ_u}``
    (module note 1; its scale is irrelevant after the per-vector normalisation). Π is the
    identity, or the projection onto ``‖ĥ_j‖ ≤ max_norm``. The paper uses t = 4, β = 1e-3.
    Returns the updated noise, detached (no gradient flows into it afterwards); runs under
    `torch.enable_grad` so it also works inside `torch.no_grad`.
    """
    check_temperature(temperature)
    if steps < 0:
        raise ValueError(f"steps must be >= 0, got {steps}")
    if noise.dim() != 2 or anchors.dim() != 2 or noise.shape[1] != anchors.shape[1]:
        raise ValueError(
            f"expected noise [k, d] and anchors [B, d], got {tuple(noise.shape)} and "
            f"{tuple(anchors.shape)}"
        )
    fixed = anchors.detach()
    current = noise.detach().clone()
    if current.shape[0] == 0:
        return current
    with torch.enable_grad():
        for _ in range(steps):
            current.requires_grad_(True)
            objective = torch.logsumexp(cosine_matrix(fixed, current) / temperature, dim=1).sum()
            (grad,) = torch.autograd.grad(objective, current)
            direction = grad / grad.norm(dim=1, keepdim=True).clamp_min(NORM_EPS)
            current = current.detach() + step_size * direction
            if max_norm is not None:
                scale = (max_norm / current.norm(dim=1, keepdim=True).clamp_min(NORM_EPS)).clamp(
                    max=1.0
                )
                current = current * scale
    return current.detach()


class ComplementaryWeights(NamedTuple):
    """DCLR eq. 5 weights ``[B, B]`` (1 on the diagonal) and the share of negatives zeroed."""

    weights: Tensor
    zeroed_share: Tensor


def complementary_weights(comp_sims: Tensor, phi: float) -> ComplementaryWeights:
    """DCLR eq. 5: ``α_{h^-} = 0 if sim_C(h_i, h^-) ≥ φ else 1`` for the in-batch negatives.

    ``comp_sims[i, j]`` is the frozen complementary model's (SimCSE's) cosine of sentences i and
    j (e.g. ``cosine_matrix(c, c)`` of its embeddings ``c``); φ = 0.9 in the paper. The diagonal
    (the positive) is always 1 (module note 2). ``zeroed_share`` (0-dim tensor) is the fraction of
    the ``B(B-1)`` off-diagonal negatives that got weight 0, for logging.
    """
    if comp_sims.dim() != 2 or comp_sims.shape[0] != comp_sims.shape[1]:
        raise ValueError(f"comp_sims must be [B, B], got {tuple(comp_sims.shape)}")
    sims = comp_sims.detach()
    batch = sims.shape[0]
    eye = torch.eye(batch, dtype=torch.bool, device=sims.device)
    dropped = (sims >= phi) & ~eye
    weights = (~dropped).to(sims.dtype if sims.is_floating_point() else torch.float32)
    pairs = batch * (batch - 1)
    share = dropped.sum().to(weights.dtype) / pairs if pairs else weights.new_zeros(())
    return ComplementaryWeights(weights, share)


@dataclass
class DCLRConfig(MethodConfig):
    """Params section `dclr` (the paper's §5.1 values)."""

    noise_ratio: NonNegative = 1.0
    sigma: Positive = 1.0
    ascent_steps: NonNegativeInt = 4
    ascent_lr: NonNegative = 1e-3
    noise_temperature: Temperature = 0.05
    phi: Probability = 0.9  # a cosine threshold (eq. 5)
    complementary_model: str | None = None
    complementary_pooler: str = "auto"

    def run_problems(self, run: RunShape) -> list[str]:
        """`noise_ratio` (unless 0, off) must give at least one noise negative per global
        batch (`train.batch_size`), and no more than torch takes."""
        noise = self.noise_ratio * run.batch_size  # k, rounded half up (`noise_negatives`)
        if self.noise_ratio and not 0.5 <= noise < LARGEST.high + 0.5:
            return [
                f"noise_ratio: {self.noise_ratio} x train.batch_size {run.batch_size} is "
                f"{noise:.3g} noise negatives; it must round to 1 to {LARGEST.high} "
                "(noise_ratio: 0 turns them off)"
            ]
        return []


@register_method("dclr", config=DCLRConfig)
class DCLR(Method):
    """Noise negatives plus complementary-model instance weights."""

    def __init__(self, config: DCLRConfig, model: SentenceTransformer) -> None:
        super().__init__(config, model)
        self._complementary = [complementary_model(config, model)]  # a list: frozen, unsaved

    def unstable_params(self) -> tuple[str, ...]:
        return ("noise_temperature", "sigma", "ascent_lr")

    @torch.no_grad()
    def _complementary_similarities(self, views: Views) -> torch.Tensor:
        batch = views.batch
        model = self._complementary[0].to(batch["input_ids"].device)
        features = {"input_ids": batch["input_ids"], "attention_mask": batch["attention_mask"]}
        embeddings = model(features)["sentence_embedding"]
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
        objective.logs["dclr/zeroed_share"] = weights.zeroed_share


def complementary_model(config: DCLRConfig, model: SentenceTransformer) -> SentenceTransformer:
    """DCLR's frozen complementary model: the model being trained as it is now, or the one at
    `dclr.complementary_model`, pooling with `dclr.complementary_pooler` (`auto`: as the
    model's folder says; paper: a trained SimCSE). It encodes the batch's token ids, so its
    tokenizer must be the model's."""
    from sentemb.st_model import pooled, st_model

    param = "dclr.complementary_pooler"
    transformer = model[0]
    source = config.complementary_model or transformer.auto_model.name_or_path
    pooler = check_pooler(config.complementary_pooler, param, auto=True)
    if pooler == "auto":
        pooler = saved_pooler(source) or "cls_before_pooler"
    device = str(model.device)
    if config.complementary_model is None:
        frozen = pooled(
            copy.deepcopy(transformer), pooler, param, source, "model.name_or_path", device
        )
    else:
        frozen = st_model(
            config.complementary_model,
            pooler,
            transformer.max_seq_length,
            param="dclr.complementary_model",
            pooler_param=param,
            device=device,
        )
        if frozen.tokenizer.get_vocab() != transformer.tokenizer.get_vocab():
            raise ConfigError(
                f"dclr.complementary_model: {config.complementary_model} has another tokenizer "
                "than the model being trained; it encodes the batch's token ids, which it would "
                "read as other words: use a model of the same vocabulary"
            )
    return frozen.eval().requires_grad_(False)


class DCLRLoss(OneMethodLoss[DCLRConfig]):
    """DCLR (Zhou et al., ACL 2022) as a sentence-transformers loss.

    Eq. 1-6: SimCSE's InfoNCE with noise negatives moved by gradient ascent (eq. 1-4), the
    in-batch negatives a frozen complementary model finds too similar dropped (eq. 5).

    Example::

        from sentence_transformers import SentenceTransformer, SentenceTransformerTrainer
        from sentemb.methods.dclr import DCLRConfig, DCLRLoss

        model = SentenceTransformer("bert-base-uncased")
        loss = DCLRLoss(model, DCLRConfig(phi=0.9))
        SentenceTransformerTrainer(model=model, train_dataset=sentences, loss=loss).train()
    """

    method = "dclr"
