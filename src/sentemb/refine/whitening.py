"""Whitening (Su et al., 2021, "Whitening sentence representations for better semantics and
faster retrieval", eq. 5-8), RepAL's baseline: x̃ = (x - μ) W with W = U Λ^(-1/2) from the SVD
of the covariance Σ = U Λ U^T, optionally keeping the first k columns of W.

Ambiguity: directions of (numerically) zero variance cannot be scaled to unit variance; they are
dropped, so the kernel has at most rank(Σ) columns.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from sentemb.config import ConfigError, Count
from sentemb.evaluation.base import SentenceEncoder, distinct
from sentemb.refine.base import Refinement, Scalars, Tensors
from sentemb.registry import register_refinement

log = logging.getLogger(__name__)

RANK_TOLERANCE = 1e-10  # variances below this share of the largest count as zero


@dataclass
class WhiteningConfig:
    """Params section `refine.whitening`."""

    # keep the first k whitened dimensions (Su et al. §3); null = all; at most the model's width
    dim: Count | None = None


@dataclass
class Whitening:
    """Su et al. (2021): `transform(x) = (x - bias) @ kernel`."""

    kernel: np.ndarray
    bias: np.ndarray

    @classmethod
    def fit(cls, vectors: np.ndarray, dim: int | None = None) -> Whitening:
        """μ and W = U Λ^(-1/2) (first `dim` columns) from the rows of `vectors` (eq. 5-8)."""
        x = np.asarray(vectors, dtype=np.float64)
        if dim is not None and dim > x.shape[1]:
            raise ConfigError(
                f"refine.whitening.dim: {dim} is more than the {x.shape[1]} dimensions of the "
                "model's vectors; lower it (null keeps them all)"
            )
        if len(x) < 2:
            raise ConfigError(
                f"refine.whitening: fitting needs 2 or more vectors, got {len(x)}; fit it on more "
                "sentences (refine.fit_on)"
            )
        mu = x.mean(axis=0)
        u, s, _ = np.linalg.svd(np.cov(x - mu, rowvar=False, bias=True))
        rank = int(np.sum(s > RANK_TOLERANCE * s[0])) if s[0] > 0 else 0
        if rank == 0:
            raise ConfigError(
                f"refine.whitening: the {len(x)} fitting vectors are all equal; fit it on more "
                "(and more varied) sentences (refine.fit_on)"
            )
        wanted = dim or x.shape[1]
        if len(x) - 1 < wanted:  # too few to span them; a model's own flat directions are not
            log.warning(
                "refine.whitening: %d fitting vectors span at most %d of the %d dimensions asked "
                "for, so the kernel keeps %d; fit it on more sentences (refine.fit_on, "
                "refine.corpus_size, refine.valid_pairs)",
                len(x),
                len(x) - 1,
                wanted,
                min(rank, wanted),
            )
        kernel = u[:, :rank] / np.sqrt(s[:rank])
        return cls(kernel[:, :dim], mu)

    def transform(self, vectors: np.ndarray) -> np.ndarray:
        return ((np.asarray(vectors, dtype=np.float64) - self.bias) @ self.kernel).astype(
            np.float32
        )


class WhitenedEncoder:
    """Whitening around `encoder`; `whitening=None` fits it on the sentences of each call."""

    def __init__(
        self, encoder: SentenceEncoder, whitening: Whitening | None, dim: int | None = None
    ) -> None:
        self.encoder, self.whitening, self.dim = encoder, whitening, dim

    def encode(self, sentences: Sequence[str], batch_size: int = 128) -> np.ndarray:
        whitening = self.whitening
        if whitening is None:
            fit = self.encoder.encode(list(distinct(sentences)), batch_size)
            whitening = Whitening.fit(fit, self.dim)
        return whitening.transform(self.encoder.encode(sentences, batch_size))


@register_refinement("whitening", config=WhiteningConfig)
class WhiteningRefinement(Refinement):
    """Whitening fitted on the fitting sentences' vectors (the fit is a `Whitening` or None)."""

    label = "whitening"
    config: WhiteningConfig

    def fit(self, vectors: np.ndarray | None) -> tuple[Whitening | None, Scalars]:
        if vectors is None:
            return None, {}
        whitening = Whitening.fit(vectors, self.config.dim)
        return whitening, {"whitening/dims": whitening.kernel.shape[1]}

    def wrap(self, encoder: SentenceEncoder, fit: Whitening | None) -> SentenceEncoder:
        return WhitenedEncoder(encoder, fit, self.config.dim)

    @staticmethod
    def save(fit: Whitening | None) -> tuple[Scalars, Tensors]:
        return {}, {} if fit is None else {"kernel": fit.kernel, "bias": fit.bias}

    @staticmethod
    def load(scalars: Scalars, tensors: Tensors) -> Whitening | None:
        if "kernel" not in tensors:
            return None
        return Whitening(tensors["kernel"], tensors["bias"])
