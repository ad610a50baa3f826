"""RepAL (eq. 1-5) on toy encoders, by hand: the refinement, the tri mask, the λ search, the
partial masks, the eigenvalue bound."""

from __future__ import annotations

import numpy as np
import pytest
from toy_refine import IDF, ToyMask, toy_dev, toy_parts

from sentemb.data.readers import PairSet
from sentemb.evaluation.base import UnusableVectors
from sentemb.refine.config import RefineConfig
from sentemb.refine.fit import fit_scope
from sentemb.refine.repal import (
    PartialMask,
    RepALConfig,
    RepALEncoder,
    eigenvalue_bounds,
    search_lambdas,
)

from support.encoders import CountingEncoder, TableEncoder


def test_refinement_is_eq_3_on_a_toy_encoder() -> None:
    table = {
        "a": np.array([1.0, 2.0]),
        "a*": np.array([0.5, 0.0]),
        "b": np.array([3.0, -1.0]),
        "b*": np.array([0.0, 1.0]),
    }
    mean = np.array([0.2, 0.4])
    refined = RepALEncoder(TableEncoder(table, dtype=None), ToyMask(), 0.5, 2.0, mean).encode(
        ["a", "b", "a"]
    )
    # v' = f(x) - 0.5 f(x*) - 2 v̂
    expected = [[1 - 0.25 - 0.4, 2 - 0 - 0.8], [3 - 0 - 0.4, -1 - 0.5 - 0.8], [0.35, 1.2]]
    np.testing.assert_allclose(refined, expected, rtol=1e-6)
    # v̂ fitted on the call's distinct sentences (eq. 2): mean of f(a), f(b) = (2, 0.5)
    fitted_here = RepALEncoder(TableEncoder(table, dtype=None), None, 0.0, 1.0, None).encode(
        ["a", "b", "a"]
    )
    np.testing.assert_allclose(fitted_here[0], [1 - 2, 2 - 0.5], rtol=1e-6)


@pytest.mark.parametrize("lambda1", [0.0, 0.5])
def test_tri_mask_encodes_x_star_only_where_lambda1_weighs_it(lambda1: float) -> None:
    table = {"a": np.array([1.0, 2.0]), "a*": np.array([0.5, 4.0])}
    mean = np.array([0.2, 0.4])
    encoder = CountingEncoder(table)
    refined = RepALEncoder(encoder, ToyMask(), lambda1, 2.0, mean).encode(["a"])
    # v' = f(a) - λ1 f(a*) - 2 v̂: at λ1 = 0, a* is never encoded and v' is f(a) - 2 v̂
    expected = [[1 - lambda1 * 0.5 - 0.4, 2 - lambda1 * 4.0 - 0.8]]
    np.testing.assert_allclose(refined, expected, rtol=1e-6)
    assert encoder.calls == ([["a"]] if lambda1 == 0 else [["a"], ["a*"]])


def test_lambda_search_finds_the_known_best_on_a_toy_dev_set() -> None:
    encoder, dev, fit = toy_dev()
    config = RefineConfig(
        methods=["repal"],
        repal=RepALConfig(lambda1=[0.0, 0.5, 1.0, 1.5], lambda2=[0.0, 0.5, 1.0, 1.5, 2.0]),
    )
    fitted, metrics, tried = fit_scope(encoder, dev, fit, toy_parts(config), config, batch_size=8)
    assert set(fitted) == {"repal"}
    np.testing.assert_allclose(fitted["repal"].mean, encoder.encode(fit).mean(axis=0))
    assert (fitted["repal"].lambda1, fitted["repal"].lambda2) == (1.0, 1.0)
    assert metrics["dev/repal"] == pytest.approx(100.0)
    assert metrics["dev/repal"] > metrics["dev/none"]
    # §4.6 order: the λ2 grid with λ1 = 0, then the λ1 grid at the chosen λ2
    assert [(t["lambda1"], t["lambda2"]) for t in tried["repal"]] == [
        *[(0.0, l2) for l2 in (0.0, 0.5, 1.0, 1.5, 2.0)],
        *[(l1, 1.0) for l1 in (0.0, 0.5, 1.0, 1.5)],
    ]


def test_lambda_search_levels_and_ties() -> None:
    calls: list[tuple[float, float]] = []

    def score(l1: float, l2: float) -> float:
        calls.append((l1, l2))
        return -((l1 - 0.3) ** 2) - (l2 - 2.0) ** 2

    assert search_lambdas(score, [0.0, 0.3, 0.6], [1.0, 2.0, 3.0])[:2] == (0.3, 2.0)
    calls.clear()
    assert search_lambdas(score, [0.0, 0.3], [1.0, 2.0], levels=["corpus"])[:2] == (0.0, 2.0)
    assert calls == [(0.0, 1.0), (0.0, 2.0)]
    assert search_lambdas(lambda a, b: 1.0, [0.5, 0.0], [0.7, 0.0])[:2] == (0.5, 0.7)
    # a NaN score ranks last, wherever it is (first, max() returned it and the search crashed)
    nan_first = search_lambdas(lambda a, b: b if b else float("nan"), [0.0], [0.0, 1.0, 2.0])
    assert nan_first[:2] == (0.0, 2.0)
    assert search_lambdas(lambda a, b: float("nan"), [0.5, 0.0], [0.7, 0.0])[:2] == (0.5, 0.7)


@pytest.mark.parametrize(
    ("gold", "second", "counts"),
    [
        ([1.0, 1.0], ["b0", "b1"], "4 distinct sentences and 1 distinct gold"),
        ([1.0, 2.0], ["a0", "a0"], "1 distinct sentences and 2 distinct gold"),
    ],
)
def test_tuning_needs_two_sentences_and_two_gold_scores(
    gold: list[float], second: list[str], counts: str
) -> None:
    """A Chinese valid sample of one gold score (tiny `refine.valid_pairs`) gave NaN Spearmans
    and a bare StopIteration; one sentence crashed the random-pair cosine in numpy."""
    encoder, _, fit = toy_dev()
    first = ["a0", "a1"] if second[0] == "b0" else ["a0", "a0"]
    config = RefineConfig(methods=["repal", "whitening"])
    with pytest.raises(UnusableVectors, match=f"2 tuning pairs have {counts} scores"):
        fit_scope(encoder, PairSet(first, second, gold), fit, toy_parts(config), config)


def test_partial_mask_masks_exactly_the_tf_idf_keywords_english() -> None:
    sentence = "The Cat sat on the mat, with the cat."
    tri = PartialMask("[MASK]", False, IDF, keywords=2)
    # TF-IDF: cat 2 x 2.0 = 4.0, mat 3.0, sat 1.5; stopwords never count
    assert tri.keywords(sentence) == {"cat", "mat"}
    assert tri(sentence) == "The [MASK] sat on the [MASK], with the [MASK]."
    key = PartialMask("[MASK]", False, IDF, keywords=2, mask="key")
    assert key(sentence) == "[MASK] Cat [MASK] [MASK] [MASK] mat, [MASK] [MASK] cat."
    assert PartialMask("<mask>", False, IDF, keywords=20)(sentence) == (
        "The <mask> <mask> on the <mask>, with the <mask>."
    )
    # a word the corpus lacks has df = 0: IDF ln(1 + 10) + 1 = 3.40, above mat's 3.0 (it was 0)
    assert IDF["zyxwv"] == pytest.approx(np.log(11) + 1)
    assert PartialMask("[MASK]", False, IDF, keywords=1)("mat zyxwv") == "mat [MASK]"


def test_partial_mask_masks_exactly_the_jieba_keywords_chinese() -> None:
    sentence = "我想申请信用卡"  # jieba: 我 / 想 / 申请 / 信用卡; TF-IDF keywords 信用卡 > 申请
    assert PartialMask("[MASK]", True, None, keywords=1)(sentence) == "我想申请[MASK]"
    assert PartialMask("[MASK]", True, None, keywords=20)(sentence) == "我想[MASK][MASK]"
    key = PartialMask("[MASK]", True, None, keywords=1, mask="key")
    assert key(sentence) == "[MASK][MASK][MASK]信用卡"


def test_eigenvalue_bound_is_eq_5_by_hand() -> None:
    e = np.eye(2)
    # λ = 0: W = I, a = 1, b = 0: (2·0 + sqrt(0 + 3·1)) / 2
    # λ = 1: E* = E - mean = ±0.5, W* = [[.5, -.5], [-.5, .5]]: (2·(-.5) + sqrt(.25 + 3·.25)) / 2
    assert eigenvalue_bounds(e, [0.0, 1.0]) == pytest.approx([np.sqrt(3) / 2, 0.0])
