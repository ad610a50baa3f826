"""What every evaluator shares: the encoder protocol, cosine scoring and the skip record.

Evaluators return flat metric dicts (`{"STS12": 72.1, "STS12/MSRpar": 60.3, ...}`) and write no
files; stages write them. Those scored by Spearman over pairs also keep each pair's predicted and
gold score of their last call in `pairs`, those scored as a mean over items (a query's MAP) each
item's headline score in `per_item` (compare's bootstrap resamples them). An encoder is
anything with `encode(sentences, batch_size)` returning a dense `np.ndarray` or a sparse matrix
(the TF-IDF baseline), one row per sentence.

Vectors that cannot be scored (non-finite, or one vector for every sentence) are an
`UnusableVectors` error where they are encoded, never NaN scores; a model (`Encoder`) is first
probed on a handful of the sentences (`probe`), so such a model is refused in a second, not
after it encoded them all, and the error names what the model shows that would explain it.

A dataset absent from the root is skipped with a reason when the download manifest explains it
(the download stage could not get it, or `data.datasets` left it out); a stage refuses every
other absence (`require_complete`).
"""

from __future__ import annotations

import contextlib
import json
import math
from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar, Protocol, runtime_checkable

import numpy as np
import scipy.sparse as sp
from scipy.stats import spearmanr
from sklearn.preprocessing import normalize

from sentemb.clock import SECONDS
from sentemb.config import UserError
from sentemb.data.download import MANIFEST, DataUnavailable
from sentemb.data.readers import PairSet
from sentemb.data.sources import DATASETS
from sentemb.io import flatten

Embeddings = np.ndarray | sp.spmatrix | sp.sparray
ENGLISH, CHINESE = "english", "chinese"  # the languages an evaluator scores
SKIPPED = "skipped"  # a metrics file's key: the datasets left out, with why
ITEMS = "items"  # `<set>/items`: a predictions file's per-item scores (`per_item`)
PROBE_SIZE = 8  # sentences a model is probed on before it encodes more (`probe`)
LANGUAGES = (ENGLISH, CHINESE)
PLAIN = "plain"  # the variant of an encoder scored without a refinement
SCORED_BY = "scored_by"  # a metrics file's key: the metric behind each task's score (MTEB's)
# The keys a metrics file holds beside its scores, no task's or set's name: its wall time, the
# datasets skipped, what scored each task and each refinement's scores (spelled here, so that
# training, which reads eval.own for train.selection, does not depend on the refinements' code; a
# test checks the registry's names). avg: every other suite's average.
RESERVED = (SECONDS, SKIPPED, SCORED_BY, "avg", "repal", "whitening")


class UnusableVectors(UserError, ValueError):
    """An encoder's vectors cannot be scored: non-finite, the same for every sentence, or giving
    a non-finite score."""


@runtime_checkable
class Model(Protocol):
    """What `sentemb.encoder.Encoder` has beyond `encode` (kept structural, so that evaluation
    imports no torch): inputs that differ, and what would explain unusable vectors."""

    def distinct_inputs(self, sentences: Sequence[str], count: int) -> list[str]: ...

    def suspects(self, non_finite: bool) -> list[str]: ...


class SentenceEncoder(Protocol):
    def encode(self, sentences: Sequence[str], batch_size: int = ...) -> Embeddings: ...


class Evaluator(ABC):
    """One benchmark suite: reads its data under `root`, scores encoders keyed by language.

    Every evaluator is called the same way: `evaluator(encoders)` with `encoders` mapping
    `ENGLISH` and `CHINESE` to the encoder of that language's sentences, or one encoder for
    every language. Subclasses implement `score`, which picks the languages it needs.

    A suite is an evaluator registered with `sentemb.registry.register_suite(name, config,
    order)`: its params section is `eval.<name>`, its metrics file `<name>.json`, and `order`
    its place in the reports; it declares the rest as class attributes.
    """

    name: ClassVar[str]
    languages: ClassVar[tuple[str, ...]]  # the encoders it scores (ENGLISH, CHINESE)
    pairs: ClassVar[bool]  # scored by Spearman over pairs: keeps `pairs` (compare's bootstrap)
    title: ClassVar[str]  # the report's heading
    columns: ClassVar[tuple[str, ...]]  # the report's columns, metric keys
    config: Any  # its params section `eval.<name>`

    def __init__(self, root: Path, batch_size: int = 128) -> None:
        self.root, self.batch_size = Path(root), batch_size
        self.skipped: dict[str, str] = {}
        self.unexplained: dict[str, str] = {}  # skipped with no manifest saying why
        self.pairs: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        self.per_item: dict[str, np.ndarray] = {}  # `<set>/items`: its headline's per item
        self.files: dict[str, bytes] = {}  # a library's own result files of the last call
        self.variant = PLAIN

    @classmethod
    def asks_for_tasks(cls, config: Any) -> bool:
        """Whether its params section `config` asks for any task: a stage refuses a suite that
        scored none, unless it asked none (whose metrics file a revision before it lacks)."""
        return True

    @classmethod
    def report_columns(cls, values: Mapping[str, Any]) -> list[str]:
        """The report's columns that a metrics dict of this suite (plain, or a refinement's)
        holds, in the report's order."""
        return [c for c in cls.columns if c in values]

    def __call__(
        self, encoders: SentenceEncoder | Mapping[str, SentenceEncoder], variant: str = PLAIN
    ) -> dict[str, float]:
        """The metrics of `encoders`; `variant` names what they are (`PLAIN`, or the refinement
        applied) where a suite's own files record it (`files`)."""
        if not isinstance(encoders, Mapping):
            encoders = dict.fromkeys(LANGUAGES, encoders)
        self.variant = variant
        return self.score(encoders)

    @classmethod
    def notes(cls, values: Mapping[str, Any]) -> list[str]:
        """What the report must say beside a metrics file's scores (`values`): how a task was
        scored where that is not what its column suggests (default: nothing)."""
        return []

    def prepare(self) -> None:  # noqa: B027 (a hook most suites need not fill)
        """Load and check what scoring reads that may be missing, before any model is loaded
        or sentence encoded (a stage calls it for every suite first; default: nothing)."""

    @abstractmethod
    def score(self, encoders: Mapping[str, SentenceEncoder]) -> dict[str, float]:
        """Flat metrics of the encoders (`ENGLISH`, `CHINESE`: the languages this suite reads)."""

    @abstractmethod
    def test_sentences(self) -> set[str]:
        """Every sentence a model is scored on (the corpus card counts a training corpus's)."""

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


def sentences_of(sets: Iterable[PairSet]) -> set[str]:
    """Every sentence of the pairs of `sets` (an evaluator's `test_sentences`)."""
    return {s for pairs in sets for s in (*pairs.first, *pairs.second)}


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
    if metrics is not None and not metrics and evaluator.asks_for_tasks(evaluator.config):
        reasons = "; ".join(f"{name}: {why}" for name, why in evaluator.skipped.items())
        raise DataUnavailable(
            f"{suite}: no task could be scored under {evaluator.root}: {reasons or 'no task'}"
        )


def for_set(encoder: SentenceEncoder, dataset: str) -> SentenceEncoder:
    """The encoder for `dataset`: a refinement fitted per set (RepAL on Chinese) picks its own."""
    select = getattr(encoder, "for_set", None)
    return encoder if select is None else select(dataset)


class CachedEncoder:
    """The one encode path: `encoder`'s vector of each distinct sentence, encoded once for the
    life of this object, and every call's vectors checked (`check_vectors`).

    Wrap an encoder whose vector of a sentence depends on that sentence alone (a model, or a
    refinement with fitted statistics) for no longer than its weights stay as they are: the
    evaluate stage keeps one per model for plain and refined scoring, the refine stage one
    through its λ search. `embed` wraps any other encoder anew on each call, so training's dev
    evaluation never reuses a vector across weight updates. Sparse rows (the TF-IDF baseline)
    are never cached: without a corpus TF-IDF fits its IDF on each call's sentences, so a row
    depends on the call, and it has no forward pass worth saving; each call encodes its
    distinct sentences once.

    The first call with more than `PROBE_SIZE` new sentences `probe`s a model before encoding
    them; the probe's vectors are dropped, so the sentences are batched as without it.
    """

    def __init__(self, encoder: SentenceEncoder) -> None:
        self.encoder = encoder
        self.cache: dict[str, np.ndarray] = {}
        self.sparse = False  # set by the first call whose rows are sparse
        self.probed = False

    @property
    def mask_token(self) -> str | None:
        """The mask token of the wrapped encoder's tokenizer (None without one; RepAL's)."""
        return getattr(getattr(self.encoder, "tokenizer", None), "mask_token", None)

    def encode(self, sentences: Sequence[str], batch_size: int = 128) -> Embeddings:
        """One row per sentence, in order; an `UnusableVectors` error if they cannot be scored."""
        row = distinct(sentences)
        unique = list(row)
        if not unique:
            return self.encoder.encode([], batch_size)
        new = unique if self.sparse else [s for s in unique if s not in self.cache]
        if len(new) > PROBE_SIZE and not self.probed:
            self.probed = True
            probe(self.encoder, new, batch_size)
        rows = self.encoder.encode(new, batch_size) if new else None
        if sp.issparse(rows):  # the cache was empty or bypassed, so `new` is `unique`
            self.sparse = True
        else:
            if rows is not None:
                self.cache.update(zip(new, np.asarray(rows), strict=True))
            rows = np.stack([self.cache[s] for s in unique])
        check_vectors(rows, self.encoder)
        if len(unique) == len(sentences):
            return rows
        return rows[[row[s] for s in sentences]]


def distinct(sentences: Iterable[str]) -> dict[str, int]:
    """Each distinct sentence, in first-seen order, mapped to its row among them."""
    return {s: i for i, s in enumerate(dict.fromkeys(sentences))}


def embed(
    encoder: SentenceEncoder, sentences: Sequence[str], batch_size: int
) -> tuple[Embeddings, dict[str, int]]:
    """The rows of the distinct sentences, checked, and each sentence's row index: through
    `encoder`'s cache when it is a `CachedEncoder`, else through one for this call alone."""
    row = distinct(sentences)
    cached = encoder if isinstance(encoder, CachedEncoder) else CachedEncoder(encoder)
    return cached.encode(list(row), batch_size), row


def probe(encoder: SentenceEncoder, sentences: Sequence[str], batch_size: int) -> None:
    """Check a model's vectors of the first `PROBE_SIZE` of `sentences` whose tokens differ
    (`check_vectors`) before it encodes them all: one small batch, not minutes of encoding.

    Only a model (`Encoder`) is probed: a refinement or TF-IDF may fit on each call's sentences,
    so a few would not stand for all. The probe's vectors are dropped, so the caller's encoding
    batches as without it.
    """
    if not isinstance(encoder, Model):
        return
    chosen = encoder.distinct_inputs(sentences, PROBE_SIZE)
    if len(chosen) > 1:
        vectors = encoder.encode(chosen, batch_size, show_progress=False)
        check_vectors(vectors, encoder, probed_for=len(sentences))


def check_vectors(
    vectors: Embeddings, encoder: SentenceEncoder | None = None, probed_for: int | None = None
) -> None:
    """Refuse rows with a NaN or infinite entry, and 2+ rows that are all the same vector (every
    cosine 1, a Spearman of constant scores is undefined, a classifier sees one point). Given
    the model (`Encoder`) that gave them, the error adds what it shows that would explain it
    (`Encoder.suspects`); `probed_for`: the rows are a probe before that many sentences."""
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
    if not bad and not same:
        return
    sentences = f"{n} sentences"
    if probed_for is not None:
        sentences += f" of a probe (their tokens differ), before encoding the {probed_for} asked"
    if bad:
        problem = f"non-finite vectors (NaN or inf) for {bad} of {sentences}"
    else:
        problem = (
            f"the same vector for all {sentences}: it cannot tell sentences apart, so no score "
            "would mean anything"
        )
    causes = encoder.suspects(bool(bad)) if isinstance(encoder, Model) else []
    if causes:
        problem += f"; likely cause{'s' if len(causes) > 1 else ''}: {'; '.join(causes)}"
    raise UnusableVectors(f"the encoder gave {problem}")


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

    for key, value in flatten(values, lists=True).items():
        if isinstance(value, float) and not math.isfinite(value):
            raise UnusableVectors(f"{label}: {key} is {value}, not a score")


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
