"""The encoders the suites and the refinements score: a model by name or folder, or TF-IDF.

Kept apart from `suites` so that a stage which only loads an encoder (refine) does not depend
on every evaluator.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sentemb.config import section
from sentemb.data.readers import read_corpus
from sentemb.encoder import Encoder
from sentemb.evaluation.base import SentenceEncoder
from sentemb.evaluation.chinese import ChineseConfig
from sentemb.model_config import ModelConfig
from sentemb.tfidf import TfidfConfig, TfidfEncoder


def load_encoder(
    name: str, language: str, params: dict[str, Any], corpus: Path | None = None
) -> SentenceEncoder:
    """A neural encoder for a model name or folder, or the TF-IDF baseline for `tfidf`, its
    English IDF fitted on `corpus` (the corpus stage's file; without one, on the sentences it
    encodes).

    Chinese (`language="zh"`) uses the pooler of `eval.chinese`; a model that cannot be loaded
    is an error naming `eval.chinese.model` when that is set, else `model.name_or_path`.
    """
    if name == "tfidf":
        sentences = list(read_corpus(corpus)) if language == "en" and corpus else None
        return TfidfEncoder(language, section(params, "tfidf", TfidfConfig), sentences)
    model = section(params, "model", ModelConfig)
    pooler, pooler_param, param = model.pooler, "model.pooler", "model.name_or_path"
    if language == "zh":
        chinese = section(params, "eval.chinese", ChineseConfig)
        pooler, pooler_param = chinese.pooler, "eval.chinese.pooler"
        param = "eval.chinese.model" if chinese.model else param
    return Encoder.from_pretrained(
        name,
        pooler,
        model.max_length,
        model.trust_remote_code,
        model.precision,
        param,
        pooler_param,
    )


def model_names(params: dict[str, Any], model: str | None) -> tuple[str, str]:
    """The English and Chinese model names: `model` (default: `model.name_or_path`), and
    `eval.chinese.model` when it is set."""
    english = model or section(params, "model", ModelConfig).name_or_path
    return english, section(params, "eval.chinese", ChineseConfig).model or english
