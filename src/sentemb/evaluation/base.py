"""What every evaluator shares: the encoder protocol, cosine scoring and the skip record.

Evaluators return flat metric dicts (`{"STS12": 72.1, "STS12/MSRpar": 60.3, ...}`) and write no
files; stages write them. Those scored by Spearman over pairs also keep each pair's predicted and
gold score of their last call in `pairs` (compare's bootstrap resamples them). An encoder is
anything with `encode(sentences, batch_size)` returning a dense `np.ndarray` or a sparse matrix
(the TF-IDF baseline), one row per sentence.

Vectors that cannot be scored (non-finite, or one vector for every sentence) are an
`UnusableVectors` error where they are encoded, never NaN scores. A dataset absent from the root
is skipped with a reason when the download manifest explains it (the download stage could not
get it, or `data.datasets` left it out); a stage refuses every other absence
(`require_complete`).
"""

from __future__ import annotations

import contextlib
import json
import math
from abc import ABC, abstractmethod
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Protocol

import numpy as np
import scipy.sparse as sp
from scipy.stats import spearmanr
from sklearn.preprocessing import normalize

from sentemb.config import UserError
from sentemb.data.download import MANIFEST, DataUnavailable
from sentemb.data.sources import DATASETS

Embeddings = np.ndarray | sp.spmatrix | sp.sparray


class UnusableVectors(UserError, ValueError):
    """An encoder's vectors cannot be scored: non-finite, the same for every sentence, or giving
    a non-finite score."""


class SentenceEncoder(Protocol):
    def encode(self, sentences: Sequence[str], batch_size: int = ...) -> Embeddings: ...


class Evaluator(ABC):
    """One benchmark suite: reads its data under `root`, scores an encoder."""

    def __init__(self, root: Path, batch_size: int = 128) -> None:
        self.root, self.batch_size = Path(root), batch_size
        self.skipped: dict[str, str] = {}
        self.unexplained: dict[str, str] = {}  # skipped with no manifest saying why
        self.pairs: dict[str, tuple[np.ndarray, np.ndarray]] = {}

    @abstractmethod
    def __call__(self, encoder: SentenceEncoder) -> dict[str, float]: ...

    def available(self, dataset: str, split: str = "") -> bool:
        """Whether the files of `dataset` (those naming `split`, if given) are under the root.

        If not, the reason goes to `skipped`: the download manifest's when it lists the dataset
        as missing, or that `data.datasets` left it out when the manifest does not name it. With
        no manifest the absence is also `unexplained`. A dataset the manifest lists as
        downloaded whose file is gone is a `DataUnavailable` error (the root was changed).
        """
        paths = [f.path for f in DATASETS[dataset].files if split in Path(f.path).name]
        missing = [p for p in paths if not (self.root / p).is_file()]
        if not missing:
            return True
        absent = f"not found under {self.root}: {missing[0]}"
        manifest_file = self.root / MANIFEST
        if not manifest_file.is_file():
            self.skipped[dataset] = self.unexplained[dataset] = absent
            return False
        manifest = json.loads(manifest_file.read_text(encoding="utf-8"))
        if dataset in manifest.get("missing", {}):
            self.skipped[dataset] = manifest["missing"][dataset]
        elif dataset in manifest.get("datasets", {}):
            raise DataUnavailable(
                f"{self.root / missing[0]}: not found, though {manifest_file} lists {dataset} "
                f"as downloaded: {self.root} was changed after the download stage; run it again"
            )
        else:
            self.skipped[dataset] = f"{absent} (data.datasets leaves {dataset} out)"
        return False


def require_complete(
    evaluator: Evaluator, suite: str, metrics: Mapping[str, float] | None = None
) -> None:
    """A stage's rule for absent datasets: each must be explained by the download manifest and,
    given the `metrics` of a call, some task must have been scored; else `DataUnavailable`."""
    if evaluator.unexplained:
        dataset, reason = next(iter(evaluator.unexplained.items()))
        raise DataUnavailable(
            f"{dataset}: {reason}, and there is no {MANIFEST} there saying why: use the download "
            f"stage's output (--data data/raw), or leave {dataset} out of eval.{suite}"
        )
    if metrics is not None and not metrics:
        reasons = "; ".join(f"{name}: {why}" for name, why in evaluator.skipped.items())
        raise DataUnavailable(
            f"{suite}: no task could be scored under {evaluator.root}: {reasons or 'no task'}"
        )


def for_set(encoder: SentenceEncoder, dataset: str) -> SentenceEncoder:
    """The encoder for `dataset`: a refinement fitted per set (RepAL on Chinese) picks its own."""
    select = getattr(encoder, "for_set", None)
    return encoder if select is None else select(dataset)


def embed(
    encoder: SentenceEncoder, sentences: Sequence[str], batch_size: int
) -> tuple[Embeddings, dict[str, int]]:
    """Encode the unique sentences once; return the rows and each sentence's row index.

    Vectors that cannot be scored are an `UnusableVectors` error (`check_vectors`).
    """
    unique = list(dict.fromkeys(sentences))
    vectors = encoder.encode(unique, batch_size=batch_size)
    check_vectors(vectors)
    return vectors, {s: i for i, s in enumerate(unique)}


def check_vectors(vectors: Embeddings) -> None:
    """Refuse rows with a NaN or infinite entry, and 2+ rows that are all the same vector (every
    cosine 1, a Spearman of constant scores is undefined, a classifier sees one point)."""
    n = vectors.shape[0]
    if n == 0:
        return
    if sp.issparse(vectors):
        rows = sp.csr_matrix(vectors)
        bad = len(np.unique(rows.nonzero()[0][~np.isfinite(rows.data)]))
        same = n > 1 and (rows - sp.csr_matrix(np.ones((n, 1))) @ rows[0]).count_nonzero() == 0
    else:
        dense = np.asarray(vectors)
        bad = int(np.count_nonzero(~np.isfinite(dense).all(axis=1)))
        same = n > 1 and not np.ptp(dense, axis=0).any()
    if bad:
        raise UnusableVectors(
            f"the encoder gave non-finite vectors (NaN or inf) for {bad} of {n} sentences"
        )
    if same:
        raise UnusableVectors(
            f"the encoder gave the same vector for all {n} sentences: it cannot tell sentences "
            "apart, so no score would mean anything"
        )


@contextlib.contextmanager
def scoring(label: str) -> Iterator[None]:
    """Prefix an `UnusableVectors` raised inside with `label` (the model, and its refinement)."""
    try:
        yield
    except UnusableVectors as err:
        raise UnusableVectors(f"{label}: {err}") from err


def require_finite(label: str, values: Mapping[str, object]) -> None:
    """Refuse a NaN or infinite number anywhere in `values` (nested mappings and lists), naming
    `label` and the key: a score that is not a number is an error, never written."""

    def walk(key: str, value: object) -> None:
        if isinstance(value, Mapping):
            for name, item in value.items():
                walk(f"{key}/{name}" if key else str(name), item)
        elif isinstance(value, list | tuple):
            for i, item in enumerate(value):
                walk(f"{key}[{i}]", item)
        elif isinstance(value, float) and not math.isfinite(value):
            raise UnusableVectors(f"{label}: {key} is {value}, not a score")

    walk("", values)


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
