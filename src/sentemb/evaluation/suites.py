"""The evaluation suites, each declared once, and the encoders they score.

`SUITES` is the one list of suites, in report order: what each is called (its params section is
`eval.<name>`, its metrics file `<name>.json`), its evaluator and config, the languages it reads,
whether it keeps each pair's scores (`predictions/<model>/<name>.npz`, compare's bootstrap) and
its report table. The evaluate stage, compare and the report read it; `dvc.yaml` lists each
suite's metrics file, and a test checks those outputs against `SUITES`. The encoders they score
are loaded by `sentemb.evaluation.encoders`.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sentemb.config import section
from sentemb.evaluation.base import CHINESE, ENGLISH, Evaluator
from sentemb.evaluation.chinese import ChineseConfig, ChineseEvaluator
from sentemb.evaluation.retrieval import RetrievalConfig, RetrievalEvaluator
from sentemb.evaluation.sts import STSConfig, STSEvaluator
from sentemb.evaluation.transfer import TransferConfig, TransferEvaluator


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


def keeping_pairs(names: Iterable[str] = SUITES) -> list[str]:
    """The suites of `names` that keep each pair's scores (those scored over pairs)."""
    return [name for name in names if SUITES[name].pairs]
