"""RepAL ("Representation Alchemy", ../shared/papers/repal_representation-alchemy.txt).

RepAL subtracts two redundant embeddings from the encoder's vector f(x):

- sentence level (§3.2.1, eq. 1): x* is x with its keywords replaced by the mask token (the
  "tri-mask": only the trivial words are left), v* = f(x*);
- corpus level (§3.2.2, eq. 2): v̂ is the mean embedding of a set of sentences;
- refinement (eq. 3): v' = f(x) - λ1 v* - λ2 v̂, with λ2 searched first on a dev set (λ1 = 0),
  then λ1 with λ2 fixed (§4.6).

Ambiguities and how they are read here:
- Keywords are TF-IDF over a general corpus: the IDF table the phrases stage fitted on the
  training corpus for English, jieba's TF-IDF for Chinese (§4.3); each masked word becomes one
  mask token, punctuation is kept.
- The key-mask of Table 4 (eq. 8) masks the trivial words instead and takes f(x with only its
  keywords) as the sentence's vector: it has no v*, so only λ2 is searched.
- Eq. 5's eigenvalue bound is computed as printed in the paper (Fig. 2 plots it against λ2).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from sentemb.config import ConfigError, Count, NonNegative
from sentemb.evaluation.base import SentenceEncoder, distinct
from sentemb.phrases import IdfTable, KeywordScorer, nltk_stopwords
from sentemb.refine.base import Context, Curve, Refinement, Scalars, Tensors
from sentemb.registry import register_refinement
from sentemb.tfidf import WORD_PATTERN, quiet_jieba

LEVELS = ("sentence", "corpus")
MASKS = ("tri", "key")
LAMBDA1_GRID = [round(0.05 * i, 2) for i in range(21)]  # 0, 0.05, ..., 1
LAMBDA2_GRID = [round(0.1 * i, 1) for i in range(31)]  # 0, 0.1, ..., 3


@dataclass
class RepALConfig:
    """Params section `refine.repal`."""

    mask: str = "tri"  # tri (eq. 1-3) | key (eq. 8, Table 4)
    levels: list[str] = field(default_factory=lambda: list(LEVELS))  # Table 4: each alone or both
    keywords: Count = 20  # TF-IDF keywords masked per sentence (jieba's extract_tags default)
    lambda1: list[NonNegative] = field(default_factory=lambda: list(LAMBDA1_GRID))
    lambda2: list[NonNegative] = field(default_factory=lambda: list(LAMBDA2_GRID))

    def validate(self) -> list[str]:
        problems = []
        if self.mask not in MASKS:
            problems.append(f"mask: {self.mask!r} is not one of {list(MASKS)}")
        if not self.levels or set(self.levels) - set(LEVELS):
            problems.append(f"levels: {self.levels} must be a non-empty subset of {list(LEVELS)}")
        for name in ("lambda1", "lambda2"):
            if not getattr(self, name):
                problems.append(f"{name}: the grid is empty")
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


def bound_curve(
    vectors: np.ndarray,
    config: RepALConfig | None,
    tried: list[Scalars],
    dev_none: float,
) -> list[Scalars]:
    """Fig. 2: eq. 5's bound on the dev `vectors` and the dev score at each λ2 of the search
    (`tried`); with no corpus-level search (`config` None: RepAL not run), at λ2 = 0 alone,
    where the dev score is the unrefined one (`dev_none`)."""
    lambdas = config.lambda2 if config is not None and "corpus" in config.levels else [0.0]
    dev_at = {t["lambda2"]: t["dev"] for t in tried if t["lambda1"] == 0.0}
    bounds = eigenvalue_bounds(vectors, lambdas)
    return [
        {"lambda2": lam, "bound": bound, "dev": dev_at.get(lam, dev_none)}
        for lam, bound in zip(lambdas, bounds, strict=True)
    ]


def search_lambdas(
    score: Callable[[float, float], float],
    lambda1_grid: Sequence[float],
    lambda2_grid: Sequence[float],
    levels: Sequence[str] = LEVELS,
) -> tuple[float, float, list[Scalars]]:
    """§4.6: the λ2 of best dev `score(0, λ2)`, then the λ1 of best `score(λ1, λ2)`.

    A level that is off keeps its λ at 0. Ties go to the value first in the grid; a NaN score
    (a dev set of one gold score) ranks last. Returns both λs and every (λ1, λ2, score) tried, in
    order.
    """
    tried: list[Scalars] = []

    def best(candidates: list[tuple[float, float]]) -> tuple[float, float]:
        scored = [(score(l1, l2), l1, l2) for l1, l2 in candidates]
        tried.extend({"lambda1": l1, "lambda2": l2, "dev": s} for s, l1, l2 in scored)
        _, l1, l2 = max(scored, key=lambda t: -math.inf if math.isnan(t[0]) else t[0])
        return l1, l2

    lambda2 = best([(0.0, l2) for l2 in lambda2_grid])[1] if "corpus" in levels else 0.0
    lambda1 = best([(l1, lambda2) for l1 in lambda1_grid])[0] if "sentence" in levels else 0.0
    return lambda1, lambda2, tried


class PartialMask:
    """RepAL's partial mask (eq. 1): replace a sentence's TF-IDF keywords by the mask token.

    `mask="tri"` masks the keywords (x* keeps the trivial words); `mask="key"` masks every other
    word (eq. 8). Each masked word becomes one mask token; punctuation is kept.
    """

    def __init__(
        self,
        mask_token: str,
        chinese: bool,
        idf: IdfTable | None,
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
            return "".join(
                self.mask_token
                if any(c.isalnum() for c in w) and (w in keywords) == masked_is_keyword
                else w
                for w in quiet_jieba().lcut(sentence)
            )

        def replace(match: re.Match[str]) -> str:
            word = match.group()
            return self.mask_token if (word.lower() in keywords) == masked_is_keyword else word

        return re.sub(WORD_PATTERN, replace, sentence)


class RepALEncoder:
    """Eq. 3 around `encoder`; `mean=None` fits v̂ on the sentences of each call (eq. 2).

    With the tri-mask and λ1 = 0, eq. 3's λ1 v* is 0, so x* is not encoded at all.
    """

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
            v_hat = self.encoder.encode(list(distinct(sentences)), batch_size).mean(axis=0)
        if self.partial_mask is None or (self.partial_mask.mask == "tri" and not self.lambda1):
            return refine(v, None, v_hat, self.lambda1, self.lambda2)
        masked = self.encoder.encode([self.partial_mask(s) for s in sentences], batch_size)
        if self.partial_mask.mask == "key":  # eq. 8: the key-masked sentence is the vector
            return refine(masked, None, v_hat, 0.0, self.lambda2)
        return refine(v, masked, v_hat, self.lambda1, self.lambda2)


@dataclass
class RepALFit:
    """RepAL's fit for one scope: the λs of eq. 3 and v̂ (None: fitted at each call, eq. 2)."""

    lambda1: float = 0.0
    lambda2: float = 0.0
    mean: np.ndarray | None = None


@register_refinement("repal", config=RepALConfig)
class RepAL(Refinement):
    """RepAL (eq. 1-3): v̂ from the fitting sentences, the λs searched on the dev set (§4.6)."""

    label = "RepAL"
    figures = ("refine_bound",)
    keywords = True
    config: RepALConfig

    def __init__(self, config: RepALConfig, context: Context) -> None:
        super().__init__(config, context)
        self.mask = partial_mask(config, context)

    def fit(self, vectors: np.ndarray | None) -> tuple[RepALFit, Scalars]:
        return RepALFit(mean=None if vectors is None else vectors.mean(axis=0)), {}

    def tune(
        self,
        fit: RepALFit,
        encoder: SentenceEncoder,
        dev_score: Callable[[SentenceEncoder], float],
    ) -> tuple[RepALFit, Scalars, list[Scalars]]:
        # λ1 weighs v* in eq. 3; the key-mask (eq. 8) has no v*, only λ2
        levels = [lv for lv in self.config.levels if lv == "corpus" or self.config.mask == "tri"]
        lambda1, lambda2, tried = search_lambdas(
            lambda l1, l2: dev_score(RepALEncoder(encoder, self.mask, l1, l2, fit.mean)),
            self.config.lambda1,
            self.config.lambda2,
            levels,
        )
        return RepALFit(lambda1, lambda2, fit.mean), {"lambda1": lambda1, "lambda2": lambda2}, tried

    def wrap(self, encoder: SentenceEncoder, fit: RepALFit) -> SentenceEncoder:
        return RepALEncoder(encoder, self.mask, fit.lambda1, fit.lambda2, fit.mean)

    @classmethod
    def curves(
        cls, config: RepALConfig | None, vectors: np.ndarray, tried: list[Scalars], dev_none: float
    ) -> tuple[Scalars, list[Curve]]:
        """Fig. 2 (`bound_curve`) and the λ2 of the lowest bound."""
        points = bound_curve(vectors, config, tried, dev_none)
        lowest = min(points, key=lambda p: p["bound"])
        curve = Curve(
            "refine_bound",
            "RepAL eq. 5 on STS-B dev",
            points,
            ("lambda2", "λ2 (corpus-level weight)"),
            ("bound", "eigenvalue bound (eq. 5)", "upper bound of largest eigenvalue"),
            ("dev", "STS-B dev (right axis)", "STS-B dev Spearman x 100"),
        )
        return {"bound/argmin_lambda2": lowest["lambda2"]}, [curve]

    @staticmethod
    def save(fit: RepALFit) -> tuple[Scalars, Tensors]:
        tensors = {} if fit.mean is None else {"mean": fit.mean}
        return {"lambda1": fit.lambda1, "lambda2": fit.lambda2}, tensors

    @staticmethod
    def load(scalars: Scalars, tensors: Tensors) -> RepALFit:
        return RepALFit(scalars["lambda1"], scalars["lambda2"], tensors.get("mean"))


def partial_mask(config: RepALConfig, context: Context) -> PartialMask | None:
    """RepAL's sentence-level masker, or None when that level is off."""
    if "sentence" not in config.levels:
        return None
    if context.mask_token is None:
        raise ConfigError(
            "refine.repal.levels: the sentence level masks keywords, and the model's tokenizer "
            "has no mask token; drop 'sentence' from the levels"
        )
    return PartialMask(
        context.mask_token, context.chinese, context.idf, config.keywords, config.mask
    )
