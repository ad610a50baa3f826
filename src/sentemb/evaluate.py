"""Score one model on every suite asked for, plain and refined, encoding each sentence once
(above both `evaluation` and `refine`, which it joins).

The model's encoders (one per language its suites read; the English one serves Chinese too when
`eval.chinese` names the same model and pooler) are each wrapped in one `CachedEncoder` that
every suite and every refinement shares, so a sentence the suites have in common (LCQMC in the
Chinese suite and in retrieval, MRPC in transfer and retrieval) is encoded once per model.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from sentemb.config import ConfigError, section
from sentemb.evaluation.base import (
    CHINESE,
    ENGLISH,
    LANGUAGES,
    SKIPPED,
    CachedEncoder,
    Evaluator,
    SentenceEncoder,
    require_complete,
    require_finite,
    scoring,
)
from sentemb.evaluation.chinese import ChineseConfig
from sentemb.evaluation.encoders import load_encoder, model_names
from sentemb.identity import model_identity
from sentemb.model_config import ModelConfig
from sentemb.refine.store import load_refinement
from sentemb.refine.wrap import refinements
from sentemb.registry import SUITES

log = logging.getLogger(__name__)


def keeping_pairs(names: Iterable[str] = SUITES) -> list[str]:
    """The suites of `names` that keep each pair's scores (those scored over pairs)."""
    return [name for name in names if SUITES[name].cls.pairs]


def build_evaluator(name: str, params: dict[str, Any], root: Path, batch_size: int) -> Evaluator:
    """Suite `name`'s evaluator, configured by its params section `eval.<name>`."""
    suite = SUITES[name]
    return suite.cls(root, batch_size, section(params, f"eval.{name}", suite.config))


@dataclass
class SuiteResult:
    """One suite's metrics file (plain scores, `skipped`, one entry per refinement), its pairs'
    predicted and gold scores (pair suites), its items' scores (`Evaluator.per_item`), its
    library's own result files, plain and refined (`Evaluator.files`: MTEB's), and its wall
    time (the first suite's includes the model's loading)."""

    metrics: dict[str, Any]
    pairs: dict[str, tuple[np.ndarray, np.ndarray]]
    per_item: dict[str, np.ndarray]
    files: dict[str, bytes]
    seconds: float


def load_encoders(
    params: dict[str, Any], model: str | None, languages: Collection[str], corpus: Path | None
) -> tuple[dict[str, CachedEncoder], dict[str, str]]:
    """A cached encoder per language of `languages` and the model name behind each (`corpus`:
    the TF-IDF baseline's, `load_encoder`)."""
    english, chinese = model_names(params, model)
    names = {ENGLISH: english, CHINESE: chinese}
    shared = (
        english == chinese != "tfidf"
        and section(params, "eval.chinese", ChineseConfig).pooler
        == section(params, "model", ModelConfig).pooler
    )
    encoders: dict[str, CachedEncoder] = {}
    for language in (lang for lang in LANGUAGES if lang in languages):
        if language == CHINESE and shared and ENGLISH in encoders:
            encoders[CHINESE] = encoders[ENGLISH]
        else:
            code = "zh" if language == CHINESE else "en"
            encoder = load_encoder(names[language], code, params, corpus)
            encoders[language] = CachedEncoder(encoder)
    return encoders, {language: names[language] for language in encoders}


def evaluate_model(
    suites: Sequence[str],
    params: dict[str, Any],
    data: Path,
    model: str | None = None,
    refined: Path | None = None,
    corpus: Path | None = None,
) -> dict[str, SuiteResult]:
    """Each of `suites` scored on `model` (default: `model.name_or_path`; `tfidf`: the TF-IDF
    baseline, its English IDF fitted on `corpus`) and, with `refined` (a refine stage output),
    after each refinement fitted there for the suites of `refine.suites`.

    Vectors that cannot be scored, a NaN score, a suite with no task scored, an absence the
    download manifest does not explain and a refinement of another model are each an error.
    """
    started = time.perf_counter()
    if refined is not None and "tfidf" in model_names(params, model):
        raise ConfigError("--refined: the TF-IDF baseline is never refined (no mask token)")
    batch_size = section(params, "model", ModelConfig).batch_size
    evaluators = {name: build_evaluator(name, params, data, batch_size) for name in suites}
    for evaluator in evaluators.values():  # before a model loads (it may set the Hub offline)
        evaluator.prepare()
    languages = {lang for name in suites for lang in SUITES[name].cls.languages}
    encoders, names = load_encoders(params, model, languages, corpus)
    refined_encoders: dict[str, dict[str, SentenceEncoder]] = {}
    methods: list[str] = []  # the refinements, scored on the suites of `refine.suites`
    refined_suites: list[str] = []
    if refined is not None:
        identities = {lang: model_identity(names[lang], e.encoder) for lang, e in encoders.items()}
        config, fitted, idf = load_refinement(refined, identities)
        refined_encoders = {
            lang: refinements(config, fitted, idf, encoder, encoder.mask_token, lang == CHINESE)
            for lang, encoder in encoders.items()
        }
        methods, refined_suites = config.methods, config.suites
    results: dict[str, SuiteResult] = {}
    for name, evaluator in evaluators.items():
        suite = SUITES[name]
        label = ", ".join(dict.fromkeys(names[lang] for lang in suite.cls.languages))
        with scoring(label):
            metrics = evaluator({lang: encoders[lang] for lang in suite.cls.languages})
        require_complete(evaluator, name, metrics)
        require_finite(f"{label}, suite {name}", metrics)
        pairs, per_item, files = dict(evaluator.pairs), dict(evaluator.per_item), evaluator.files
        result: dict[str, Any] = dict(metrics)
        for dataset, reason in evaluator.skipped.items():
            log.warning("%s: skipped: %s", dataset, reason)
        if evaluator.skipped:
            result[SKIPPED] = evaluator.skipped
        for method in methods if name in refined_suites else []:
            with scoring(f"{label} + {method}"):
                result[method] = evaluator(
                    {lang: refined_encoders[lang][method] for lang in suite.cls.languages},
                    method,
                )
            require_finite(f"{label} + {method}, suite {name}", result[method])
            files = files | evaluator.files
        seconds = time.perf_counter() - started
        results[name] = SuiteResult(result, pairs, per_item, files, seconds)
        started = time.perf_counter()
        log.info(
            "%s: %s",
            name,
            {k: round(float(metrics[k]), 2) for k in suite.cls.report_columns(metrics)},
        )
    return results
