"""MTEB task classes of this repository, for `eval.mteb.tasks` (docs/data.md):

    dvc exp run -S 'eval.mteb.tasks=[data.own.mteb_tasks:STSBenchmarkTest]'

`STSBenchmarkTest` is STS-B's test split from the download stage's copy (data/raw), as an MTEB
STS task: it scores what the built-in STSBenchmark column scores, through MTEB. Copy it to make
your own: a task class reads its files in `load_data` (keep them under data/own/, which the
scoring stages depend on) and fills `self.dataset` as MTEB's task type expects.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from datasets import Dataset
from mteb.abstasks.sts import AbsTaskSTS

from sentemb.data.readers import read_stsb
from sentemb.evaluation.mteb_bridge import local_metadata


class STSBenchmarkTest(AbsTaskSTS):
    """STS-B test (Cer et al., 2017): Spearman x 100 of cosine against the 0-5 gold scores."""

    metadata = local_metadata("STSBenchmarkTest", "STS", "cosine_spearman")
    min_score, max_score = 0, 5

    def load_data(self, num_proc: int | None = None, **kwargs: Any) -> None:
        pairs = read_stsb(Path("data/raw"), "test")
        rows = {"sentence1": pairs.first, "sentence2": pairs.second, "score": pairs.scores}
        self.dataset = {"default": {"test": Dataset.from_dict(rows)}}
        self.data_loaded = True
