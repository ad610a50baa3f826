"""Unsupervised SimCSE (Gao, Yao & Chen, EMNLP 2021), eq. 1: the base objective itself."""

from __future__ import annotations

from sentemb.methods.base import Method, SimCSEConfig
from sentemb.registry import register_method


@register_method("simcse", config=SimCSEConfig)
class SimCSE(Method):
    """InfoNCE over in-batch negatives of two dropout views; adds nothing to the base."""
