"""Hand-computed checks of SSCL's intermediate-layer negatives (`sentemb.methods.sscl`) on the
toy batch of `toy`."""

from __future__ import annotations

import pytest
from toy import MID, E, anchors, exp, log, positives, t

from sentemb.methods.functional import info_nce
from sentemb.methods.sscl import sscl_negatives


def test_sscl_negatives_shapes() -> None:
    layer11, layer10 = t(MID), t([[0, 0, 0, 1.0]] * 3)
    assert sscl_negatives([layer11], "self").shape == (3, 1, 4)
    assert sscl_negatives([layer11, layer10], "self").shape == (3, 2, 4)
    assert sscl_negatives([layer11, layer10], "batch").shape == (6, 4)
    with pytest.raises(ValueError):
        sscl_negatives([layer11], "other")  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        sscl_negatives([layer11, layer11[:2]], "batch")
    with pytest.raises(ValueError):
        sscl_negatives([], "self")


def test_sscl_self_variant_hand_value() -> None:
    # each anchor sees only its own intermediate vector: cos 0.6, 1, -1
    got = info_nce(anchors(), positives(), 1.0, extra_negatives=sscl_negatives([t(MID)], "self"))
    expected = (
        (-1 + log(E + exp(0.6) + 1 + exp(0.6)))  # 0.996298
        + (-0.8 + log(1 + exp(0.8) + exp(0.6) + E))  # 1.249752
        + (0.8 + log(1 + 1 + exp(-0.8) + exp(-1)))  # 1.835752
    ) / 3  # 1.360632
    assert got.item() == pytest.approx(expected)


def test_progressive_sscl_two_layers_hand_value() -> None:
    # second layer: e4 for everyone (cos 0) adds one e^0 per row
    layers = [t(MID), t([[0, 0, 0, 1.0]] * 3)]
    got = info_nce(anchors(), positives(), 1.0, extra_negatives=sscl_negatives(layers, "self"))
    expected = (
        (-1 + log(E + exp(0.6) + 1 + exp(0.6) + 1))
        + (-0.8 + log(1 + exp(0.8) + exp(0.6) + E + 1))
        + (0.8 + log(1 + 1 + exp(-0.8) + exp(-1) + 1))
    ) / 3
    assert got.item() == pytest.approx(expected)


def test_sscl_batch_variant_hand_value() -> None:
    # cos(a_i, mid_j) with mid normalised to (.6,.8,0,0), e2, -e3:
    #   row 1: [0.6, 0, 0]   row 2: [0.8, 1, 0]   row 3: [0, 0, -1]
    rows = [
        -1 + log(E + exp(0.6) + 1 + exp(0.6) + 1 + 1),  # -1 + ln 9.362520 = 1.236714
        -0.8 + log(1 + exp(0.8) + exp(0.6) + exp(0.8) + E + 1),  # -0.8 + ln 10.991483 = 1.597121
        0.8 + log(1 + 1 + exp(-0.8) + 1 + 1 + exp(-1)),  # 0.8 + ln 4.817208 = 2.372195
    ]
    batch = sum(rows) / 3  # 1.735343
    got = info_nce(anchors(), positives(), 1.0, extra_negatives=sscl_negatives([t(MID)], "batch"))
    assert got.item() == pytest.approx(batch)  # averaged with SIMCSE: tests/methods/test_methods


def test_sscl_gradient_reaches_intermediate_layers() -> None:
    mid = t(MID).requires_grad_(True)
    a = anchors().requires_grad_(True)
    info_nce(a, positives(), 0.05, extra_negatives=sscl_negatives([mid], "batch")).backward()
    assert a.grad is not None and a.grad.abs().sum() > 0
    assert mid.grad is not None and mid.grad.abs().sum() > 0
