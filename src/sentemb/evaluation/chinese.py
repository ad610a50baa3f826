"""Chinese STS: Spearman between cosine similarity and label on ATEC, BQ, LCQMC, PAWSX, STS-B.

The protocol of the Chinese evaluations in this family (e.g. RepAL, Table 2): the test split of
each senteval_cn set, no training, labels 0/1 except STS-B (0-5).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from sentemb.config import PairSample, choice_problems
from sentemb.data.readers import PairSet, read_chinese
from sentemb.data.sources import CHINESE_SETS
from sentemb.evaluation.base import (
    CHINESE,
    Evaluator,
    SentenceEncoder,
    for_set,
    sentences_of,
    spearman,
)
from sentemb.evaluation.sts import cosine_scores
from sentemb.registry import register_suite


@dataclass
class ChineseConfig:
    """Params section `eval.chinese`; `model: null` means the main model; `max_pairs` scores a
    fixed sample of each test split (`read_chinese`), null = every pair."""

    model: str | None = None
    pooler: str = "auto"
    tasks: list[str] = field(default_factory=lambda: list(CHINESE_SETS))
    max_pairs: PairSample | None = None

    def validate(self) -> list[str]:
        problems = choice_problems("tasks", self.tasks, CHINESE_SETS)
        if self.model is not None and not self.model.strip():
            problems.append("model: an empty name; null means the main model")
        return problems


def dataset_name(task: str) -> str:
    """The `sources.DATASETS` key of a Chinese set (STS-B is shared with English by name)."""
    return "STS-B-zh" if task == "STS-B" else task


@register_suite("chinese", config=ChineseConfig, order=2)
class ChineseEvaluator(Evaluator):
    """Spearman x 100 per set (`split` = test, or valid for model selection) and their average.

    Each set is encoded on its own, so a refinement fitted per set (`for_set`) applies to it.
    """

    languages = (CHINESE,)
    pairs = True
    title = "Chinese STS (Spearman x 100)"
    columns = ("ATEC", "BQ", "LCQMC", "PAWSX", "STS-B", "avg")

    def __init__(
        self,
        root: Path,
        batch_size: int = 128,
        config: ChineseConfig | None = None,
        split: str = "test",
    ) -> None:
        super().__init__(root, batch_size)
        self.config = config or ChineseConfig()
        self.split = split

    def _pair_sets(self) -> dict[str, PairSet]:
        return {
            task: read_chinese(self.root, task, self.split, self.config.max_pairs)
            for task in self.config.tasks
            if self.available(dataset_name(task), f".{self.split}.")
        }

    def test_sentences(self) -> set[str]:
        return sentences_of(self._pair_sets().values())

    def score(self, encoders: Mapping[str, SentenceEncoder]) -> dict[str, float]:
        encoder = encoders[CHINESE]
        sets = self._pair_sets()
        self.pairs = {
            task: (
                cosine_scores(for_set(encoder, task), {task: pairs}, self.batch_size)[task],
                pairs.gold,
            )
            for task, pairs in sets.items()
        }
        metrics = {task: spearman(*scored) for task, scored in self.pairs.items()}
        if metrics:
            metrics["avg"] = float(np.mean(list(metrics.values())))
        return metrics
