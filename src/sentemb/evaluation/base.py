"""What every evaluator shares: the encoder protocol, cosine scoring and the skip record.

Evaluators return flat metric dicts (`{"STS12": 72.1, "STS12/MSRpar": 60.3, ...}`) and write no
files; stages write them. Those scored by Spearman over pairs also keep each pair's predicted and
gold score of their last call in `pairs` (compare's bootstrap resamples them). An encoder is
anything with `encode(sentences, batch_size)` returning a dense `np.ndarray` or a sparse matrix
(the TF-IDF baseline), one row per sentence.
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

import numpy as np
import scipy.sparse as sp
from scipy.stats import spearmanr
from sklearn.preprocessing import normalize

from sentemb.data.sources import DATASETS

MANIFEST = "MANIFEST.json"
Embeddings = np.ndarray | sp.spmatrix | sp.sparray


class SentenceEncoder(Protocol):
    def encode(self, sentences: Sequence[str], batch_size: int = ...) -> Embeddings: ...


class Evaluator(ABC):
    """One benchmark suite: reads its data under `root`, scores an encoder."""

    primary_metric: str = "avg"

    def __init__(self, root: Path, batch_size: int = 128) -> None:
        self.root, self.batch_size = Path(root), batch_size
        self.skipped: dict[str, str] = {}
        self.pairs: dict[str, tuple[np.ndarray, np.ndarray]] = {}

    @abstractmethod
    def __call__(self, encoder: SentenceEncoder) -> dict[str, float]: ...

    def available(self, dataset: str, split: str = "") -> bool:
        """Whether the files of `dataset` (those naming `split`, if given) are under the root.

        If not, the reason (from the download manifest when there is one) goes to `skipped`.
        """
        paths = [f.path for f in DATASETS[dataset].files if split in Path(f.path).name]
        missing = [p for p in paths if not (self.root / p).is_file()]
        if not missing:
            return True
        manifest = self.root / MANIFEST
        reasons = json.loads(manifest.read_text()).get("missing", {}) if manifest.is_file() else {}
        self.skipped[dataset] = reasons.get(dataset, f"not found under {self.root}: {missing[0]}")
        return False


def for_set(encoder: SentenceEncoder, dataset: str) -> SentenceEncoder:
    """The encoder for `dataset`: a refinement fitted per set (RepAL on Chinese) picks its own."""
    select = getattr(encoder, "for_set", None)
    return encoder if select is None else select(dataset)


def embed(
    encoder: SentenceEncoder, sentences: Sequence[str], batch_size: int
) -> tuple[Embeddings, dict[str, int]]:
    """Encode the unique sentences once; return the rows and each sentence's row index."""
    unique = list(dict.fromkeys(sentences))
    return encoder.encode(unique, batch_size=batch_size), {s: i for i, s in enumerate(unique)}


def rowwise_cosine(a: Embeddings, b: Embeddings) -> np.ndarray:
    """Cosine similarity of each row of `a` with the same row of `b` (dense or sparse)."""
    a, b = normalize(a), normalize(b)
    if sp.issparse(a):
        return np.asarray(a.multiply(b).sum(axis=1)).ravel()
    return np.einsum("ij,ij->i", a, b)


def pair_features(u: Embeddings, v: Embeddings) -> Embeddings:
    """SentEval's pair features `[u, v, |u - v|, u * v]` (dense or sparse)."""
    if sp.issparse(u):
        return sp.hstack([u, v, abs(u - v), u.multiply(v)]).tocsr()
    return np.hstack([u, v, np.abs(u - v), u * v])


def spearman(predicted: np.ndarray, gold: np.ndarray) -> float:
    """Spearman's rank correlation x 100."""
    return float(spearmanr(predicted, gold).statistic) * 100.0
