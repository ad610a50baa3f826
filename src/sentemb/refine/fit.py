"""Fitting the refinements of `refine.methods` per scope: English (statistics from the first
`refine.corpus_size` training sentences, or from the sentences being scored with
`refine.fit_on: eval`; hyper-parameters on STS-B dev) and each Chinese set (on its valid split).
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from sentemb.config import section
from sentemb.data.readers import PairSet, read_chinese, read_corpus, read_stsb
from sentemb.evaluation.base import (
    CachedEncoder,
    SentenceEncoder,
    UnusableVectors,
    check_vectors,
    distinct,
    require_complete,
    require_finite,
    rowwise_cosine,
    scoring,
    spearman,
)
from sentemb.evaluation.chinese import ChineseConfig, ChineseEvaluator, dataset_name
from sentemb.evaluation.encoders import load_encoder
from sentemb.evaluation.retrieval import CHINESE_PAIR_SETS, RetrievalConfig
from sentemb.evaluation.sts import cosine_scores
from sentemb.identity import ModelIdentity, model_identity
from sentemb.model_config import ModelConfig
from sentemb.phrases import IdfTable, read_idf
from sentemb.refine.base import (
    CHINESE,
    CHINESE_SCOPE,
    ENGLISH,
    ENGLISH_SCOPE,
    Context,
    Curve,
    Fitted,
    Refinement,
)
from sentemb.refine.config import RefineConfig, SharedRefineConfig
from sentemb.refine.wrap import build
from sentemb.registry import REFINEMENTS

log = logging.getLogger(__name__)


def mean_random_cosine(vectors: np.ndarray, pairs: int, seed: int) -> float:
    """Mean cosine similarity of `pairs` random pairs of distinct rows (anisotropy check)."""
    rng = np.random.default_rng(seed)
    n = len(vectors)
    first = rng.integers(n, size=pairs)
    second = (first + rng.integers(1, n, size=pairs)) % n
    return float(np.mean(rowwise_cosine(vectors[first], vectors[second])))


def fit_scope(
    encoder: SentenceEncoder,
    dev: PairSet,
    fit_sentences: Sequence[str] | None,
    parts: Mapping[str, Refinement],
    config: SharedRefineConfig,
    batch_size: int = 128,
) -> tuple[Fitted, dict[str, float], dict[str, list[dict[str, float]]]]:
    """Fit each refinement of `parts` on `fit_sentences` (None: on each call's sentences), then
    tune it on `dev`; returns the fits, the dev scores and random-pair cosines before and after
    (with what each fit reports), and every candidate each tried. A `dev` with fewer than 2 distinct
    sentences or gold scores (no Spearman to tune on) is an `UnusableVectors` error.
    """
    sentences = list(distinct([*dev.first, *dev.second]))
    if min(len(sentences), len(set(dev.gold))) < 2:
        raise UnusableVectors(
            f"the {len(dev)} tuning pairs have {len(sentences)} distinct sentences and "
            f"{len(set(dev.gold))} distinct gold scores: a Spearman to tune on needs 2 or more "
            "of each (refine.valid_pairs)"
        )
    vectors = None
    if fit_sentences is not None:
        vectors = encoder.encode(list(distinct(fit_sentences)), batch_size)
        check_vectors(vectors)
    fitted: Fitted = {}
    reported: dict[str, float] = {}
    for name, part in parts.items():
        fitted[name], values = part.fit(vectors)
        reported |= values

    def dev_score(scorer: SentenceEncoder) -> float:
        return spearman(cosine_scores(scorer, {"dev": dev}, batch_size)["dev"], dev.gold)

    metrics = {
        "dev/none": dev_score(encoder),
        "cosine/none": mean_random_cosine(
            encoder.encode(sentences, batch_size), config.pairs, config.seed
        ),
        **reported,
    }
    tried: dict[str, list[dict[str, float]]] = {}
    for name, part in parts.items():
        fitted[name], values, tried[name] = part.tune(fitted[name], encoder, dev_score)
        metrics |= values
    for name, part in parts.items():
        refined = part.wrap(encoder, fitted[name])
        metrics[f"dev/{name}"] = dev_score(refined)
        vectors = refined.encode(sentences, batch_size)
        metrics[f"cosine/{name}"] = mean_random_cosine(vectors, config.pairs, config.seed)
    return fitted, metrics, tried


@dataclass
class FittedRefinements:
    """What the refine stage fits: per scope (English, `chinese/<set>`) the fits and metrics,
    the IDF table keywords were scored with, the models fitted on (by language) and the
    refinements' curves on STS-B dev (`Refinement.curves`)."""

    config: SharedRefineConfig
    fitted: dict[str, Fitted]
    metrics: dict[str, dict[str, float]]
    idf: IdfTable | None
    models: dict[str, ModelIdentity]
    curves: list[Curve]


def chinese_sets(params: dict) -> list[str]:
    """The Chinese sets scored anywhere: the Chinese suite's and retrieval's offline ones."""
    retrieval = section(params, "eval.retrieval", RetrievalConfig).offline_sets
    tasks = section(params, "eval.chinese", ChineseConfig).tasks
    return list(dict.fromkeys([*tasks, *(s for s in retrieval if s in CHINESE_PAIR_SETS)]))


def fit_refinements(
    params: dict, model: str, chinese_model: str, corpus: Path, data: Path, phrases: Path
) -> FittedRefinements:
    """Fit `refine.methods` around `model` (English: statistics from the training `corpus`, the
    corpus stage's file, or at each call; hyper-parameters on STS-B dev; keywords scored with the
    IDF table in `phrases`) and `chinese_model` (per Chinese set, on its valid split; with
    `fit_on: corpus` the statistics come from that split too). A Chinese set absent from `data`
    without the download manifest saying why, vectors that cannot be scored and a NaN or
    infinite fitted value are each one error."""
    config = section(params, "refine", RefineConfig)
    batch_size = section(params, "model", ModelConfig).batch_size
    keywords = any(REFINEMENTS[name].cls.keywords for name in config.methods)
    idf = read_idf(phrases) if keywords else None
    fitted: dict[str, Fitted] = {}
    metrics: dict[str, dict[str, float]] = {}
    english_model = load_encoder(model, "en", params)
    english = CachedEncoder(english_model)
    parts = build(config, Context(english.mask_token, False, idf))
    sentences = None
    if config.fit_on == "corpus":
        sentences = list(itertools.islice(read_corpus(corpus), config.corpus_size))
    dev = read_stsb(data, "dev")
    with scoring(model):
        fitted[ENGLISH_SCOPE], metrics[ENGLISH_SCOPE], tried = fit_scope(
            english, dev, sentences, parts, config, batch_size
        )
    vectors = english.encode(list(distinct([*dev.first, *dev.second])), batch_size)
    curves: list[Curve] = []
    for name, entry in REFINEMENTS.items():  # drawn fitted or not: DVC expects every file
        fit = getattr(config, name) if name in config.methods else None
        dev_none = metrics[ENGLISH_SCOPE]["dev/none"]
        values, drawn = entry.cls.curves(fit, vectors, tried.get(name, []), dev_none)
        metrics[ENGLISH_SCOPE] |= values
        curves += drawn
    chinese_encoder = load_encoder(chinese_model, "zh", params)
    chinese = CachedEncoder(chinese_encoder)
    zh_parts = build(config, Context(chinese.mask_token, True, None))
    probe = ChineseEvaluator(data)
    for name in chinese_sets(params):
        if not probe.available(dataset_name(name), ".valid."):
            require_complete(probe, "chinese")
            log.warning("%s: no refinement fitted: %s", name, probe.skipped[dataset_name(name)])
            continue
        valid = read_chinese(data, name, "valid", config.valid_pairs)
        on_corpus = config.fit_on == "corpus"
        sentences = list(distinct([*valid.first, *valid.second])) if on_corpus else None
        with scoring(f"{chinese_model}, {name}"):
            scope = f"{CHINESE_SCOPE}{name}"
            fitted[scope], metrics[scope], _ = fit_scope(
                chinese, valid, sentences, zh_parts, config, batch_size
            )
    require_finite(", ".join(dict.fromkeys([model, chinese_model])), metrics)
    models = {
        ENGLISH: model_identity(model, english_model),
        CHINESE: model_identity(chinese_model, chinese_encoder),
    }
    return FittedRefinements(config, fitted, metrics, idf, models, curves)
