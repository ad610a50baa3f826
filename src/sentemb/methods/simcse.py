"""Unsupervised SimCSE (Gao, Yao & Chen, EMNLP 2021), eq. 1: the base objective itself."""

from __future__ import annotations

from sentemb.losses import OneMethodLoss
from sentemb.methods.base import Method, SimCSEConfig
from sentemb.registry import register_method


@register_method("simcse", config=SimCSEConfig)
class SimCSE(Method):
    """InfoNCE over in-batch negatives of two dropout views; adds nothing to the base."""


class SimCSELoss(OneMethodLoss[SimCSEConfig]):
    """Unsupervised SimCSE (Gao, Yao & Chen, EMNLP 2021) as a sentence-transformers loss.

    Eq. 1: ``-log e^{sim(h_i, h_i^+)/τ} / Σ_j e^{sim(h_i, h_j^+)/τ}`` over two dropout views
    of each sentence, the other sentences of the batch as negatives, τ = 0.05, through a
    training-only dense + tanh head over the pooled vector.

    Example::

        from sentence_transformers import SentenceTransformer, SentenceTransformerTrainer
        from sentemb.methods.base import SimCSEConfig
        from sentemb.methods.simcse import SimCSELoss

        model = SentenceTransformer("bert-base-uncased")
        loss = SimCSELoss(model, SimCSEConfig(temperature=0.05))
        SentenceTransformerTrainer(model=model, train_dataset=sentences, loss=loss).train()
    """

    method = "simcse"
