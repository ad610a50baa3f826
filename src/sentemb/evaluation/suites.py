"""One evaluator per suite and the encoder it scores, each made from the params file."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sentemb.config import section
from sentemb.encoder import Encoder, ModelConfig
from sentemb.evaluation.base import Evaluator, SentenceEncoder
from sentemb.evaluation.chinese import ChineseConfig, ChineseEvaluator
from sentemb.evaluation.retrieval import RetrievalConfig, RetrievalEvaluator
from sentemb.evaluation.sts import STSConfig, STSEvaluator
from sentemb.evaluation.transfer import TransferConfig, TransferEvaluator
from sentemb.tfidf import TfidfConfig, TfidfEncoder

SUITES = ("sts", "transfer", "chinese", "retrieval")
PAIR_SUITES = ("sts", "chinese")  # scored by Spearman over pairs: their evaluators keep `pairs`


def build_evaluator(suite: str, params: dict[str, Any], root: Path, batch_size: int) -> Evaluator:
    """The evaluator of `suite`, configured by the params section `eval.<suite>`."""
    configs = {
        "sts": (STSEvaluator, STSConfig),
        "transfer": (TransferEvaluator, TransferConfig),
        "chinese": (ChineseEvaluator, ChineseConfig),
        "retrieval": (RetrievalEvaluator, RetrievalConfig),
    }
    evaluator_cls, config_cls = configs[suite]
    return evaluator_cls(root, batch_size, section(params, f"eval.{suite}", config_cls))


def load_encoder(name: str, language: str, params: dict[str, Any], data: Path) -> SentenceEncoder:
    """A neural encoder for a model name or folder, or the TF-IDF baseline for `tfidf`.

    Chinese (`language="zh"`) uses the pooler of `eval.chinese`; a model that cannot be loaded
    is an error naming `eval.chinese.model` when that is set, else `model.name_or_path`.
    """
    if name == "tfidf":
        corpus_file = data / "corpus" / "train.txt"
        corpus = None
        if language == "en" and corpus_file.is_file():
            corpus = corpus_file.read_text(encoding="utf-8").splitlines()
        return TfidfEncoder(language, section(params, "tfidf", TfidfConfig), corpus)
    model = section(params, "model", ModelConfig)
    pooler, param = model.pooler, "model.name_or_path"
    if language == "zh":
        chinese = section(params, "eval.chinese", ChineseConfig)
        pooler, param = chinese.pooler, "eval.chinese.model" if chinese.model else param
    return Encoder.from_pretrained(
        name, pooler, model.max_length, model.trust_remote_code, model.precision, param
    )


def model_names(params: dict[str, Any], model: str | None) -> tuple[str, str]:
    """The English and Chinese model names: `model` (default: `model.name_or_path`), and
    `eval.chinese.model` when it is set."""
    english = model or section(params, "model", ModelConfig).name_or_path
    return english, section(params, "eval.chinese", ChineseConfig).model or english
