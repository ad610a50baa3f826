"""Hand-computed checks of DCLR's maths (`sentemb.methods.dclr`): noise negatives,
non-uniformity ascent, complementary weights, the debiased loss (eq. 6) and its composition
with SSCL, on the toy batch of `toy`."""

from __future__ import annotations

import math

import pytest
import torch
from toy import MID, E, anchors, exp, flat, log, positives, t

from sentemb.methods.dclr import (
    complementary_weights,
    noise_negatives,
    non_uniformity_ascent,
    non_uniformity_loss,
)
from sentemb.methods.functional import cosine_matrix, info_nce
from sentemb.methods.sscl import sscl_negatives


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
