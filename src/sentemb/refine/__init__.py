"""Training-free refinements of sentence embeddings (RepAL and, as its baseline, whitening): one
file each, registered by name with its params sub-section `refine.<name>`; here the fitting,
the saved state and the refined encoders they all share.

Every module of this package is imported here, so a new refinement file registers itself with
`register_refinement` (no list of refinements to keep by hand). The refine stage fits them per
scope: English (statistics from the first `refine.corpus_size` training sentences, or from the
sentences being scored with `refine.fit_on: eval`; hyper-parameters on STS-B dev) and each
Chinese set (on its valid split). Every refined encoder has the evaluators'
`encode(sentences, batch_size)`.

A saved refinement records the model it was fitted on (`ModelIdentity`: name, sha256 of the
weights, pooler, width) and is refused, naming both, around any other model.
"""

from __future__ import annotations

import dataclasses
import importlib
import itertools
import json
import logging
import pkgutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

import numpy as np

from sentemb.config import (
    EVAL_SUITES,
    ConfigError,
    Count,
    Range,
    Seed,
    UserError,
    from_dict,
    section,
)
from sentemb.data.readers import PairSet, read_chinese, read_stsb, training_corpus
from sentemb.encoder import ModelIdentity, model_identity
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
from sentemb.io import atomic_path
from sentemb.model_config import ModelConfig
from sentemb.phrases import IDF_FILE, IdfTable, read_idf, write_idf
from sentemb.refine.base import (
    REFINEMENTS,
    Context,
    Refinement,
    register_refinement,
)
from sentemb.refine.repal import bound_curve

for _module in pkgutil.iter_modules(__path__):
    importlib.import_module(f"{__name__}.{_module.name}")

FIT_ON = ("corpus", "eval")
STATE_FILE = "refinement.json"
TENSOR_FILE = "refinement.safetensors"
ENGLISH, CHINESE = "english", "chinese"  # the encoders a refinement is fitted around
ENGLISH_SCOPE = ENGLISH
CHINESE_SCOPE = f"{CHINESE}/"  # + the set's name: Chinese fits are per set
Fitted = dict[str, Any]  # one scope's fits: refinement name -> what it fitted

log = logging.getLogger(__name__)


class RefinementMismatch(UserError, ValueError):
    """A saved refinement does not belong to the model (or the sets) it is applied to."""


AtLeastTwo = Annotated[int, Range(2)]  # a fit needs two vectors


@dataclass
class SharedRefineConfig:
    """The keys of params section `refine` that every refinement shares."""

    methods: list[str] = field(default_factory=lambda: list(REFINEMENTS))
    fit_on: str = "corpus"  # v̂ and the whitening kernel: training corpus | evaluation sentences
    corpus_size: AtLeastTwo | None = 100_000  # first sentences of the corpus for `fit_on: corpus`
    suites: list[str] = field(default_factory=lambda: list(EVAL_SUITES))  # scored refined
    pairs: Count = 10_000  # random pairs for the mean-cosine diagnostic
    seed: Seed = 0
    valid_pairs: AtLeastTwo | None = None  # a fixed sample of each Chinese valid split

    def validate(self) -> list[str]:
        problems = []
        unknown = [name for name in self.methods if name not in REFINEMENTS]
        if unknown:
            problems.append(f"methods: unknown {unknown}; the refinements are {list(REFINEMENTS)}")
        if self.fit_on not in FIT_ON:
            problems.append(f"fit_on: {self.fit_on!r} is not one of {list(FIT_ON)}")
        if set(self.suites) - set(EVAL_SUITES):
            problems.append(f"suites: {self.suites} must be a subset of {list(EVAL_SUITES)}")
        return problems


# Params section `refine`: the shared keys, then one sub-section per registered refinement
# (`refine.repal`, `refine.whitening`), each read into the config class it registered.
RefineConfig = dataclasses.make_dataclass(
    "RefineConfig",
    [(name, config, field(default_factory=config)) for name, (_, config) in REFINEMENTS.items()],
    bases=(SharedRefineConfig,),
    namespace={"__module__": __name__, "__doc__": "Params section `refine`."},
)


def build(config: SharedRefineConfig, context: Context) -> dict[str, Refinement]:
    """Each of `config.methods`, with its sub-section of `config`, for encoders of `context`."""
    return {name: REFINEMENTS[name][0](getattr(config, name), context) for name in config.methods}


class PerSetEncoder:
    """A refined encoder per dataset (Chinese fits are per set); see `for_set`."""

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
) -> tuple[Fitted, dict[str, float], list[dict[str, float]]]:
    """Fit each refinement of `parts` on `fit_sentences` (None: on each call's sentences), then
    tune it on `dev`; returns the fits, the dev scores and random-pair cosines before and after
    (with what each fit reports), and every candidate tried. A `dev` with fewer than 2 distinct
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
    tried: list[dict[str, float]] = []
    for name, part in parts.items():
        fitted[name], values, candidates = part.tune(fitted[name], encoder, dev_score)
        metrics |= values
        tried += candidates
    for name, part in parts.items():
        refined = part.wrap(encoder, fitted[name])
        metrics[f"dev/{name}"] = dev_score(refined)
        vectors = refined.encode(sentences, batch_size)
        metrics[f"cosine/{name}"] = mean_random_cosine(vectors, config.pairs, config.seed)
    return fitted, metrics, tried


@dataclass
class FittedRefinements:
    """What the refine stage fits: per scope (English, `chinese/<set>`) the fits and metrics,
    the IDF table keywords were scored with, the models fitted on (by language) and RepAL's
    Fig. 2 curve on STS-B dev."""

    config: SharedRefineConfig
    fitted: dict[str, Fitted]
    metrics: dict[str, dict[str, float]]
    idf: IdfTable | None
    models: dict[str, ModelIdentity]
    curve: list[dict[str, float]]


def chinese_sets(params: dict) -> list[str]:
    """The Chinese sets scored anywhere: the Chinese suite's and retrieval's offline ones."""
    retrieval = section(params, "eval.retrieval", RetrievalConfig).offline_sets
    tasks = section(params, "eval.chinese", ChineseConfig).tasks
    return list(dict.fromkeys([*tasks, *(s for s in retrieval if s in CHINESE_PAIR_SETS)]))


def fit_refinements(
    params: dict, model: str, chinese_model: str, corpus_name: str, data: Path, phrases: Path
) -> FittedRefinements:
    """Fit `refine.methods` around `model` (English: statistics from the training corpus
    `corpus_name` or at each call, hyper-parameters on STS-B dev, keywords scored with the IDF
    table in `phrases`) and `chinese_model` (per Chinese set, on its valid split; with
    `fit_on: corpus` the statistics come from that split too). A Chinese set absent from `data`
    without the download manifest saying why, vectors that cannot be scored and a NaN or
    infinite fitted value are each one error."""
    config = section(params, "refine", RefineConfig)
    batch_size = section(params, "model", ModelConfig).batch_size
    keywords = any(REFINEMENTS[name][0].keywords for name in config.methods)
    idf = read_idf(phrases) if keywords else None
    fitted: dict[str, Fitted] = {}
    metrics: dict[str, dict[str, float]] = {}
    english_model = load_encoder(model, "en", params, data)
    english = CachedEncoder(english_model)
    parts = build(config, Context(english.mask_token, False, idf))
    corpus = None
    if config.fit_on == "corpus":
        lines = training_corpus(data, corpus_name)
        corpus = list(itertools.islice(lines, config.corpus_size))
    dev = read_stsb(data, "dev")
    with scoring(model):
        fitted[ENGLISH_SCOPE], metrics[ENGLISH_SCOPE], tried = fit_scope(
            english, dev, corpus, parts, config, batch_size
        )
    vectors = english.encode(list(distinct([*dev.first, *dev.second])), batch_size)
    repal = config.repal if "repal" in config.methods else None  # Fig. 2 is RepAL's
    curve = bound_curve(vectors, repal, tried, metrics[ENGLISH_SCOPE]["dev/none"])
    lowest = min(curve, key=lambda p: p["bound"])
    metrics[ENGLISH_SCOPE]["bound/argmin_lambda2"] = lowest["lambda2"]
    chinese_encoder = load_encoder(chinese_model, "zh", params, data)
    chinese = CachedEncoder(chinese_encoder)
    zh_parts = build(config, Context(chinese.mask_token, True, None))
    probe = ChineseEvaluator(data)
    for name in chinese_sets(params):
        if not probe.available(dataset_name(name), ".valid."):
            require_complete(probe, "chinese")
            log.warning("%s: no refinement fitted: %s", name, probe.skipped[dataset_name(name)])
            continue
        valid = read_chinese(data, name, "valid", config.valid_pairs)
        corpus = config.fit_on == "corpus"
        sentences = list(distinct([*valid.first, *valid.second])) if corpus else None
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
    return FittedRefinements(config, fitted, metrics, idf, models, curve)


def save_refinement(
    folder: Path,
    config: SharedRefineConfig,
    fitted: Mapping[str, Fitted],
    idf: IdfTable | None,
    models: Mapping[str, ModelIdentity],
) -> None:
    """Write the fits (JSON + safetensors, no pickle) in one atomic rename, with the identity
    of the encoder each language's fits were made on (`models`: english, chinese).
    """
    from safetensors.numpy import save_file

    scopes: dict[str, dict[str, float]] = {}
    tensors: dict[str, np.ndarray] = {}
    for scope, fits in fitted.items():
        scopes[scope] = {}
        for name, (cls, _) in REFINEMENTS.items():  # one order, whatever `refine.methods` says
            if name in fits:
                scalars, arrays = cls.save(fits[name])
                scopes[scope] |= scalars
                tensors |= {f"{scope}/{key}": value for key, value in arrays.items()}
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
) -> tuple[SharedRefineConfig, dict[str, Fitted], dict[str, float] | None]:
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
        scopes = dict(state["scopes"])
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
    fitted: dict[str, Fitted] = {}
    try:
        for scope, scalars in scopes.items():
            prefix = f"{scope}/"
            arrays = {k[len(prefix) :]: v for k, v in tensors.items() if k.startswith(prefix)}
            fitted[scope] = {n: REFINEMENTS[n][0].load(scalars, arrays) for n in config.methods}
    except (ValueError, TypeError, KeyError) as err:
        raise ConfigError(f"{damaged}: {type(err).__name__}: {err}") from err
    idf = read_idf(folder) if (folder / IDF_FILE).is_file() else None
    return config, fitted, idf


def refinements(
    config: SharedRefineConfig,
    fitted: Mapping[str, Fitted],
    idf: IdfTable | None,
    encoder: SentenceEncoder,
    mask_token: str | None,
    chinese: bool,
) -> dict[str, SentenceEncoder]:
    """Each of `config.methods` around `encoder`, from the fits of English or the Chinese sets."""
    encoders: dict[str, SentenceEncoder] = {}
    for name, part in build(config, Context(mask_token, chinese, idf)).items():
        if chinese:
            encoders[name] = PerSetEncoder(
                {
                    scope.removeprefix(CHINESE_SCOPE): part.wrap(encoder, fits[name])
                    for scope, fits in fitted.items()
                    if scope.startswith(CHINESE_SCOPE)
                }
            )
        elif ENGLISH_SCOPE in fitted:
            encoders[name] = part.wrap(encoder, fitted[ENGLISH_SCOPE][name])
    return encoders


__all__ = [
    "CHINESE",
    "CHINESE_SCOPE",
    "ENGLISH",
    "ENGLISH_SCOPE",
    "REFINEMENTS",
    "Context",
    "Fitted",
    "FittedRefinements",
    "PerSetEncoder",
    "RefineConfig",
    "Refinement",
    "RefinementMismatch",
    "build",
    "fit_refinements",
    "fit_scope",
    "load_refinement",
    "refinements",
    "register_refinement",
    "save_refinement",
]
