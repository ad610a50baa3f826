"""Model selection (`train.selection`): the dev score each checkpoint is judged by.

`stsb` is SimCSE's (§3: STS-B dev), `stsb+sick` DCLR's (STS-B dev and SICK trial, averaged),
and the name of an `eval.own` set of kind `sts` or `reranking` selects on that set's `dev`
file (Spearman, or MAP), never on its test file.

    dev = selection_of(params, Path("data/raw"), batch_size=128)
    dev.score(encoder)      # the number the best checkpoint maximises
    dev.files               # what it reads (hashed into the run key; each checked now)
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from sentemb.config import ConfigError, section
from sentemb.data.readers import DataFormatError
from sentemb.data.sources import DATASETS
from sentemb.evaluation.base import Evaluator, SentenceEncoder
from sentemb.evaluation.own import OwnConfig, OwnEvaluator
from sentemb.evaluation.sts import STSConfig, STSEvaluator
from sentemb.training.config import TrainConfig

BUILT_IN = {  # train.selection -> the dev sets averaged: (STS task, dataset, its file's name part)
    "stsb": [("STSBenchmark", "STSBenchmark", "sts-dev")],
    "stsb+sick": [
        ("STSBenchmark", "STSBenchmark", "sts-dev"),
        ("SICKRelatedness", "SICK", "SICK_trial"),
    ],
}
SELECTABLE = ("sts", "reranking")  # kinds of eval.own sets a model can be selected on


@dataclass
class Selection:
    """The scorer of `train.selection`, the metric keys it averages and the files it reads."""

    name: str
    scorer: Evaluator
    keys: list[str]
    files: list[Path]

    def score(self, encoder: SentenceEncoder) -> float:
        """The mean of the selection's dev metrics."""
        metrics = self.scorer(encoder)
        return float(np.mean([metrics[key] for key in self.keys]))


def _built_in(name: str, data: Path, batch_size: int) -> Selection:
    sets = BUILT_IN[name]
    files = [
        data / f.path
        for _, dataset, part in sets
        for f in DATASETS[dataset].files
        if part in Path(f.path).name
    ]
    scorer = STSEvaluator(data, batch_size, STSConfig([task for task, _, _ in sets]), split="dev")
    return Selection(name, scorer, [f"{task}/dev" for task, _, _ in sets], files)


def _own(name: str, params: dict[str, Any], data: Path, batch_size: int, repo: Path) -> Selection:
    own = section(params, "eval.own", OwnConfig)
    known = [s.name for s in own.sets]
    if name not in known:
        raise ConfigError(
            f"train.selection: {name!r} is neither {' nor '.join(BUILT_IN)} nor the name of an "
            f"eval.own set ({known or 'none'})"
        )
    index = known.index(name)
    entry = own.sets[index]
    if entry.kind not in SELECTABLE:
        raise ConfigError(
            f"train.selection: {name!r} is an eval.own set of kind {entry.kind}; a model is "
            f"selected on one of kind {' or '.join(SELECTABLE)}"
        )
    if entry.dev is None or Path(entry.dev) == Path(entry.path):  # `./data/own/x` too
        raise ConfigError(
            f"train.selection: {name!r} needs a dev split apart from its test file: give "
            f"eval.own[{index}].dev, a file under data/own/ (the test file is its path)"
        )
    scorer = OwnEvaluator(data, batch_size, OwnConfig([entry]), split="dev", repo=repo)
    return Selection(name, scorer, [name], [repo / entry.dev])


def selection_of(
    params: dict[str, Any], data: Path, batch_size: int, repo: Path = Path()
) -> Selection:
    """`train.selection` as a `Selection`, every file it reads checked now (a missing one is an
    error before anything is built)."""
    name = section(params, "train", TrainConfig).selection
    if name in BUILT_IN:
        selection = _built_in(name, data, batch_size)
    else:
        selection = _own(name, params, data, batch_size, repo)
    for path in selection.files:
        if not path.is_file():
            raise DataFormatError(
                f"{path}: not found; train.selection: {name} selects the model on it"
                + (" (download it: data.datasets)" if name in BUILT_IN else "")
            )
    return selection
