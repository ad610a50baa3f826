"""Hand-computed checks of IS-CSE's maths (`sentemb.methods.iscse`): FIFO buffer, kNN and
K-means smoothing, smoothing loss, α schedule."""

from __future__ import annotations

import math

import pytest
import torch
from toy import E, anchors, exp, flat, log, t

from sentemb.methods.iscse import (
    alpha_schedule,
    fifo_enqueue,
    kmeans_aggregate,
    knn_aggregate,
    knn_indices,
    smoothing_loss,
    spherical_kmeans,
)

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
