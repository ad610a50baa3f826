"""Hand-computed checks of the maths the methods share (`sentemb.methods.functional`):
cosine similarities, InfoNCE with weights and extra negatives, the all-gather, fp32 losses.
The toy batch and its SimCSE rows are in `toy`."""

from __future__ import annotations

import pytest
import torch
from toy import L1, L2, L3, SIMCSE, E, anchors, exp, flat, log, positives, t

from sentemb.methods.functional import cosine_matrix, gather_with_grad, info_nce

# ------------------------------------------------------------------------------------------
# cosine_matrix, info_nce, gather_with_grad
# ------------------------------------------------------------------------------------------


def test_cosine_matrix_hand_values() -> None:
    assert flat(cosine_matrix(anchors(), positives())) == pytest.approx(
        [1, 0.6, 0, 0, 0.8, 0.6, 0, 0, -0.8]
    )
    # (1,0)·(-2,0) / (1·2) = -1 ; (1,0)·(3,4) / (1·5) = 0.6 ; zero row -> 0
    got = cosine_matrix(t([[1.0, 0], [0, 0]]), t([[-2.0, 0], [3.0, 4.0]]))
    assert got.shape == (2, 2)
    assert flat(got) == pytest.approx([-1, 0.6, 0, 0])


def test_info_nce_simcse_hand_value() -> None:
    rows = info_nce(anchors(), positives(), temperature=1.0, reduction="none")
    assert flat(rows) == pytest.approx([L1, L2, L3])
    assert info_nce(anchors(), positives(), 1.0).item() == pytest.approx(SIMCSE)
    assert info_nce(anchors(), positives(), 1.0, reduction="sum").item() == pytest.approx(
        L1 + L2 + L3
    )


def test_info_nce_temperature_half() -> None:
    # τ = 0.5 doubles every logit: row 1 = -2 + ln(e^2 + e^1.2 + 1) = -2 + ln 11.709173 = 0.460373
    expected = [
        -2 + log(exp(2) + exp(1.2) + 1),
        -1.6 + log(1 + exp(1.6) + exp(1.2)),  # -1.6 + ln 9.273149 = 0.627123
        1.6 + log(2 + exp(-1.6)),  # 1.6 + ln 2.201897 = 2.389319
    ]
    rows = info_nce(anchors(), positives(), temperature=0.5, reduction="none")
    assert flat(rows) == pytest.approx(expected)


def test_info_nce_negative_weights() -> None:
    w = torch.ones(3, 3, dtype=torch.float64)
    w[0, 1] = 0.0  # anchor 1 loses p2 (cos 0.6)
    w[2, 0] = 2.0  # anchor 3 counts p1 (cos 0) twice
    w[1, 1] = 0.0  # diagonal = the positive: ignored, always weight 1
    rows = info_nce(anchors(), positives(), 1.0, negative_weights=w, reduction="none")
    assert flat(rows) == pytest.approx(
        [
            -1 + log(E + 1),  # -1 + ln 3.718282 = 0.313262
            L2,  # unchanged
            0.8 + log(2 * 1 + 1 + exp(-0.8)),  # 0.8 + ln 3.449329 = 2.038180
        ]
    )


def test_zero_weight_removes_term_exactly() -> None:
    # Anchor 1 without p2 must equal a batch where p2's logit is gone: compare against the
    # shared-extra formulation of the same terms, and against the closed form.
    w = torch.ones(3, 3, dtype=torch.float64)
    w[0, 1] = 0.0
    weighted = info_nce(anchors(), positives(), 1.0, negative_weights=w, reduction="none")
    assert weighted[0].item() == pytest.approx(-1 + log(E + 1), rel=1e-15)
    # extra negatives: weight 0 on the second one == not passing it at all
    extra = t([[0, 0, 0, 5.0], [-1.0, 0, 0, 0]])
    with_zero = info_nce(
        anchors(), positives(), 1.0, extra_negatives=extra, extra_weights=t([1.0, 0.0])
    )
    without = info_nce(anchors(), positives(), 1.0, extra_negatives=extra[:1])
    assert with_zero.item() == pytest.approx(without.item(), rel=1e-15)


def test_info_nce_shared_extra_negatives() -> None:
    # n1 = e4 (cos 0 with every anchor), n2 = -e1 (cos -1 with a1, 0 with a2 and a3)
    extra = t([[0, 0, 0, 5.0], [-1.0, 0, 0, 0]])
    rows = info_nce(anchors(), positives(), 1.0, extra_negatives=extra, reduction="none")
    assert flat(rows) == pytest.approx(
        [
            -1 + log(E + exp(0.6) + 1 + 1 + exp(-1)),  # -1 + ln 6.908280 = 0.932721
            -0.8 + log(1 + exp(0.8) + exp(0.6) + 1 + 1),  # -0.8 + ln 7.047660 = 1.152696
            0.8 + log(1 + 1 + exp(-0.8) + 1 + 1),  # 0.8 + ln 4.449329 = 2.292753
        ]
    )
    # per-anchor / broadcast weights: [B, M] weights dropping n1 for anchor 2 only
    ew = t([[1.0, 1.0], [0.0, 1.0], [1.0, 1.0]])
    rows = info_nce(
        anchors(), positives(), 1.0, extra_negatives=extra, extra_weights=ew, reduction="none"
    )
    assert rows[1].item() == pytest.approx(-0.8 + log(1 + exp(0.8) + exp(0.6) + 1))


def test_info_nce_per_anchor_extra_negatives() -> None:
    # anchor i's own extra: cos(a1,(3,4,0,0)) = 0.6, cos(a2,e2) = 1, cos(a3,-e3) = -1
    own = t([[[3.0, 4.0, 0, 0]], [[0, 1.0, 0, 0]], [[0, 0, -1.0, 0]]])  # [B=3, m=1, d=4]
    rows = info_nce(anchors(), positives(), 1.0, extra_negatives=own, reduction="none")
    assert flat(rows) == pytest.approx(
        [
            -1 + log(E + exp(0.6) + 1 + exp(0.6)),  # -1 + ln 7.362520 = 0.996402
            -0.8 + log(1 + exp(0.8) + exp(0.6) + E),  # -0.8 + ln 7.765942 = 1.249748
            0.8 + log(1 + 1 + exp(-0.8) + exp(-1)),  # 0.8 + ln 2.817208 = 1.835746
        ]
    )


def test_info_nce_mixed_extra_sets_compose() -> None:
    # shared noise-like set + per-anchor set in ONE denominator (e.g. sscl+dclr)
    shared = t([[0, 0, 0, 5.0], [-1.0, 0, 0, 0]])
    own = t([[[3.0, 4.0, 0, 0]], [[0, 1.0, 0, 0]], [[0, 0, -1.0, 0]]])
    rows = info_nce(
        anchors(),
        positives(),
        1.0,
        extra_negatives=[shared, own],
        extra_weights=[t([1.0, 0.0]), None],  # drop -e1 from the shared set
        reduction="none",
    )
    assert flat(rows) == pytest.approx(
        [
            -1 + log(E + exp(0.6) + 1 + 1 + exp(0.6)),
            -0.8 + log(1 + exp(0.8) + exp(0.6) + 1 + E),
            0.8 + log(1 + 1 + exp(-0.8) + 1 + exp(-1)),
        ]
    )


def test_info_nce_is_stable_at_tiny_temperature() -> None:
    # logits up to 1/τ = 1000: row i = -1000 + ln(e^1000 + 2 e^0) = ln(1 + 2e^-1000) ≈ 0
    basis = torch.eye(3, dtype=torch.float64)
    loss = info_nce(basis, basis, temperature=1e-3)
    assert torch.isfinite(loss)
    assert loss.item() == pytest.approx(0.0, abs=1e-12)
    # and float32 with opposite vectors: logits -1000 everywhere but the diagonal
    a = torch.tensor([[1.0, 0.0], [-1.0, 0.0]])
    assert torch.isfinite(info_nce(a, a, temperature=1e-3))


def test_info_nce_gradients() -> None:
    a = anchors().requires_grad_(True)
    p = positives().requires_grad_(True)
    extra = t([[0, 0, 0, 5.0], [-1.0, 0, 0, 0]]).requires_grad_(True)
    loss = info_nce(a, p, 0.05, extra_negatives=extra, extra_weights=t([1.0, 0.0]))
    loss.backward()
    for g in (a.grad, p.grad, extra.grad):
        assert g is not None
        assert torch.isfinite(g).all()
    assert a.grad.abs().sum() > 0
    assert p.grad.abs().sum() > 0
    assert extra.grad[0].abs().sum() > 0  # e4 is orthogonal but still pushes the anchors
    assert torch.equal(extra.grad[1], torch.zeros(4, dtype=torch.float64))  # weight 0: no grad


def test_info_nce_rejects_bad_inputs() -> None:
    with pytest.raises(ValueError):
        info_nce(anchors(), positives()[:2], 1.0)
    with pytest.raises(ValueError):
        info_nce(anchors(), positives(), 0.0)
    with pytest.raises(ValueError):
        info_nce(anchors(), positives(), 1.0, negative_weights=-torch.ones(3, 3))
    with pytest.raises(ValueError):
        info_nce(anchors(), positives(), 1.0, extra_weights=torch.ones(2))
    with pytest.raises(ValueError):
        info_nce(anchors(), positives(), 1.0, extra_negatives=torch.ones(2, 3, 4))


def test_gather_with_grad_is_identity_without_distributed() -> None:
    x = anchors().requires_grad_(True)
    out = gather_with_grad(x)
    assert out is x
    (2 * out).sum().backward()
    assert torch.equal(x.grad, torch.full_like(x, 2.0))


def test_losses_run_in_fp32_under_autocast() -> None:
    """Under bf16 autocast the logits are still fp32 (cos/τ at τ = 0.05 needs the mantissa)."""
    generator = torch.Generator().manual_seed(0)
    anchors = torch.randn(6, 8, generator=generator)
    positives = anchors + 0.01 * torch.randn(6, 8, generator=generator)
    plain = info_nce(anchors, positives, 0.05)
    with torch.autocast("cpu", torch.bfloat16):
        inside = info_nce(anchors, positives, 0.05)
        from_bf16 = info_nce(anchors.bfloat16(), positives.bfloat16(), 0.05)
        similarities = cosine_matrix(anchors, positives)
    assert inside.dtype == from_bf16.dtype == similarities.dtype == torch.float32
    assert torch.equal(inside, plain)
    expected = info_nce(anchors.bfloat16().float(), positives.bfloat16().float(), 0.05)
    assert torch.equal(from_bf16, expected)
