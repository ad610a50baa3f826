"""Retrieval suite: metric maths by hand, the QQP protocol on toy data, readers and the mirror."""

from __future__ import annotations

import gzip
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp
from numpy.typing import ArrayLike
from sklearn.feature_extraction.text import HashingVectorizer
from sklearn.metrics import average_precision_score

from sentemb.config import ConfigError, from_dict
from sentemb.data.queries import read_askubuntu, read_qqp
from sentemb.data.readers import DataFormatError, PairSet
from sentemb.evaluation.base import CHINESE, ENGLISH
from sentemb.evaluation.retrieval import (
    RetrievalConfig,
    RetrievalEvaluator,
    askubuntu_task,
    qqp_task,
    ranking_metrics,
    score_retrieval,
)

from support.encoders import TableEncoder

# --- metric maths ---------------------------------------------------------------------------


def _check_ranking(scores: ArrayLike, relevant: ArrayLike) -> tuple[np.ndarray, np.ndarray]:
    scores, relevant = np.asarray(scores, dtype=np.float64), np.asarray(relevant, dtype=bool)
    if scores.ndim != 1 or scores.shape != relevant.shape:
        raise ValueError(f"scores {scores.shape} and relevant {relevant.shape} must be equal 1-D")
    if not relevant.any():
        raise ValueError("the ranking has no relevant item")
    return scores, relevant


def average_precision(scores: ArrayLike, relevant: ArrayLike) -> float:
    """Reference for `ranking_metrics`: average precision of one ranking by `scores` (higher
    first) against the boolean `relevant`.

    Without ties it is the mean over relevant items of i / rank_i (i-th relevant item at rank_i):
    relevant at ranks 1 and 3 give (1/1 + 2/3) / 2. Tied scores share one cut-off, as in
    scikit-learn's `average_precision_score`, so the order of ties never matters.
    """
    scores, relevant = _check_ranking(scores, relevant)
    positive = scores[relevant]
    at_or_above = np.count_nonzero(scores[None, :] >= positive[:, None], axis=1)
    positives_at_or_above = np.count_nonzero(positive[None, :] >= positive[:, None], axis=1)
    return float(np.mean(positives_at_or_above / at_or_above))


def reciprocal_rank(scores: ArrayLike, relevant: ArrayLike, k: int = 10) -> float:
    """Reference for `ranking_metrics`: 1 / rank of the first relevant item if that rank is
    <= k, else 0 (MRR@k for one query). Items tied with the best relevant item rank before it.
    """
    scores, relevant = _check_ranking(scores, relevant)
    best = scores[relevant].max()
    rank = np.count_nonzero(scores >= best) - np.count_nonzero(scores[relevant] == best) + 1
    return 1.0 / rank if rank <= k else 0.0


def test_average_precision_by_hand() -> None:
    scores = [5.0, 4.0, 3.0, 2.0, 1.0]
    assert average_precision(scores, [1, 0, 1, 0, 0]) == pytest.approx((1 / 1 + 2 / 3) / 2)
    assert average_precision(scores, [1, 1, 0, 0, 0]) == pytest.approx(1.0)
    assert average_precision(scores, [0, 0, 0, 0, 1]) == pytest.approx(1 / 5)
    assert average_precision(scores, [0, 1, 0, 1, 1]) == pytest.approx((1 / 2 + 2 / 4 + 3 / 5) / 3)


def test_reciprocal_rank_by_hand() -> None:
    scores = np.arange(12, 0, -1, dtype=float)  # item i at rank i + 1
    assert reciprocal_rank(scores, np.eye(12, dtype=bool)[2], k=10) == pytest.approx(1 / 3)
    assert reciprocal_rank(scores, np.eye(12, dtype=bool)[9], k=10) == pytest.approx(1 / 10)
    assert reciprocal_rank(scores, np.eye(12, dtype=bool)[10], k=10) == 0.0
    relevant = np.zeros(12, dtype=bool)
    relevant[[4, 1, 7]] = True
    assert reciprocal_rank(scores, relevant, k=10) == pytest.approx(1 / 2)


def test_ties_never_earn_credit() -> None:
    # a constant encoder: AP is the share of positives, the first positive ranks after the ties
    assert average_precision([0.3] * 4, [1, 0, 1, 0]) == pytest.approx(0.5)
    assert reciprocal_rank([0.3] * 4, [1, 0, 1, 0]) == pytest.approx(1 / 3)
    # a negative tied with the only positive pushes it to rank 2
    assert reciprocal_rank([0.9, 0.9, 0.1], [0, 1, 0]) == pytest.approx(1 / 2)
    assert average_precision([0.9, 0.9, 0.1], [0, 1, 0]) == pytest.approx(1 / 2)


def test_no_relevant_item_is_an_error() -> None:
    with pytest.raises(ValueError, match="no relevant"):
        average_precision([1.0, 2.0], [0, 0])
    with pytest.raises(ValueError, match="no relevant"):
        reciprocal_rank([1.0, 2.0], [0, 0])


def test_average_precision_matches_sklearn_with_ties() -> None:
    rng = np.random.default_rng(0)
    for _ in range(200):
        scores = rng.integers(0, 5, size=15).astype(float)  # many ties
        relevant = rng.random(15) < 0.3
        relevant[rng.integers(15)] = True
        expected = average_precision_score(relevant, scores)
        assert average_precision(scores, relevant) == pytest.approx(expected)


def test_vectorised_metrics_equal_the_per_row_functions() -> None:
    rng = np.random.default_rng(1)
    sim = rng.integers(0, 6, size=(40, 30)).astype(np.float32)
    sim[rng.random(sim.shape) < 0.1] = -np.inf  # excluded cells
    relevant = (rng.random(sim.shape) < 0.15) & np.isfinite(sim)
    for i in np.flatnonzero(~relevant.any(axis=1)):
        j = int(np.flatnonzero(np.isfinite(sim[i]))[0])
        relevant[i, j] = True
    rows, cols = np.nonzero(relevant)
    order = rng.permutation(len(rows))  # positives in any order
    ap, rr = ranking_metrics(sim, rows[order], cols[order], k=3)
    for i in range(len(sim)):
        keep = np.isfinite(sim[i])
        assert ap[i] == pytest.approx(average_precision(sim[i][keep], relevant[i][keep]))
        assert rr[i] == pytest.approx(reciprocal_rank(sim[i][keep], relevant[i][keep], k=3))


def test_vectorised_metrics_need_a_positive_per_row() -> None:
    with pytest.raises(ValueError, match="at least one relevant"):
        ranking_metrics(np.zeros((3, 4)), np.array([0, 2]), np.array([1, 1]))


# --- the QQP protocol on toy data -----------------------------------------------------------


class CharEncoder:
    """A cheap bag of character 1-2 grams (sparse), for real data; records what it encoded."""

    def __init__(self) -> None:
        self.vectorizer = HashingVectorizer(
            analyzer="char", ngram_range=(1, 2), n_features=2**14, alternate_sign=False, norm=None
        )
        self.seen: list[str] = []

    def encode(self, sentences: Sequence[str], batch_size: int = 128) -> sp.csr_matrix:
        self.seen.extend(sentences)
        return self.vectorizer.transform(sentences)


TOY_TABLE = {
    "q": [1.0, 0.0, 0.0],
    "s": [1.0, 0.45, 0.0],
    "r": [0.1, 1.0, 0.0],
    "d": [1.0, 0.1, 0.0],  # cos(q, d) 0.995, cos(s, d) 0.97
    "n1": [1.0, 0.5, 0.0],  # cos(q, n1) 0.89, cos(s, n1) 0.999
    "n2": [0.0, 1.0, 0.0],
    "z": [0.0, 0.0, 1.0],  # orthogonal to everything else
}
TOY_PAIRS = PairSet(
    first=["q", "q", "s", "s", "r", "r", "z", "q"],
    second=["d", "n1", "d", "n1", "n2", "d", "n1", "q"],
    scores=[1.0, 0.0, 1.0, 0.0, 1.0, 0.0, 0.0, 1.0],
)


def test_qqp_task_builds_corpus_queries_and_positives() -> None:
    task = qqp_task(TOY_PAIRS)
    assert task.corpus == ["d", "n1", "n2", "q"]
    assert task.queries == ["q", "s", "r"]  # z has no duplicate; q = q is no positive
    assert task.positives == [[0], [0], [2]]
    assert task.own == [3, -1, -1]
    kept = qqp_task(TOY_PAIRS, exclude_query=False)
    assert kept.positives == [[0, 3], [0], [2]] and kept.own == [-1, -1, -1]


@pytest.mark.parametrize("sparse", [False, True])
@pytest.mark.parametrize("query_chunk", [1, 2, 1024])
def test_qqp_protocol_on_toy_vectors(sparse: bool, query_chunk: int) -> None:
    # q finds d first; s finds n1 then d (rank 2); r finds n2 first: AP 1, 1/2, 1
    encoder = TableEncoder(TOY_TABLE, sparse=sparse)
    map_, mrr = score_retrieval(qqp_task(TOY_PAIRS), encoder, k=10, query_chunk=query_chunk)
    assert map_ == pytest.approx(100 * (1 + 0.5 + 1) / 3)
    assert mrr == pytest.approx(100 * (1 + 0.5 + 1) / 3)
    assert sorted(encoder.seen) == sorted(set(encoder.seen))  # each text encoded once
    _, mrr_at_1 = score_retrieval(qqp_task(TOY_PAIRS), encoder, k=1, chunk_cells=1)
    assert mrr_at_1 == pytest.approx(100 * 2 / 3)


def test_own_text_is_never_ranked_unless_asked() -> None:
    # q's own text is also a q2 (of r): excluded, q finds d first; kept, q ranks itself first
    pairs = PairSet(first=["q", "r"], second=["d", "q"], scores=[1.0, 1.0])
    encoder = TableEncoder(TOY_TABLE)
    assert score_retrieval(qqp_task(pairs), encoder) == pytest.approx((75.0, 75.0))
    kept = qqp_task(pairs, exclude_query=False)
    assert score_retrieval(kept, encoder) == pytest.approx((50.0, 50.0))


# --- readers and the evaluator on synthetic files in the real layouts -----------------------

QQP_HEADER = "id\tqid1\tqid2\tquestion1\tquestion2\tis_duplicate"


def write_qqp(root: Path, train_rows: list[str], dev_rows: list[str]) -> None:
    (root / "qqp").mkdir(parents=True, exist_ok=True)
    for split, rows in (("train", train_rows), ("dev", dev_rows)):
        (root / "qqp" / f"{split}.tsv").write_text("\n".join([QQP_HEADER, *rows]) + "\n")


def write_askubuntu(root: Path, titles: dict[str, str], test: list[str], dev: list[str]) -> None:
    folder = root / "askubuntu"
    folder.mkdir(parents=True, exist_ok=True)
    text = "".join(f"{qid}\t{title}\tsome body text .\n" for qid, title in titles.items())
    (folder / "text_tokenized.txt.gz").write_bytes(gzip.compress(text.encode()))
    (folder / "test.txt").write_text("\n".join(test) + "\n")
    (folder / "dev.txt").write_text("\n".join(dev) + "\n")


TOY_QQP_TRAIN = [
    "0\t1\t2\tq\td\t1",
    "1\t1\t3\tq\tn1\t0",
    "2\t4\t3\ts\tn1\t0",
    "3\t5\t6\tr\t\t1",  # empty question: skipped
]
TOY_QQP_DEV = ["4\t4\t2\ts\td\t1", "5\t7\t8\tr\tn2\t1", "6\t7\t2\tr\td\t0"]
TOY_TITLES = {"1": "q", "2": "d", "3": "n1", "4": "s", "5": "n2", "6": "r", "7": "z"}
TOY_ASKUBUNTU_TEST = [
    "1\t2\t3 2 5\t10.0 9.0 8.0",  # q: d (rank 1) among n1, d, n2 -> AP 1
    "4\t2 7\t2 3 5 3\t1 2 3 4",  # s: d ranks 2 after n1 (repeat dropped); 7 not a candidate
    "6\t\t2 3\t1 2",  # no similar question: left out
]


def test_read_qqp_skips_empty_questions_and_joins_splits(tmp_path: Path) -> None:
    write_qqp(tmp_path, TOY_QQP_TRAIN, TOY_QQP_DEV)
    pairs = read_qqp(tmp_path)
    assert pairs.first == ["q", "q", "s", "s", "r", "r"]
    assert pairs.second == ["d", "n1", "n1", "d", "n2", "d"]
    assert pairs.scores == [1.0, 0.0, 0.0, 1.0, 1.0, 0.0]
    assert len(read_qqp(tmp_path, ["dev"])) == 3


@pytest.mark.parametrize(
    ("rows", "message"),
    [
        (["0\t1\t2\tq\td"], r"train\.tsv:2: expected 6 tab-separated columns, got 5"),
        (["0\t1\t2\tq\td\t1", "1\t1\t2\tq\td\tyes"], r"train\.tsv:3: label 'yes'"),
    ],
)
def test_read_qqp_errors_name_file_and_line(tmp_path: Path, rows: list[str], message: str) -> None:
    write_qqp(tmp_path, rows, TOY_QQP_DEV)
    with pytest.raises(DataFormatError, match=message):
        read_qqp(tmp_path)


def test_read_qqp_needs_the_header(tmp_path: Path) -> None:
    write_qqp(tmp_path, [], [])
    (tmp_path / "qqp" / "train.tsv").write_text("0\t1\t2\tq\td\t1\n")
    with pytest.raises(DataFormatError, match=r"train\.tsv:1: expected the header row"):
        read_qqp(tmp_path)


def test_read_askubuntu_from_gzip(tmp_path: Path) -> None:
    write_askubuntu(tmp_path, TOY_TITLES, TOY_ASKUBUNTU_TEST, TOY_ASKUBUNTU_TEST[:1])
    data = read_askubuntu(tmp_path, "test")
    assert data.queries == ["1", "4", "6"]
    assert data.candidates == [["3", "2", "5"], ["2", "3", "5"], ["2", "3"]]
    assert data.positives == [["2"], ["2", "7"], []]
    assert data.titles["3"] == "n1" and "7" not in data.titles
    assert len(read_askubuntu(tmp_path, "dev")) == 1
    task = askubuntu_task(data)
    assert task.queries == ["q", "s"] and task.positives == [[1], [0]]


def test_read_askubuntu_unknown_id_names_file_and_line(tmp_path: Path) -> None:
    write_askubuntu(tmp_path, TOY_TITLES, [TOY_ASKUBUNTU_TEST[0], "1\t2\t2 99\t1 2"], [])
    with pytest.raises(DataFormatError, match=r"test\.txt:2: question id '99' has no title"):
        read_askubuntu(tmp_path, "test")


@pytest.mark.parametrize("sparse", [False, True])
def test_evaluator_on_synthetic_qqp_and_askubuntu(tmp_path: Path, sparse: bool) -> None:
    write_qqp(tmp_path, TOY_QQP_TRAIN, TOY_QQP_DEV)
    write_askubuntu(tmp_path, TOY_TITLES, TOY_ASKUBUNTU_TEST, TOY_ASKUBUNTU_TEST[:1])
    evaluator = RetrievalEvaluator(tmp_path)
    results = evaluator(TableEncoder(TOY_TABLE, sparse=sparse))
    expected = 100 * (1 + 0.5 + 1) / 3  # as in test_qqp_protocol_on_toy_vectors
    assert results["QQP/map"] == pytest.approx(expected)
    assert results["QQP/mrr@10"] == pytest.approx(expected)
    assert results["AskUbuntu/map"] == pytest.approx(100 * (1 + 0.5) / 2)
    assert results["AskUbuntu/mrr@10"] == pytest.approx(100 * (1 + 0.5) / 2)
    assert results["avg"] == pytest.approx((expected + 75.0) / 2)
    assert set(results) == {"QQP/map", "QQP/mrr@10", "AskUbuntu/map", "AskUbuntu/mrr@10", "avg"}
    assert set(evaluator.skipped) == {"LCQMC", "BQ", "MRPC"}


def test_evaluator_with_nothing_present_reports_skips(tmp_path: Path) -> None:
    evaluator = RetrievalEvaluator(tmp_path)
    assert evaluator(TableEncoder(TOY_TABLE)) == {}
    assert set(evaluator.skipped) == {"QQP", "AskUbuntu", "LCQMC", "BQ", "MRPC"}
    assert "qqp/train.tsv" in evaluator.skipped["QQP"]


def test_config_checks_ranges_and_names() -> None:
    assert from_dict(RetrievalConfig, {"mrr_k": 5}, "eval.retrieval").mrr_k == 5
    for values, message in [
        ({"mrr_k": 0}, "eval.retrieval.mrr_k: must be >= 1"),
        ({"query_chunk": 0}, "eval.retrieval.query_chunk: must be >= 1"),
        ({"offline_sets": ["LCQMC", "SNLI"]}, "eval.retrieval.offline_sets: unknown ['SNLI']"),
        ({"qqp_splits": ["test"]}, "eval.retrieval.qqp_splits: unknown ['test']"),
        ({"askubuntu_split": "train"}, "eval.retrieval.askubuntu_split"),
        ({"query_chunks": 5}, "unknown key"),
    ]:
        with pytest.raises(ConfigError, match=message.replace("[", r"\[").replace("]", r"\]")):
            from_dict(RetrievalConfig, values, "eval.retrieval")


# --- the offline sets on the real mirror ----------------------------------------------------


def test_offline_qqp_protocol_on_the_mirror(mirror: Path) -> None:
    english, chinese = CharEncoder(), CharEncoder()
    evaluator = RetrievalEvaluator(mirror, batch_size=512)
    results = evaluator({ENGLISH: english, CHINESE: chinese})
    sets = ("LCQMC", "BQ", "MRPC")
    expected = {f"QQP-protocol/{s}/{m}" for s in sets for m in ("map", "mrr@10")} | {"avg"}
    assert set(results) == expected
    assert all(0.0 < value <= 100.0 for value in results.values())
    maps = [results[f"QQP-protocol/{s}/map"] for s in sets]
    assert results["avg"] == pytest.approx(np.mean(maps))
    assert set(evaluator.skipped) == {"QQP", "AskUbuntu"}
    assert "qqp/train.tsv" in evaluator.skipped["QQP"]
    assert "askubuntu/" in evaluator.skipped["AskUbuntu"]
    # the Chinese encoder encodes exactly the Chinese sets, the English one MRPC
    assert any("\u4e00" <= ch <= "\u9fff" for ch in chinese.seen[0])
    assert not any("\u4e00" <= ch <= "\u9fff" for text in english.seen for ch in text)
