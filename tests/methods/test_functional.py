"""Hand-computed checks of `sentemb.methods.functional` (SimCSE, SSCL, IS-CSE, DCLR maths).

Most tests share one toy batch, B = 3 sentences in d = 4, built so every cosine is 0, ±1, ±0.6 or
±0.8 (rows deliberately not unit-length, to exercise the normalisation):

    anchors   a1 = (2,0,0,0)  a2 = (0,3,0,0)  a3 = (0,0,0.5,0)      -> e1, e2, e3
    positives p1 = (1,0,0,0)  p2 = (3,4,0,0)  p3 = (0,3,-4,0)      -> (1,0,0,0), (.6,.8,0,0),
                                                                        (0,.6,-.8,0)
    S = cos(a_i, p_j) = [[1, 0.6,  0  ],
                         [0, 0.8,  0.6],
                         [0, 0,   -0.8]]

With τ = 1 the SimCSE loss of row i is ``-S_ii + ln Σ_j e^{S_ij}``; the expected values are
written as that arithmetic with `math`, with the decimals in comments (e^0.6 = 1.822119,
e^0.8 = 2.225541, e^-0.8 = 0.449329, e^-1 = 0.367879, e = 2.718282).
"""

from __future__ import annotations

import math

import pytest
import torch

from sentemb.methods.functional import (
    alpha_schedule,
    complementary_weights,
    cosine_matrix,
    fifo_enqueue,
    gather_with_grad,
    info_nce,
    kmeans_aggregate,
    knn_aggregate,
    knn_indices,
    noise_negatives,
    non_uniformity_ascent,
    non_uniformity_loss,
    smoothing_loss,
    spherical_kmeans,
    sscl_negatives,
)

E = math.e
exp = math.exp
log = math.log


def t(rows: list) -> torch.Tensor:
    return torch.tensor(rows, dtype=torch.float64)


def flat(x: torch.Tensor) -> list[float]:
    return x.detach().reshape(-1).tolist()


def anchors() -> torch.Tensor:
    return t([[2.0, 0, 0, 0], [0, 3.0, 0, 0], [0, 0, 0.5, 0]])


def positives() -> torch.Tensor:
    return t([[1.0, 0, 0, 0], [3.0, 4.0, 0, 0], [0, 3.0, -4.0, 0]])


# Plain SimCSE rows at τ = 1 (see the module docstring):
L1 = -1 + log(E + exp(0.6) + 1)  # -1 + ln 5.540401 = 0.712067
L2 = -0.8 + log(1 + exp(0.8) + exp(0.6))  # -0.8 + ln 5.047660 = 0.818925
L3 = 0.8 + log(1 + 1 + exp(-0.8))  # 0.8 + ln 2.449329 = 1.695814
SIMCSE = (L1 + L2 + L3) / 3  # 1.075602


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


# ------------------------------------------------------------------------------------------
# SSCL
# ------------------------------------------------------------------------------------------

# pooled intermediate-layer vectors of the 3 sentences: (3,4,0,0), e2, -e3
MID = [[3.0, 4.0, 0, 0], [0, 1.0, 0, 0], [0, 0, -1.0, 0]]


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


# ------------------------------------------------------------------------------------------
# IS-CSE
# ------------------------------------------------------------------------------------------

# buffer rows (unit): b0 = (1,0), b1 = (.8,.6), b2 = (0,1), b3 = (-1,0), b4 = (.6,-.8)
BUFFER = [[1.0, 0], [0.8, 0.6], [0, 1.0], [-1.0, 0], [0.6, -0.8]]
# q1 = (2,0) -> cos with b0..b4 = [1, .8, 0, -1, .6]
# q2 = (-3,4) -> (-.6,.8): cos = [-.6, 0, .8, .6, -1]
QUERIES = [[2.0, 0], [-3.0, 4.0]]


def test_fifo_enqueue() -> None:
    buffer = torch.zeros(4, 2, dtype=torch.float64)
    incoming = t([[3.0, 4.0], [0, 2.0]]).requires_grad_(True)
    buffer = fifo_enqueue(buffer, incoming)
    assert flat(buffer) == pytest.approx([0, 0, 0, 0, 0.6, 0.8, 0, 1])
    assert not buffer.requires_grad  # sg{...}
    buffer = fifo_enqueue(buffer, t([[-5.0, 0]]))
    assert flat(buffer) == pytest.approx([0, 0, 0.6, 0.8, 0, 1, -1, 0])
    big = fifo_enqueue(buffer, t([[1.0, 0]] * 3 + [[0, 1.0]] * 3))
    assert flat(big) == pytest.approx([1, 0, 0, 1, 0, 1, 0, 1])


def test_knn_picks_known_neighbours() -> None:
    idx = knn_indices(t(QUERIES), t(BUFFER), k=2)
    assert idx.tolist() == [[0, 1], [2, 3]]
    # skip_top=1 (released code: the buffer already holds the query itself)
    idx = knn_indices(t(QUERIES), t(BUFFER), k=2, skip_top=1)
    assert idx.tolist() == [[1, 4], [3, 1]]
    with pytest.raises(ValueError):
        knn_indices(t(QUERIES), t(BUFFER), k=5, skip_top=1)


def test_knn_aggregate_hand_value() -> None:
    out = knn_aggregate(t(QUERIES), t(BUFFER), k=2, beta=1.0)
    # q1: K = [(1,0), b0=(1,0), b1=(.8,.6)], scores [1, 1, .8], Z = 2e + e^.8 = 7.662105
    z1 = 2 * E + exp(0.8)
    q1 = [(2 * E + 0.8 * exp(0.8)) / z1, 0.6 * exp(0.8) / z1]  # (0.941908, 0.174276)
    # q2: K = [(-.6,.8), b2=(0,1), b3=(-1,0)], scores [1, .8, .6], Z = e + e^.8 + e^.6 = 6.765942
    z2 = E + exp(0.8) + exp(0.6)
    q2 = [
        (-0.6 * E - exp(0.6)) / z2,  # -0.510363
        (0.8 * E + exp(0.8)) / z2,  # 0.650341
    ]
    assert flat(out) == pytest.approx(q1 + q2)


def test_knn_aggregate_beta_divides_scores() -> None:
    # β = 2 halves the scores of q1: [.5, .5, .4], Z = 2e^.5 + e^.4 = 4.789268
    out = knn_aggregate(t(QUERIES[:1]), t(BUFFER), k=2, beta=2.0)
    z = 2 * exp(0.5) + exp(0.4)
    assert flat(out) == pytest.approx(
        [(2 * exp(0.5) + 0.8 * exp(0.4)) / z, 0.6 * exp(0.4) / z]  # (0.937701, 0.186896)
    )
    # k = 0: only the (normalised) query itself
    assert flat(knn_aggregate(t(QUERIES), t(BUFFER), k=0, beta=2.0)) == pytest.approx(
        [1, 0, -0.6, 0.8]
    )


def test_knn_aggregate_gradient_reaches_query_not_buffer() -> None:
    q = t(QUERIES).requires_grad_(True)
    buffer = t(BUFFER).requires_grad_(True)
    knn_aggregate(q, buffer, k=2, beta=2.0)[:, 1].sum().backward()
    assert q.grad is not None and q.grad.abs().sum() > 0
    assert buffer.grad is None


# two clean clusters: around (1,0) and around (0,1); their normalised means are exactly e1, e2
CLUSTERS = [[1.0, 0], [0.8, 0.6], [0.8, -0.6], [0, 1.0], [0.6, 0.8], [-0.6, 0.8]]


def test_spherical_kmeans_hand_value() -> None:
    # init at points 0 and 3; cluster A = {0,1,2} mean (2.6/3, 0) -> (1,0); B -> (0,1); stable
    result = spherical_kmeans(t(CLUSTERS), 2, iterations=5, init_indices=torch.tensor([0, 3]))
    assert flat(result.centers) == pytest.approx([1, 0, 0, 1])
    assert result.assignments.tolist() == [0, 0, 0, 1, 1, 1]
    with pytest.raises(ValueError):
        spherical_kmeans(t(CLUSTERS), 2)  # neither generator nor init_indices


def test_kmeans_aggregate_hand_value() -> None:
    # (4,3) -> (.8,.6): nearest centre (1,0) (cos .8 > .6): .5(.8,.6) + .5(1,0) = (.9,.3)
    # (-3,4) -> (-.6,.8): nearest centre (0,1) (cos .8 > -.6): .5(-.6,.8) + .5(0,1) = (-.3,.9)
    q = t([[4.0, 3.0], [-3.0, 4.0]]).requires_grad_(True)
    buffer = t(CLUSTERS).requires_grad_(True)
    out = kmeans_aggregate(q, buffer, 2, gamma=0.5, init_indices=torch.tensor([0, 3]))
    assert flat(out) == pytest.approx([0.9, 0.3, -0.3, 0.9])
    out.sum().backward()
    assert q.grad is not None and q.grad.abs().sum() > 0
    assert buffer.grad is None
    # γ = 1: the normalised query; γ = 0: the centre
    one = kmeans_aggregate(q, buffer, 2, gamma=1.0, init_indices=torch.tensor([0, 3]))
    assert flat(one) == pytest.approx([0.8, 0.6, -0.6, 0.8])
    zero = kmeans_aggregate(q, buffer, 2, gamma=0.0, init_indices=torch.tensor([0, 3]))
    assert flat(zero) == pytest.approx([1, 0, 0, 1])


def test_kmeans_is_deterministic_given_generator() -> None:
    points = torch.randn(40, 4, generator=torch.Generator().manual_seed(3))
    runs = [
        spherical_kmeans(points, 4, iterations=5, generator=torch.Generator().manual_seed(7))
        for _ in range(2)
    ]
    assert torch.equal(runs[0].centers, runs[1].centers)
    assert torch.equal(runs[0].assignments, runs[1].assignments)


def test_smoothing_loss_hand_value() -> None:
    # smoothed positives = the anchors' own directions e1, e2, e3: S = I,
    # every row = -1 + ln(e + 1 + 1) = -1 + ln 4.718282 = 0.551445
    smooth = smoothing_loss(anchors(), t([[1.0, 0, 0, 0], [0, 1.0, 0, 0], [0, 0, 1.0, 0]]), 1.0)
    assert smooth.item() == pytest.approx(-1 + log(E + 2))


def test_smoothing_loss_through_knn_has_gradient() -> None:
    h = torch.randn(3, 4, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    h_pos = (h + 0.1).requires_grad_(True)
    h = h.requires_grad_(True)
    buffer = fifo_enqueue(torch.zeros(8, 4, dtype=torch.float64), torch.randn(8, 4).double())
    loss = smoothing_loss(h, knn_aggregate(h_pos, buffer, k=2, beta=2.0), 0.05)
    loss.backward()
    assert h.grad.abs().sum() > 0 and h_pos.grad.abs().sum() > 0


def test_alpha_schedule() -> None:
    assert alpha_schedule(123, 1000, "constant", alpha=0.1) == 0.1
    cos = {
        s: alpha_schedule(s, 1000, "cosine", alpha_start=0.005, alpha_end=0.05)
        for s in range(0, 1001, 250)
    }
    assert cos[0] == pytest.approx(0.005)  # min{cos 0 · (-0.045), 0} + 0.05
    assert cos[250] == pytest.approx(0.05 - 0.045 * math.cos(math.pi / 4))  # 0.018180
    assert cos[500] == pytest.approx(0.05)  # cos(π/2) = 0
    assert cos[750] == pytest.approx(0.05)  # cos(3π/4)·(-0.045) > 0, the min clips to 0
    assert cos[1000] == pytest.approx(0.05)
    assert alpha_schedule(5000, 1000, "cosine") == pytest.approx(0.05)  # clamped
    values = [alpha_schedule(s, 100, "cosine") for s in range(101)]
    assert values == sorted(values)  # non-decreasing
    with pytest.raises(ValueError):
        alpha_schedule(0, 100, "cosine", alpha_start=0.05, alpha_end=0.005)
    with pytest.raises(ValueError):
        alpha_schedule(0, 0, "cosine")
    with pytest.raises(ValueError):
        alpha_schedule(0, 100, "linear")  # type: ignore[arg-type]


# ------------------------------------------------------------------------------------------
# DCLR
# ------------------------------------------------------------------------------------------


def test_noise_negatives_shape_scale_and_determinism() -> None:
    assert noise_negatives(3, 4, ratio=1.0).shape == (3, 4)
    assert noise_negatives(4, 4, ratio=0.5).shape == (2, 4)
    assert noise_negatives(4, 4, ratio=0.0).shape == (0, 4)
    a = noise_negatives(3, 4, generator=torch.Generator().manual_seed(0))
    b = noise_negatives(3, 4, generator=torch.Generator().manual_seed(0))
    c = noise_negatives(3, 4, generator=torch.Generator().manual_seed(1))
    assert torch.equal(a, b)
    assert not torch.equal(a, c)
    doubled = noise_negatives(3, 4, sigma=2.0, generator=torch.Generator().manual_seed(0))
    assert torch.equal(doubled, 2 * a)
    big = noise_negatives(500, 64, sigma=1.0, generator=torch.Generator().manual_seed(0))
    assert big.std().item() == pytest.approx(1.0, abs=0.03)
    assert big.mean().item() == pytest.approx(0.0, abs=0.03)


def test_non_uniformity_loss_hand_value() -> None:
    a, p, noise = t([[1.0, 0]]), t([[1.0, 0]]), t([[1.0, 0], [0, 1.0]])
    # -1/τ + ln(e^{1/τ} + e^0):  τ=1 -> -1 + ln 3.718282 = 0.313262
    assert non_uniformity_loss(a, p, noise, 1.0).item() == pytest.approx(-1 + log(E + 1))
    # τ=0.5 -> -2 + ln(e^2 + 1) = 0.126928
    assert non_uniformity_loss(a, p, noise, 0.5).item() == pytest.approx(-2 + log(exp(2) + 1))


def test_non_uniformity_ascent_hand_steps() -> None:
    anchor, noise = t([[1.0, 0]]), t([[0, 1.0]])
    # step 1: ∇_n cos(a, n) = a/(|a||n|) - cos·n/|n|² = (1,0) - 0 = (1,0), unit already;
    #         n <- (0,1) + 0.5·(1,0) = (0.5, 1)
    one = non_uniformity_ascent(noise, anchor, steps=1, step_size=0.5, temperature=1.0)
    assert flat(one) == pytest.approx([0.5, 1.0])
    # step 2: |n| = √1.25, cos = 0.5/√1.25 = 0.447214,
    #         ∇ = (1,0)/√1.25 - 0.447214·(0.5,1)/1.25 = (0.715542, -0.357771), norm 0.8
    #         -> unit (2/√5, -1/√5) = (0.894427, -0.447214); n <- (0.5,1) + 0.5·that
    two = non_uniformity_ascent(noise, anchor, steps=2, step_size=0.5, temperature=1.0)
    assert flat(two) == pytest.approx([0.5 + 1 / math.sqrt(5), 1 - 0.5 / math.sqrt(5)])
    # Π = projection on the unit ball: (0.5, 1)/√1.25 = (0.447214, 0.894427)
    proj = non_uniformity_ascent(
        noise, anchor, steps=1, step_size=0.5, temperature=1.0, max_norm=1.0
    )
    assert flat(proj) == pytest.approx([0.5 / math.sqrt(1.25), 1 / math.sqrt(1.25)])
    zero = non_uniformity_ascent(noise, anchor, steps=0, step_size=0.5, temperature=1.0)
    assert torch.equal(zero, noise)


def test_non_uniformity_ascent_increases_objective_and_stops_gradients() -> None:
    gen = torch.Generator().manual_seed(0)
    a = torch.randn(3, 4, generator=gen, dtype=torch.float64).requires_grad_(True)
    p = a.detach() + 0.1 * torch.randn(3, 4, generator=gen, dtype=torch.float64)
    noise = noise_negatives(3, 4, generator=gen, dtype=torch.float64)
    before = non_uniformity_loss(a.detach(), p, noise, 0.05).item()
    moved = non_uniformity_ascent(noise, a, steps=4, step_size=0.1, temperature=0.05)
    after = non_uniformity_loss(a.detach(), p, moved, 0.05).item()
    assert after > before
    assert not moved.requires_grad
    assert a.grad is None  # anchors were detached during the ascent
    # deterministic and pure: same result twice, input untouched
    again = non_uniformity_ascent(noise, a, steps=4, step_size=0.1, temperature=0.05)
    assert torch.equal(moved, again)
    assert not torch.equal(moved, noise)
    # works inside no_grad too
    with torch.no_grad():
        inside = non_uniformity_ascent(noise, a, steps=4, step_size=0.1, temperature=0.05)
    assert torch.equal(inside, moved)


def test_complementary_weights_hand_value() -> None:
    comp = t([[1.0, 0.95, 0.2], [0.95, 1.0, 0.9], [0.2, 0.89, 1.0]])
    weights, share = complementary_weights(comp, phi=0.9)
    # ≥ 0.9 off the diagonal -> 0 (0.95, 0.95, 0.9); 0.89 and 0.2 kept; diagonal always 1
    assert weights.tolist() == [[1, 0, 1], [0, 1, 0], [1, 1, 1]]
    assert share.item() == pytest.approx(3 / 6)
    assert complementary_weights(t([[1.0]]), 0.9).zeroed_share.item() == 0.0


def dclr_eq6(a, p, noise, comp, phi: float, temperature: float, reduction: str = "mean"):
    """DCLR eq. 6 as the method composes it: noise as extra negatives, eq. 5 weights."""
    weights = complementary_weights(comp, phi).weights
    return info_nce(
        a, p, temperature, extra_negatives=noise, negative_weights=weights, reduction=reduction
    )


def test_dclr_eq6_hand_value() -> None:
    noise = t([[0, 0, 0, 5.0], [-1.0, 0, 0, 0]])  # cos 0 with all; cos -1 with a1, 0 otherwise
    comp = t([[1.0, 0.95, 0.2], [0.95, 1.0, 0.9], [0.2, 0.89, 1.0]])  # weights as above
    rows = dclr_eq6(anchors(), positives(), noise, comp, 0.9, 1.0, reduction="none")
    assert flat(rows) == pytest.approx(
        [
            -1 + log(E + 1 + 1 + exp(-1)),  # p2 dropped: -1 + ln 5.086161 = 0.626523
            -0.8 + log(exp(0.8) + 1 + 1),  # p1, p3 dropped: -0.8 + ln 4.225541 = 0.641147
            0.8 + log(1 + 1 + exp(-0.8) + 1 + 1),  # nothing dropped: 2.292753
        ]
    )


def test_dclr_gradients_reach_encoder_outputs_not_noise() -> None:
    gen = torch.Generator().manual_seed(1)
    a = torch.randn(3, 4, generator=gen, dtype=torch.float64).requires_grad_(True)
    p = torch.randn(3, 4, generator=gen, dtype=torch.float64).requires_grad_(True)
    raw = noise_negatives(3, 4, generator=gen, dtype=torch.float64).requires_grad_(True)
    moved = non_uniformity_ascent(raw, a, steps=2, step_size=0.1, temperature=0.05)
    comp = cosine_matrix(a.detach(), a.detach())
    dclr_eq6(a, p, moved, comp, 0.9, 0.05).backward()
    assert a.grad.abs().sum() > 0 and p.grad.abs().sum() > 0
    assert raw.grad is None and moved.grad is None


def test_sscl_plus_dclr_in_one_denominator() -> None:
    noise = t([[0, 0, 0, 5.0], [-1.0, 0, 0, 0]])
    comp = t([[1.0, 0.95, 0.2], [0.95, 1.0, 0.9], [0.2, 0.89, 1.0]])
    weights, _ = complementary_weights(comp, 0.9)
    rows = info_nce(
        anchors(),
        positives(),
        1.0,
        extra_negatives=[noise, sscl_negatives([t(MID)], "self")],
        negative_weights=weights,
        reduction="none",
    )
    assert flat(rows) == pytest.approx(
        [
            -1 + log(E + 1 + 1 + exp(-1) + exp(0.6)),
            -0.8 + log(exp(0.8) + 1 + 1 + E),
            0.8 + log(1 + 1 + exp(-0.8) + 1 + 1 + exp(-1)),
        ]
    )


def test_seeded_dclr_step_is_deterministic() -> None:
    def run(seed: int) -> torch.Tensor:
        gen = torch.Generator().manual_seed(seed)
        a = torch.randn(4, 8, generator=gen)
        p = a + 0.05 * torch.randn(4, 8, generator=gen)
        noise = non_uniformity_ascent(
            noise_negatives(4, 8, generator=gen), a, steps=4, step_size=1e-3, temperature=0.05
        )
        return dclr_eq6(a, p, noise, cosine_matrix(a, a), 0.9, 0.05)

    assert torch.equal(run(0), run(0))
    assert not torch.equal(run(0), run(1))


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
