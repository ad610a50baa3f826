"""`train.selection`: the built-in dev sets, or an `eval.own` set's dev split, not its test file."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from sentemb.config import ConfigError
from sentemb.data.readers import DataFormatError
from sentemb.training.selection import selection_of

STS = {"name": "bio", "kind": "sts", "path": "data/own/test.tsv", "dev": "data/own/dev.tsv"}


class LengthEncoder:
    """A sentence's vector: its length and 1, so longer sentences are more alike."""

    def encode(self, sentences, batch_size: int = 128) -> np.ndarray:
        return np.array([[len(s), 1.0] for s in sentences], dtype=np.float32)


def params(selection: str, *entries: dict) -> dict:
    return {"train": {"selection": selection}, "eval": {"own": list(entries)}}


@pytest.mark.parametrize(
    ("entries", "message"),
    [
        (
            [],
            r"train\.selection: 'bio' is neither stsb nor stsb\+sick nor the name of an eval\.own",
        ),
        (
            [{**STS, "kind": "retrieval", "dev": None}],
            r"'bio' is an eval\.own set of kind retrieval",
        ),
        (
            [{**STS, "dev": None}],
            r"'bio' needs a dev split apart from its test file: give eval\.own\[0\]\.dev",
        ),
        ([{**STS, "dev": STS["path"]}], r"needs a dev split apart from its test file"),
        ([{**STS, "dev": "./" + STS["path"]}], r"needs a dev split apart from its test file"),
    ],
)
def test_a_selection_that_cannot_select_names_the_params(entries: list, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        selection_of(params("bio", *entries), Path("data/raw"), 8)


def test_an_own_sts_set_selects_on_its_dev_file_alone(tmp_path: Path) -> None:
    own = tmp_path / "data/own"
    own.mkdir(parents=True)
    rows = "".join(f"{'a' * i}\t{'b' * (i + 1)}\t{i}\n" for i in range(1, 6))
    (own / "dev.tsv").write_text("sentence1\tsentence2\tscore\n" + rows)
    dev = selection_of(params("bio", STS), tmp_path / "raw", 8, repo=tmp_path)
    assert dev.files == [own / "dev.tsv"] and dev.keys == ["bio"]
    assert np.isfinite(dev.score(LengthEncoder()))  # test.tsv does not exist: never read


def test_a_missing_dev_file_is_found_before_training(tmp_path: Path) -> None:
    with pytest.raises(
        DataFormatError, match=r"dev\.tsv: not found; train\.selection: bio selects"
    ):
        selection_of(params("bio", STS), tmp_path / "raw", 8, repo=tmp_path)
