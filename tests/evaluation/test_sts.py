"""STS and Chinese evaluators against hand-computed values on toy data; TF-IDF on a real set."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from sentemb.config import ConfigError, UserError
from sentemb.data.sources import SENTEVAL_DIR
from sentemb.evaluation.base import rowwise_cosine, spearman
from sentemb.evaluation.chinese import ChineseConfig, ChineseEvaluator
from sentemb.evaluation.sts import STSConfig, STSEvaluator
from sentemb.tfidf import TfidfConfig, TfidfEncoder

from support.encoders import TableEncoder

VECTORS = {"a": [1.0, 0.0], "b": [1.0, 1.0], "c": [0.0, 1.0], "d": [1.0, 0.1], "e": [-1.0, 0.2]}


def write_sts_year(root: Path, subsets: dict[str, list[tuple[str, str, str]]]) -> None:
    folder = root / SENTEVAL_DIR / "STS" / "STS13-en-test"
    folder.mkdir(parents=True)
    for name, rows in subsets.items():
        (folder / f"STS.input.{name}.txt").write_text("".join(f"{a}\t{b}\n" for a, b, _ in rows))
        (folder / f"STS.gs.{name}.txt").write_text("".join(f"{g}\n" for _, _, g in rows))


def test_cosine_and_spearman_by_hand() -> None:
    a = np.array([[1.0, 0.0], [1.0, 1.0]])
    b = np.array([[1.0, 1.0], [0.0, 1.0]])
    np.testing.assert_allclose(rowwise_cosine(a, b), [1 / np.sqrt(2), 1 / np.sqrt(2)])
    assert spearman(np.array([0.1, 0.2, 0.3]), np.array([3.0, 2.0, 1.0])) == pytest.approx(-100.0)


def test_sts_all_mean_and_wmean(tmp_path: Path) -> None:
    # cos(a,b)=.707 cos(a,c)=0 cos(a,d)=.995 cos(a,e)=-.981 cos(b,c)=.707 cos(c,d)=.0995
    write_sts_year(
        tmp_path,
        {
            "FNWN": [("a", "b", "2"), ("a", "c", "1"), ("a", "d", "4")],  # ranks agree: rho = 1
            "headlines": [("a", "e", "3"), ("b", "c", "1"), ("", "", "")],  # disagree: rho = -1
            "OnWN": [("c", "d", "0.5"), ("a", "d", "5")],  # agree: rho = 1
        },
    )
    metrics = STSEvaluator(tmp_path, config=STSConfig(tasks=["STS13"]))(TableEncoder(VECTORS))
    assert metrics["STS13/FNWN"] == pytest.approx(100.0)
    assert metrics["STS13/headlines"] == pytest.approx(-100.0)
    assert metrics["STS13/mean"] == pytest.approx(100.0 / 3)
    assert metrics["STS13/wmean"] == pytest.approx((300 - 200 + 200) / 7)
    # pooled: cosines [.707, 0, .995, -.981, .707, .0995, .995] vs gold [2, 1, 4, 3, 1, .5, 5]
    cos = np.array([0.7071, 0.0, 0.995, -0.981, 0.7071, 0.0995, 0.995])
    gold = np.array([2, 1, 4, 3, 1, 0.5, 5])
    assert metrics["STS13"] == pytest.approx(spearman(cos, gold), abs=1e-6)
    assert metrics["STS13/all"] == metrics["STS13"] == metrics["avg"]
    assert set(STSEvaluator(tmp_path).__call__(TableEncoder(VECTORS))) >= {"STS13", "avg"}


def test_missing_sets_are_skipped_with_reason(tmp_path: Path) -> None:
    evaluator = STSEvaluator(tmp_path)
    assert evaluator(TableEncoder(VECTORS)) == {}
    assert set(evaluator.skipped) == {
        "STS12",
        "STS13",
        "STS14",
        "STS15",
        "STS16",
        "STSBenchmark",
        "SICK",
    }
    assert "not found under" in evaluator.skipped["STS12"]


def test_dev_split_needs_only_the_dev_files(tmp_path: Path) -> None:
    # STS-B dev and SICK trial without their test files: the dev split scores them, the test
    # split skips them (it used to ask for every file of the dataset, so the dev split skipped too)
    stsb = tmp_path / SENTEVAL_DIR / "STS" / "STSBenchmark"
    stsb.mkdir(parents=True)
    rows = [("a", "b", "2"), ("a", "c", "1"), ("a", "d", "4")]  # cosines .707, 0, .995: rho = 1
    (stsb / "sts-dev.csv").write_text("".join(f"g\tf\ty\t0\t{g}\t{a}\t{b}\n" for a, b, g in rows))
    sick = tmp_path / SENTEVAL_DIR / "SICK"
    sick.mkdir(parents=True)
    lines = [f"{i}\t{a}\t{b}\t{g}\tX\n" for i, (a, b, g) in enumerate(rows)]
    (sick / "SICK_trial.txt").write_text("pair_ID\tA\tB\tscore\tlabel\n" + "".join(lines))
    dev = STSEvaluator(tmp_path, split="dev")(TableEncoder(VECTORS))
    assert dev == {
        "STSBenchmark/dev": pytest.approx(100.0),
        "SICKRelatedness/dev": pytest.approx(100.0),
        "avg": pytest.approx(100.0),
    }
    test = STSEvaluator(tmp_path)
    assert test(TableEncoder(VECTORS)) == {}
    assert {"STSBenchmark", "SICK"} <= set(test.skipped)


def test_chinese_by_hand(tmp_path: Path) -> None:
    folder = tmp_path / "senteval_cn" / "BQ"
    folder.mkdir(parents=True)
    (folder / "BQ.test.data").write_text("a\tb\t1\na\tc\t0\na\te\t0\nb\tc\t1\n", encoding="utf-8")
    evaluator = ChineseEvaluator(tmp_path, config=ChineseConfig(tasks=["BQ"]))
    metrics = evaluator(TableEncoder(VECTORS))
    # cosines .707, 0, -.981, .707 vs labels 1, 0, 0, 1: ranks [3.5, 2, 1, 3.5] vs
    # [3.5, 1.5, 1.5, 3.5]; centred [1, -.5, -1.5, 1] . [1, -1, -1, 1] = 4, norms sqrt(4.5) and 2
    expected = 100 * 4 / (np.sqrt(4.5) * 2)
    assert metrics == {"BQ": pytest.approx(expected, abs=1e-6), "avg": pytest.approx(expected)}


def test_tfidf_baseline_end_to_end_on_real_sts13(mirror: Path) -> None:
    corpus = (mirror / "corpus" / "wiki1m_for_simcse.head.txt").read_text().splitlines()
    evaluator = STSEvaluator(mirror, config=STSConfig(tasks=["STS13"]))
    metrics = evaluator(TfidfEncoder("en", corpus=corpus))
    assert set(metrics) == {
        "STS13",
        "STS13/all",
        "STS13/mean",
        "STS13/wmean",
        "STS13/FNWN",
        "STS13/headlines",
        "STS13/OnWN",
        "avg",
    }
    assert 30.0 < metrics["STS13"] < 80.0  # a bag of words correlates, but far from perfectly


@pytest.mark.parametrize("on_corpus", [True, False])
def test_a_tfidf_min_df_no_word_reaches_is_one_error_naming_it(on_corpus: bool) -> None:
    """Fitted on the corpus or on the sentences scored: a `min_df` above their count (20,000
    documents, thinking of the 1M-sentence corpus) is an error naming it, not scikit-learn's."""
    sentences, config = ["a cat sat", "a dog ran"], TfidfConfig(min_df=20_000)
    with pytest.raises(ConfigError, match=r"^tfidf\.min_df: 20000 documents, and no word"):
        if on_corpus:
            TfidfEncoder("en", config, sentences)
        else:
            TfidfEncoder("en", config).encode(sentences)


@pytest.mark.parametrize("min_df", [1, 2])
@pytest.mark.parametrize("sentences", [["", "!!", "?"], ["   "]])
def test_sentences_without_a_word_are_said_to_be_so_whatever_the_min_df(
    sentences: list[str], min_df: int
) -> None:
    """No `min_df` helps sentences with no word at all: the error says that, not `min_df`."""
    with pytest.raises(UserError, match=rf"^TF-IDF: {len(sentences)} sentences without a word"):
        TfidfEncoder("en", TfidfConfig(min_df=min_df), sentences)
