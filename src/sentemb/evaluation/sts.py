"""Semantic textual similarity: STS12-16, STS-B and SICK-R, Spearman of cosine vs gold x 100.

STS12-16 follow SimCSE's "all" setting (Gao et al., 2021, App. B): the pairs of all subsets of a
year are pooled and one Spearman is computed; the per-subset scores with their plain (`mean`) and
pair-weighted (`wmean`) averages, as SentEval reports them, are kept beside it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from sentemb.config import choice_problems
from sentemb.data.readers import PairSet, read_sick, read_sts_year, read_stsb
from sentemb.data.sources import STS_SUBSETS
from sentemb.evaluation.base import (
    ENGLISH,
    Evaluator,
    SentenceEncoder,
    embed,
    rowwise_cosine,
    sentences_of,
    spearman,
)
from sentemb.registry import register_suite

STS_TASKS = (*STS_SUBSETS, "STSBenchmark", "SICKRelatedness")
DEV_TASKS = ("STSBenchmark", "SICKRelatedness")
# each dev task's dataset, reader, and split (part of a file name) of its test and dev sets
_DEV_SETS = {
    "STSBenchmark": ("STSBenchmark", read_stsb, {"test": "test", "dev": "dev"}),
    "SICKRelatedness": ("SICK", read_sick, {"test": "test_annotated", "dev": "trial"}),
}


@dataclass
class STSConfig:
    """Params section `eval.sts`."""

    tasks: list[str] = field(default_factory=lambda: list(STS_TASKS))

    def validate(self) -> list[str]:
        return choice_problems("tasks", self.tasks, STS_TASKS)


def cosine_scores(
    encoder: SentenceEncoder, pair_sets: dict[str, PairSet], batch_size: int
) -> dict[str, np.ndarray]:
    """Cosine similarity of every pair of every set, from one encode pass over all sentences."""
    if not pair_sets:
        return {}  # nothing to encode (a TF-IDF fit on no sentence has no vocabulary)
    sentences = [s for pairs in pair_sets.values() for s in (*pairs.first, *pairs.second)]
    vectors, row = embed(encoder, sentences, batch_size)
    return {
        name: rowwise_cosine(
            vectors[[row[s] for s in pairs.first]], vectors[[row[s] for s in pairs.second]]
        )
        for name, pairs in pair_sets.items()
    }


@register_suite("sts", config=STSConfig, order=0)
class STSEvaluator(Evaluator):
    """Unsupervised STS: no training, cosine similarity against gold scores.

    `split="test"` gives the test sets of `config.tasks`; `split="dev"` gives STS-B dev and SICK
    trial where `config.tasks` has their tasks, the model-selection sets (SimCSE selects on STS-B
    dev; DCLR on STS-B dev + SICK trial).
    """

    languages = (ENGLISH,)
    pairs = True
    title = "STS (Spearman x 100 of cosine vs gold; STS12-16 pooled, the 'all' setting)"
    columns = (*STS_TASKS, "avg")

    def __init__(
        self,
        root: Path,
        batch_size: int = 128,
        config: STSConfig | None = None,
        split: str = "test",
    ) -> None:
        super().__init__(root, batch_size)
        self.config = config or STSConfig()
        self.split = split

    def _pair_sets(self) -> dict[str, PairSet]:
        tasks = [t for t in self.config.tasks if self.split == "test" or t in DEV_TASKS]
        sets: dict[str, PairSet] = {}
        for task in tasks:
            if task in STS_SUBSETS:
                if self.available(task):
                    year = read_sts_year(self.root, task)
                    sets.update({f"{task}/{k}": v for k, v in year.items()})
                continue
            dataset, reader, splits = _DEV_SETS[task]
            if self.available(dataset, splits[self.split]):
                sets[task] = reader(self.root, splits[self.split])
        return sets

    def test_sentences(self) -> set[str]:
        return sentences_of(self._pair_sets().values())

    def score(self, encoders: Mapping[str, SentenceEncoder]) -> dict[str, float]:
        sets = self._pair_sets()
        scores = cosine_scores(encoders[ENGLISH], sets, self.batch_size)
        self.pairs = {name: (scores[name], pairs.gold) for name, pairs in sets.items()}
        metrics: dict[str, float] = {}
        for year in (t for t in STS_SUBSETS if f"{t}/{STS_SUBSETS[t][0]}" in sets):
            names = [f"{year}/{subset}" for subset in STS_SUBSETS[year]]
            per_subset = {n: spearman(scores[n], sets[n].gold) for n in names}
            sizes = np.array([len(sets[n]) for n in names], dtype=np.float64)
            pooled = spearman(
                np.concatenate([scores[n] for n in names]),
                np.concatenate([sets[n].gold for n in names]),
            )
            metrics[year] = pooled
            metrics[f"{year}/all"] = pooled
            metrics[f"{year}/mean"] = float(np.mean(list(per_subset.values())))
            metrics[f"{year}/wmean"] = float(np.average(list(per_subset.values()), weights=sizes))
            metrics.update(per_subset)
        for task in (t for t in DEV_TASKS if t in sets):
            key = task if self.split == "test" else f"{task}/dev"
            metrics[key] = spearman(scores[task], sets[task].gold)
        headline = [metrics[k] for k in metrics if "/" not in k or k.endswith("/dev")]
        if headline:
            metrics["avg"] = float(np.mean(headline))
        return metrics
