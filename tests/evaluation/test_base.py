"""What every evaluator shares: vectors that cannot be scored, non-finite scores, and which
absent datasets are skipped (the download manifest explains them) and which are errors."""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp

from sentemb.config import ConfigError
from sentemb.data.download import DataUnavailable
from sentemb.evaluate import build_evaluator, keeping_pairs
from sentemb.evaluation.base import (
    CHINESE,
    ENGLISH,
    LANGUAGES,
    Evaluator,
    UnusableVectors,
    check_vectors,
    embed,
    require_complete,
    require_finite,
    scoring,
)
from sentemb.evaluation.chinese import ChineseEvaluator
from sentemb.evaluation.sts import STSConfig, STSEvaluator
from sentemb.registry import SUITES

from support.training import write_stsb


class FixedEncoder:
    """Gives `vector(i)` to the i-th sentence of each call."""

    def __init__(self, vector) -> None:
        self.vector = vector

    def encode(self, sentences: Sequence[str], batch_size: int = 128) -> np.ndarray:
        rows = [self.vector(i) for i in range(len(sentences))]
        return np.stack(rows).astype(np.float32) if rows else np.zeros((0, 2), np.float32)


def distinct(i: int) -> np.ndarray:
    return np.array([1.0, float(i)])


@pytest.mark.parametrize(
    ("vector", "message"),
    [
        (lambda i: np.array([np.nan, 1.0]), r"non-finite vectors \(NaN or inf\) for 3 of 3"),
        (lambda i: np.array([1.0, np.inf if i == 1 else i]), "non-finite .* for 1 of 3 sentences"),
        (lambda i: np.array([0.5, -2.0]), "the same vector for all 3 sentences"),
        (lambda i: np.zeros(2), "the same vector for all 3 sentences"),
    ],
)
def test_unusable_vectors_are_refused_where_they_are_encoded(vector, message: str) -> None:
    with pytest.raises(UnusableVectors, match=message):
        embed(FixedEncoder(vector), ["a", "b", "c", "a"], batch_size=2)


def test_usable_vectors_pass_dense_and_sparse() -> None:
    vectors, row = embed(FixedEncoder(distinct), ["a", "b", "a"], batch_size=2)
    assert vectors.shape == (2, 2) and row == {"a": 0, "b": 1}
    check_vectors(np.ones((1, 4)))  # one sentence: nothing to tell apart
    check_vectors(np.zeros((0, 4)))
    check_vectors(sp.csr_matrix(np.array([[0.0, 1.0], [0.0, 2.0], [0.0, 0.0]])))


def test_unusable_sparse_vectors_are_refused() -> None:
    with pytest.raises(UnusableVectors, match="same vector for all 3"):
        check_vectors(sp.csr_matrix(np.tile([0.0, 3.0, 1.0], (3, 1))))
    with pytest.raises(UnusableVectors, match="same vector for all 2"):
        check_vectors(sp.csr_matrix((2, 5)))  # every row empty: TF-IDF with no known word
    with pytest.raises(UnusableVectors, match="for 1 of 2 sentences"):
        check_vectors(sp.csr_matrix(np.array([[0.0, np.nan], [1.0, 0.0]])))


def test_scoring_names_the_model() -> None:
    with (
        pytest.raises(UnusableVectors, match=r"^models/m \+ repal: the encoder gave the same"),
        scoring("models/m + repal"),
    ):
        embed(FixedEncoder(lambda i: np.ones(3)), ["a", "b"], batch_size=2)


def test_non_finite_scores_are_refused_naming_the_key() -> None:
    require_finite("m", {"STS12": 70.0, "skipped": {"SICK": "absent"}, "layers": [0.1, 2]})
    for values, key in [
        ({"STS12": 70.0, "STS13": math.nan}, "STS13 is nan"),
        ({"repal": {"avg": 1.0, "STS12/MSRpar": -math.inf}}, "repal.STS12/MSRpar is -inf"),
        ({"token_wise": [0.5, math.nan]}, r"token_wise\[1\] is nan"),
    ]:
        with pytest.raises(UnusableVectors, match=f"^m, suite sts: {key}, not a score$"):
            require_finite("m, suite sts", values)


# --- absent datasets ------------------------------------------------------------------------


def write_manifest(root: Path, datasets: Sequence[str], missing: dict[str, str]) -> None:
    manifest = {"datasets": {name: {} for name in datasets}, "missing": missing}
    (root / "MANIFEST.json").write_text(json.dumps(manifest))


def sts_only(root: Path) -> STSEvaluator:
    return STSEvaluator(root, 4, STSConfig(tasks=["STS12", "STSBenchmark"]))


STSB_LINES = [f"g\tf\t2012\t{i}\t{i % 5}.0\tsentence {i}\tother {i * 7 % 11}" for i in range(12)]


def test_absence_the_manifest_explains_is_skipped_with_its_reason(tmp_path: Path) -> None:
    write_stsb(tmp_path, STSB_LINES)
    write_manifest(tmp_path, ["STSBenchmark"], {"STS12": "STS12: not in the mirror (...)"})
    evaluator = sts_only(tmp_path)
    metrics = evaluator(FixedEncoder(distinct))
    assert evaluator.skipped == {"STS12": "STS12: not in the mirror (...)"}
    require_complete(evaluator, "sts", metrics)  # explained, and a task was scored
    write_manifest(tmp_path, ["STSBenchmark"], {})  # STS12 not requested (data.datasets)
    evaluator = sts_only(tmp_path)
    require_complete(evaluator, "sts", evaluator(FixedEncoder(distinct)))
    assert evaluator.skipped["STS12"].endswith("(data.datasets leaves STS12 out)")


def test_a_downloaded_dataset_whose_file_is_gone_is_an_error(tmp_path: Path) -> None:
    write_manifest(tmp_path, ["STS12", "STSBenchmark"], {})
    write_stsb(tmp_path, STSB_LINES)
    with pytest.raises(DataUnavailable, match=r"lists STS12 as downloaded: .* was changed after"):
        sts_only(tmp_path)(FixedEncoder(distinct))


def test_an_absence_nothing_explains_is_an_error_at_the_stage(tmp_path: Path) -> None:
    write_stsb(tmp_path, STSB_LINES)  # and no MANIFEST.json: not the download's output
    evaluator = sts_only(tmp_path)
    metrics = evaluator(FixedEncoder(distinct))
    assert set(metrics) == {"STSBenchmark", "avg"} and set(evaluator.unexplained) == {"STS12"}
    with pytest.raises(DataUnavailable, match=r"^STS12: not found under .*no MANIFEST\.json there"):
        require_complete(evaluator, "sts", metrics)


# own and mteb read no download manifest: test_own.py, test_mteb.py
@pytest.mark.parametrize("suite", [s for s in SUITES if s not in ("own", "mteb")])
def test_every_task_skipped_is_an_error(tmp_path: Path, suite: str) -> None:
    write_manifest(tmp_path, [], {"STS12": "no network", "MR": "no network"})
    params = {"eval": {"transfer": {"kfold": 2, "inner_kfold": 2}}}
    scored = build_evaluator(suite, params, tmp_path, 4)
    metrics = scored(FixedEncoder(distinct))
    assert metrics == {}
    with pytest.raises(DataUnavailable, match="no task could be scored under"):
        require_complete(scored, suite, metrics)


def test_each_suite_is_declared_once_with_what_its_readers_need() -> None:
    """`SUITES` in report order (each suite's `order`, none shared): its evaluator and config
    (built from `eval.<name>`), the languages it scores, whether it keeps pairs, and a report
    title and columns ending in avg (own, mteb: a column per set or task asked, no avg)."""
    orders = [SUITES[name].order for name in SUITES]
    assert orders == sorted(set(orders))
    assert keeping_pairs(["transfer", "chinese", "sts"]) == ["chinese", "sts"]
    assert (STSEvaluator.languages, ChineseEvaluator.languages) == ((ENGLISH,), (CHINESE,))
    for name, suite in SUITES.items():
        assert issubclass(suite.cls, Evaluator) and dataclasses.is_dataclass(suite.config)
        assert suite.cls.languages and set(suite.cls.languages) <= set(LANGUAGES)
        assert suite.cls.title and (suite.cls.columns[-1:] == ("avg",)) != (name in ("own", "mteb"))
        assert isinstance(build_evaluator(name, {}, Path("data"), 4), suite.cls)
    with pytest.raises(ConfigError, match=r"^eval\.sts: unknown key"):
        build_evaluator("sts", {"eval": {"sts": {"taks": []}}}, Path("data"), 4)


class SeenEncoder(FixedEncoder):
    """`FixedEncoder(distinct)` that records the sentences it encodes."""

    def __init__(self) -> None:
        super().__init__(distinct)
        self.seen: list[str] = []

    def encode(self, sentences: Sequence[str], batch_size: int = 128) -> np.ndarray:
        self.seen += sentences
        return super().encode(sentences, batch_size)


def test_every_evaluator_takes_encoders_by_language_or_one_for_all(tmp_path: Path) -> None:
    """One call signature: a mapping by language (each suite reads only its languages), or one
    encoder for every language, with the same scores."""
    write_stsb(tmp_path, STSB_LINES)
    write_manifest(tmp_path, ["STSBenchmark"], {})
    english, chinese = SeenEncoder(), SeenEncoder()
    evaluator = sts_only(tmp_path)
    by_language = evaluator({ENGLISH: english, CHINESE: chinese})
    assert english.seen and not chinese.seen
    assert evaluator(FixedEncoder(distinct)) == by_language
