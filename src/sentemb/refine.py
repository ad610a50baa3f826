"""Training-free refinements of sentence embeddings: RepAL and, as its baseline, whitening.

RepAL ("Representation Alchemy", ../shared/papers/repal_representation-alchemy.txt) subtracts
two redundant embeddings from the encoder's vector f(x):

- sentence level (§3.2.1, eq. 1): x* is x with its keywords replaced by the mask token (the
  "tri-mask": only the trivial words are left), v* = f(x*);
- corpus level (§3.2.2, eq. 2): v̂ is the mean embedding of a set of sentences;
- refinement (eq. 3): v' = f(x) - λ1 v* - λ2 v̂, with λ2 searched first on a dev set (λ1 = 0),
  then λ1 with λ2 fixed (§4.6).

Keywords are TF-IDF over a general corpus: the IDF table the phrases stage fitted on the training
corpus for English, jieba's TF-IDF for Chinese (§4.3). The key-mask of Table 4 (eq. 8) masks the
trivial words instead and takes f(x with only its keywords) as the sentence's vector.

Whitening (Su et al., 2021, "Whitening sentence representations for better semantics and faster
retrieval", eq. 5-8): x̃ = (x - μ) W with W = U Λ^(-1/2) from the SVD of the covariance
Σ = U Λ U^T, optionally keeping the first k columns of W.

Every refined encoder has the evaluators' `encode(sentences, batch_size)`; where a statistic is
"fitted on the evaluation sentences" (`refine.fit_on: eval`) it is fitted on the sentences of each
`encode` call.

A saved refinement records the model it was fitted on (`ModelIdentity`: name, sha256 of the
weights, pooler, width) and is refused, naming both, around any other model.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from sentemb.config import ConfigError, UserError, from_dict
from sentemb.data.readers import PairSet
from sentemb.encoder import ModelIdentity
from sentemb.evaluation.base import SentenceEncoder, check_vectors, rowwise_cosine, spearman
from sentemb.evaluation.sts import cosine_scores
from sentemb.io import atomic_path
from sentemb.phrases import IDF_FILE, KeywordScorer, nltk_stopwords, read_idf, write_idf
from sentemb.tfidf import WORD_PATTERN

REFINEMENTS = ("repal", "whitening")
LEVELS = ("sentence", "corpus")
MASKS = ("tri", "key")
FIT_ON = ("corpus", "eval")
SUITES = ("sts", "transfer", "chinese", "retrieval")
LAMBDA1_GRID = [round(0.05 * i, 2) for i in range(21)]  # 0, 0.05, ..., 1
LAMBDA2_GRID = [round(0.1 * i, 1) for i in range(31)]  # 0, 0.1, ..., 3
RANK_TOLERANCE = 1e-10  # whitening: variances below this share of the largest count as zero
STATE_FILE = "refinement.json"
TENSOR_FILE = "refinement.safetensors"
ENGLISH, CHINESE = "english", "chinese"  # the encoders a refinement is fitted around
ENGLISH_SCOPE = ENGLISH
CHINESE_SCOPE = f"{CHINESE}/"  # + the set's name: Chinese fits are per set


class RefinementMismatch(UserError, ValueError):
    """A saved refinement does not belong to the model (or the sets) it is applied to."""


@dataclass
class RepALConfig:
    """Params section `refine.repal`."""

    mask: str = "tri"  # tri (eq. 1-3) | key (eq. 8, Table 4)
    levels: list[str] = field(default_factory=lambda: list(LEVELS))  # Table 4: each alone or both
    keywords: int = 20  # TF-IDF keywords masked per sentence (jieba's extract_tags default)
    lambda1: list[float] = field(default_factory=lambda: list(LAMBDA1_GRID))
    lambda2: list[float] = field(default_factory=lambda: list(LAMBDA2_GRID))

    def validate(self) -> list[str]:
        problems = []
        if self.mask not in MASKS:
            problems.append(f"mask: {self.mask!r} is not one of {list(MASKS)}")
        if not self.levels or set(self.levels) - set(LEVELS):
            problems.append(f"levels: {self.levels} must be a non-empty subset of {list(LEVELS)}")
        if self.keywords < 1:
            problems.append(f"keywords: must be >= 1, got {self.keywords}")
        for name in ("lambda1", "lambda2"):
            if not getattr(self, name):
                problems.append(f"{name}: the grid is empty")
        return problems


@dataclass
class WhiteningConfig:
    """Params section `refine.whitening`."""

    dim: int | None = None  # keep the first k whitened dimensions (Su et al. §3); null = all

    def validate(self) -> list[str]:
        if self.dim is not None and self.dim < 1:
            return [f"dim: must be >= 1, got {self.dim}"]
        return []


@dataclass
class RefineConfig:
    """Params section `refine`."""

    methods: list[str] = field(default_factory=lambda: list(REFINEMENTS))
    fit_on: str = "corpus"  # v̂ and the whitening kernel: training corpus | evaluation sentences
    corpus_size: int | None = 100_000  # first sentences of the corpus used by `fit_on: corpus`
    suites: list[str] = field(default_factory=lambda: list(SUITES))  # scored with refinement
    pairs: int = 10_000  # random pairs for the mean-cosine diagnostic
    seed: int = 0
    repal: RepALConfig = field(default_factory=RepALConfig)
    whitening: WhiteningConfig = field(default_factory=WhiteningConfig)

    def validate(self) -> list[str]:
        problems = []
        if set(self.methods) - set(REFINEMENTS):
            problems.append(f"methods: {self.methods} must be a subset of {list(REFINEMENTS)}")
        if self.fit_on not in FIT_ON:
            problems.append(f"fit_on: {self.fit_on!r} is not one of {list(FIT_ON)}")
        if self.corpus_size is not None and self.corpus_size < 2:
            problems.append(f"corpus_size: must be >= 2, got {self.corpus_size}")
        if set(self.suites) - set(SUITES):
            problems.append(f"suites: {self.suites} must be a subset of {list(SUITES)}")
        if self.pairs < 1:
            problems.append(f"pairs: must be >= 1, got {self.pairs}")
        return problems


def refine(
    v: np.ndarray,
    v_star: np.ndarray | None,
    v_hat: np.ndarray | None,
    lambda1: float,
    lambda2: float,
) -> np.ndarray:
    """RepAL's embedding refinement, eq. 3: v' = v - λ1 v* - λ2 v̂ (a missing term is 0)."""
    out = np.asarray(v, dtype=np.float64)
    if v_star is not None and lambda1:
        out = out - lambda1 * v_star
    if v_hat is not None and lambda2:
        out = out - lambda2 * v_hat
    return out.astype(np.float32)


def eigenvalue_bounds(embeddings: np.ndarray, lambdas: Sequence[float]) -> list[float]:
    """Eq. 5 for each λ: the upper bound of the largest eigenvalue of W* = E* E*^T, E* = E - λ Ê.

    Ê repeats the row mean m of E (eq. 4); with n rows, a = max and b = min of W*'s entries, the
    bound is (n b + sqrt(b² + (n² - 1) a²)) / 2 (Ostrowski, 1960; Zhan, 2005), as printed in the
    paper. W* = E E^T - λ (u 1^T + 1 u^T) + λ² m·m with u = E m, so E E^T is formed once.
    """
    e = np.asarray(embeddings, dtype=np.float64)
    n, mean = len(e), e.mean(axis=0)
    gram, u = e @ e.T, e @ mean
    cross = u[:, None] + u[None, :]
    bounds = []
    for lam in lambdas:
        w = gram - lam * cross + lam**2 * float(mean @ mean)
        a, b = float(w.max()), float(w.min())
        bounds.append(0.5 * (n * b + float(np.sqrt(b**2 + (n**2 - 1) * a**2))))
    return bounds


def search_lambdas(
    score: Callable[[float, float], float],
    lambda1_grid: Sequence[float],
    lambda2_grid: Sequence[float],
    levels: Sequence[str] = LEVELS,
) -> tuple[float, float, list[dict[str, float]]]:
    """§4.6: the λ2 of best dev `score(0, λ2)`, then the λ1 of best `score(λ1, λ2)`.

    A level that is off keeps its λ at 0. Ties go to the value first in the grid. Returns both
    λs and every (λ1, λ2, score) tried, in order.
    """
    tried: list[dict[str, float]] = []

    def best(candidates: list[tuple[float, float]]) -> tuple[float, float]:
        scored = [(score(l1, l2), l1, l2) for l1, l2 in candidates]
        tried.extend({"lambda1": l1, "lambda2": l2, "dev": s} for s, l1, l2 in scored)
        top = max(s for s, _, _ in scored)
        return next((l1, l2) for s, l1, l2 in scored if s == top)

    lambda2 = best([(0.0, l2) for l2 in lambda2_grid])[1] if "corpus" in levels else 0.0
    lambda1 = best([(l1, lambda2) for l1 in lambda1_grid])[0] if "sentence" in levels else 0.0
    return lambda1, lambda2, tried


@dataclass
class Whitening:
    """Su et al. (2021): `transform(x) = (x - bias) @ kernel`."""

    kernel: np.ndarray
    bias: np.ndarray

    @classmethod
    def fit(cls, vectors: np.ndarray, dim: int | None = None) -> Whitening:
        """μ and W = U Λ^(-1/2) (first `dim` columns) from the rows of `vectors` (eq. 5-8).

        Directions of (numerically) zero variance cannot be scaled to unit variance; they are
        dropped, so the kernel has at most rank(Σ) columns.
        """
        x = np.asarray(vectors, dtype=np.float64)
        mu = x.mean(axis=0)
        u, s, _ = np.linalg.svd(np.cov(x - mu, rowvar=False, bias=True))
        rank = int(np.sum(s > RANK_TOLERANCE * s[0])) if s[0] > 0 else 0
        if rank == 0:
            raise ConfigError(
                f"refine.whitening: the {len(x)} fitting vectors are all equal; fit it on more "
                "(and more varied) sentences (refine.fit_on)"
            )
        kernel = u[:, :rank] / np.sqrt(s[:rank])
        return cls(kernel[:, :dim], mu)

    def transform(self, vectors: np.ndarray) -> np.ndarray:
        return ((np.asarray(vectors, dtype=np.float64) - self.bias) @ self.kernel).astype(
            np.float32
        )


class PartialMask:
    """RepAL's partial mask (eq. 1): replace a sentence's TF-IDF keywords by the mask token.

    `mask="tri"` masks the keywords (x* keeps the trivial words); `mask="key"` masks every other
    word (eq. 8). Each masked word becomes one mask token; punctuation is kept.
    """

    def __init__(
        self,
        mask_token: str,
        chinese: bool,
        idf: dict[str, float] | None,
        keywords: int = 20,
        mask: str = "tri",
    ) -> None:
        stopwords = frozenset() if chinese else frozenset(nltk_stopwords("english"))
        self.scorer = KeywordScorer(chinese, idf, stopwords)
        self.mask_token, self.chinese, self.top_k, self.mask = mask_token, chinese, keywords, mask
        self.cache: dict[str, str] = {}

    def keywords(self, sentence: str) -> set[str]:
        return {word for word, _ in self.scorer(sentence, self.top_k)}

    def __call__(self, sentence: str) -> str:
        if sentence not in self.cache:
            self.cache[sentence] = self._mask(sentence)
        return self.cache[sentence]

    def _mask(self, sentence: str) -> str:
        keywords = self.keywords(sentence)
        masked_is_keyword = self.mask == "tri"
        if self.chinese:
            import jieba

            return "".join(
                self.mask_token
                if any(c.isalnum() for c in w) and (w in keywords) == masked_is_keyword
                else w
                for w in jieba.lcut(sentence)
            )

        def replace(match: re.Match[str]) -> str:
            word = match.group()
            return self.mask_token if (word.lower() in keywords) == masked_is_keyword else word

        return re.sub(WORD_PATTERN, replace, sentence)


def unique(sentences: Sequence[str]) -> list[str]:
    return list(dict.fromkeys(sentences))


class CachedEncoder:
    """Encodes each distinct sentence once across calls (plain and refined scoring share it)."""

    def __init__(self, encoder: SentenceEncoder) -> None:
        self.encoder = encoder
        self.cache: dict[str, np.ndarray] = {}

    def encode(self, sentences: Sequence[str], batch_size: int = 128) -> np.ndarray:
        new = [s for s in unique(sentences) if s not in self.cache]
        if not sentences:
            return np.asarray(self.encoder.encode([], batch_size))
        if new:
            vectors = np.asarray(self.encoder.encode(new, batch_size))
            self.cache.update(zip(new, vectors, strict=True))
        return np.stack([self.cache[s] for s in sentences])

    @property
    def mask_token(self) -> str | None:
        """The mask token of the wrapped encoder's tokenizer (None without one)."""
        return getattr(getattr(self.encoder, "tokenizer", None), "mask_token", None)


class RepALEncoder:
    """Eq. 3 around `encoder`; `mean=None` fits v̂ on the sentences of each call (eq. 2)."""

    def __init__(
        self,
        encoder: SentenceEncoder,
        mask: PartialMask | None,
        lambda1: float,
        lambda2: float,
        mean: np.ndarray | None,
    ) -> None:
        self.encoder, self.partial_mask = encoder, mask
        self.lambda1, self.lambda2, self.mean = lambda1, lambda2, mean

    def encode(self, sentences: Sequence[str], batch_size: int = 128) -> np.ndarray:
        v = self.encoder.encode(sentences, batch_size)
        v_hat = self.mean
        if v_hat is None:
            v_hat = self.encoder.encode(unique(sentences), batch_size).mean(axis=0)
        if self.partial_mask is None:
            return refine(v, None, v_hat, self.lambda1, self.lambda2)
        masked = self.encoder.encode([self.partial_mask(s) for s in sentences], batch_size)
        if self.partial_mask.mask == "key":  # eq. 8: the key-masked sentence is the vector
            return refine(masked, None, v_hat, 0.0, self.lambda2)
        return refine(v, masked, v_hat, self.lambda1, self.lambda2)


class WhitenedEncoder:
    """Whitening around `encoder`; `whitening=None` fits it on the sentences of each call."""

    def __init__(
        self, encoder: SentenceEncoder, whitening: Whitening | None, dim: int | None = None
    ) -> None:
        self.encoder, self.whitening, self.dim = encoder, whitening, dim

    def encode(self, sentences: Sequence[str], batch_size: int = 128) -> np.ndarray:
        whitening = self.whitening
        if whitening is None:
            whitening = Whitening.fit(self.encoder.encode(unique(sentences), batch_size), self.dim)
        return whitening.transform(self.encoder.encode(sentences, batch_size))


class PerSetEncoder:
    """A refined encoder per dataset (Chinese λs are searched per set); see `for_set`."""

    def __init__(self, encoders: Mapping[str, SentenceEncoder]) -> None:
        self.encoders = dict(encoders)

    def for_set(self, name: str) -> SentenceEncoder:
        if name not in self.encoders:
            raise RefinementMismatch(
                f"no refinement was fitted for the Chinese set {name} (fitted: "
                f"{sorted(self.encoders)}); re-run the refine stage with the same "
                "eval.chinese.tasks and eval.retrieval.offline_sets"
            )
        return self.encoders[name]

    def encode(self, sentences: Sequence[str], batch_size: int = 128) -> np.ndarray:
        raise TypeError("a per-set refinement encodes through for_set(dataset)")


@dataclass
class Fitted:
    """What the refine stage fits for one scope (English, or one Chinese set)."""

    lambda1: float = 0.0
    lambda2: float = 0.0
    mean: np.ndarray | None = None  # v̂; None = fitted on the evaluation sentences
    whitening: Whitening | None = None  # None = fitted on the evaluation sentences


def mean_random_cosine(vectors: np.ndarray, pairs: int, seed: int) -> float:
    """Mean cosine similarity of `pairs` random pairs of distinct rows (anisotropy check)."""
    rng = np.random.default_rng(seed)
    n = len(vectors)
    first = rng.integers(n, size=pairs)
    second = (first + rng.integers(1, n, size=pairs)) % n
    return float(np.mean(rowwise_cosine(vectors[first], vectors[second])))


def build(
    name: str,
    encoder: SentenceEncoder,
    fitted: Fitted,
    config: RefineConfig,
    mask: PartialMask | None,
) -> SentenceEncoder:
    """The refined encoder `name` ("repal" or "whitening") for one scope."""
    if name == "whitening":
        return WhitenedEncoder(encoder, fitted.whitening, config.whitening.dim)
    return RepALEncoder(encoder, mask, fitted.lambda1, fitted.lambda2, fitted.mean)


def fit_scope(
    encoder: SentenceEncoder,
    dev: PairSet,
    fit_sentences: Sequence[str] | None,
    mask: PartialMask | None,
    config: RefineConfig,
    batch_size: int = 128,
) -> tuple[Fitted, dict[str, float], list[dict[str, float]]]:
    """Fit v̂ and whitening on `fit_sentences` (None: on each call's sentences) and search the
    λs on `dev`; returns the fit, dev scores and random-pair cosines, and every λ pair tried.
    """
    fitted = Fitted()
    if fit_sentences is not None:
        fit_vectors = encoder.encode(unique(fit_sentences), batch_size)
        check_vectors(fit_vectors)
        fitted.mean = fit_vectors.mean(axis=0)
        if "whitening" in config.methods:
            fitted.whitening = Whitening.fit(fit_vectors, config.whitening.dim)

    def dev_score(scorer: SentenceEncoder) -> float:
        return spearman(cosine_scores(scorer, {"dev": dev}, batch_size)["dev"], dev.gold)

    sentences = unique([*dev.first, *dev.second])
    metrics = {
        "dev/none": dev_score(encoder),
        "cosine/none": mean_random_cosine(
            encoder.encode(sentences, batch_size), config.pairs, config.seed
        ),
    }
    if fitted.whitening is not None:
        metrics["whitening/dims"] = fitted.whitening.kernel.shape[1]
    tried: list[dict[str, float]] = []
    if "repal" in config.methods:
        repal = config.repal
        # λ1 weighs v* in eq. 3; the key-mask (eq. 8) has no v*, only λ2
        levels = [lv for lv in repal.levels if lv == "corpus" or repal.mask == "tri"]
        fitted.lambda1, fitted.lambda2, tried = search_lambdas(
            lambda l1, l2: dev_score(RepALEncoder(encoder, mask, l1, l2, fitted.mean)),
            repal.lambda1,
            repal.lambda2,
            levels,
        )
        metrics |= {"lambda1": fitted.lambda1, "lambda2": fitted.lambda2}
    for name in config.methods:
        refined = build(name, encoder, fitted, config, mask)
        metrics[f"dev/{name}"] = dev_score(refined)
        vectors = refined.encode(sentences, batch_size)
        metrics[f"cosine/{name}"] = mean_random_cosine(vectors, config.pairs, config.seed)
    return fitted, metrics, tried


def save_refinement(
    folder: Path,
    config: RefineConfig,
    fitted: Mapping[str, Fitted],
    idf: dict[str, float] | None,
    models: Mapping[str, ModelIdentity],
) -> None:
    """Write the fitted refinements (JSON + safetensors, no pickle) in one atomic rename, with
    the identity of the encoder each language's fits were made on (`models`: english, chinese).
    """
    from safetensors.numpy import save_file

    scopes, tensors = {}, {}
    for scope, fit in fitted.items():
        scopes[scope] = {"lambda1": fit.lambda1, "lambda2": fit.lambda2}
        if fit.mean is not None:
            tensors[f"{scope}/mean"] = fit.mean
        if fit.whitening is not None:
            tensors[f"{scope}/kernel"] = fit.whitening.kernel
            tensors[f"{scope}/bias"] = fit.whitening.bias
    with atomic_path(folder, folder=True) as tmp:
        tmp.mkdir()
        state = {
            "config": dataclasses.asdict(config),
            "models": {language: dataclasses.asdict(m) for language, m in models.items()},
            "scopes": scopes,
        }
        (tmp / STATE_FILE).write_text(json.dumps(state, indent=1) + "\n", encoding="utf-8")
        save_file({k: np.ascontiguousarray(v) for k, v in tensors.items()}, tmp / TENSOR_FILE)
        if idf is not None:
            write_idf(tmp, idf)


def load_refinement(
    folder: Path, models: Mapping[str, ModelIdentity]
) -> tuple[RefineConfig, dict[str, Fitted], dict[str, float] | None]:
    """Read what `save_refinement` wrote, for the encoders `models` (by language) it will refine.

    The config is checked like a params section. A refinement fitted on another model (other
    weights, pooler or width) than one of `models`, or recording none, is `RefinementMismatch`;
    tensors whose width is not the recorded model's are refused as damaged.
    """
    from safetensors.numpy import load_file

    damaged = f"{folder}: not a refinement written by the refine stage"
    try:
        state = json.loads((folder / STATE_FILE).read_text(encoding="utf-8"))
        tensors = load_file(folder / TENSOR_FILE)
        recorded = {k: ModelIdentity(**v) for k, v in state.get("models", {}).items()}
        scopes = {scope: (v["lambda1"], v["lambda2"]) for scope, v in state["scopes"].items()}
        config_values = state["config"]
    except (OSError, ValueError, TypeError, KeyError) as err:
        raise ConfigError(f"{damaged}: {type(err).__name__}: {err}") from err
    config = from_dict(RefineConfig, config_values, f"{folder / STATE_FILE}: config")
    for language, given in models.items():
        if language not in recorded:
            raise RefinementMismatch(
                f"{folder}: records no model its {language} fits were made on (written before "
                "refinements recorded one); re-run the refine stage"
            )
        if not recorded[language].same_vectors(given):
            raise RefinementMismatch(
                f"{folder}: its {language} refinement was fitted on {recorded[language]}, not "
                f"on {given}; re-run the refine stage with --model {given.model}"
            )
    for key, tensor in tensors.items():
        model = recorded.get(key.split("/")[0])
        if model is not None and tensor.shape[:1] != (model.dim,):
            raise ConfigError(
                f"{damaged}: {key} has shape {tensor.shape}, but the model it records gives "
                f"{model.dim}-dim vectors; re-run the refine stage"
            )
    fitted = {}
    for scope, (lambda1, lambda2) in scopes.items():
        whitening = None
        if f"{scope}/kernel" in tensors:
            whitening = Whitening(tensors[f"{scope}/kernel"], tensors[f"{scope}/bias"])
        fitted[scope] = Fitted(lambda1, lambda2, tensors.get(f"{scope}/mean"), whitening)
    idf = read_idf(folder) if (folder / IDF_FILE).is_file() else None
    return config, fitted, idf


def refinements(
    config: RefineConfig,
    fitted: Mapping[str, Fitted],
    idf: dict[str, float] | None,
    encoder: SentenceEncoder,
    mask_token: str | None,
    chinese: bool,
) -> dict[str, SentenceEncoder]:
    """Each of `config.methods` around `encoder`, from the fits of English or the Chinese sets."""
    mask = partial_mask(config, mask_token, chinese, idf)
    encoders: dict[str, SentenceEncoder] = {}
    for name in config.methods:
        if chinese:
            per_set = {
                scope.removeprefix(CHINESE_SCOPE): build(name, encoder, fit, config, mask)
                for scope, fit in fitted.items()
                if scope.startswith(CHINESE_SCOPE)
            }
            encoders[name] = PerSetEncoder(per_set)
        elif ENGLISH_SCOPE in fitted:
            encoders[name] = build(name, encoder, fitted[ENGLISH_SCOPE], config, mask)
    return encoders


def partial_mask(
    config: RefineConfig, mask_token: str | None, chinese: bool, idf: dict[str, float] | None
) -> PartialMask | None:
    """RepAL's sentence-level masker, or None when that level is off or RepAL is not run."""
    if "repal" not in config.methods or "sentence" not in config.repal.levels:
        return None
    if mask_token is None:
        raise ConfigError(
            "refine.repal.levels: the sentence level masks keywords, and the model's tokenizer "
            "has no mask token; drop 'sentence' from the levels"
        )
    return PartialMask(mask_token, chinese, idf, config.repal.keywords, config.repal.mask)
