"""The evaluation suites, each declared once, and the encoders they score.

`SUITES` is the one list of suites, in report order: what each is called (its params section is
`eval.<name>`, its metrics file `<name>.json`), its evaluator and config, the languages it reads,
whether it keeps each pair's scores (`predictions/<model>/<name>.npz`, compare's bootstrap) and
its report table. The evaluate stage, refinement, compare and the report read it; `dvc.yaml`
lists each suite's metrics file, and a test checks those outputs against `SUITES`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sentemb.config import section
from sentemb.encoder import Encoder, ModelConfig
from sentemb.evaluation.base import CHINESE, ENGLISH, Evaluator, SentenceEncoder
from sentemb.evaluation.chinese import ChineseConfig, ChineseEvaluator
from sentemb.evaluation.retrieval import RetrievalConfig, RetrievalEvaluator
from sentemb.evaluation.sts import STSConfig, STSEvaluator
from sentemb.evaluation.transfer import TransferConfig, TransferEvaluator
from sentemb.tfidf import TfidfConfig, TfidfEncoder


@dataclass(frozen=True)
class Suite:
    """One suite's declaration: `evaluator(root, batch_size, config)` scores it."""

    name: str
    evaluator: type[Evaluator]
    config: type
    languages: tuple[str, ...]  # the encoders it scores (ENGLISH, CHINESE)
    pairs: bool  # scored by Spearman over pairs: its evaluator keeps `pairs`
    title: str  # the report's heading
    columns: tuple[str, ...]  # the report's columns, metric keys

    @property
    def section(self) -> str:
        """Its params section."""
        return f"eval.{self.name}"

    def build(self, params: dict[str, Any], root: Path, batch_size: int) -> Evaluator:
        """The evaluator, configured by the params section `eval.<name>`."""
        return self.evaluator(root, batch_size, section(params, self.section, self.config))


SUITES: dict[str, Suite] = {
    suite.name: suite
    for suite in (
        Suite(
            "sts",
            STSEvaluator,
            STSConfig,
            (ENGLISH,),
            True,
            "STS (Spearman x 100 of cosine vs gold; STS12-16 pooled, the 'all' setting)",
            ("STS12", "STS13", "STS14", "STS15", "STS16", "STSBenchmark", "SICKRelatedness", "avg"),
        ),
        Suite(
            "transfer",
            TransferEvaluator,
            TransferConfig,
            (ENGLISH,),
            False,
            "Transfer (SentEval accuracy)",
            ("MR", "CR", "SUBJ", "MPQA", "SST2", "TREC", "MRPC", "avg"),
        ),
        Suite(
            "chinese",
            ChineseEvaluator,
            ChineseConfig,
            (CHINESE,),
            True,
            "Chinese STS (Spearman x 100)",
            ("ATEC", "BQ", "LCQMC", "PAWSX", "STS-B", "avg"),
        ),
        Suite(
            "retrieval",
            RetrievalEvaluator,
            RetrievalConfig,
            (ENGLISH, CHINESE),
            False,
            "Retrieval (MAP / MRR@10 x 100)",
            (
                "QQP/map",
                "QQP/mrr@10",
                "AskUbuntu/map",
                "AskUbuntu/mrr@10",
                "QQP-protocol/LCQMC/map",
                "QQP-protocol/BQ/map",
                "QQP-protocol/MRPC/map",
                "avg",
            ),
        ),
    )
}
PAIR_SUITES = tuple(name for name, suite in SUITES.items() if suite.pairs)


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
