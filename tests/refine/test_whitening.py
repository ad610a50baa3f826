"""Whitening on toy vectors: the fitting corpus's covariance becomes the identity."""

from __future__ import annotations

import logging

import numpy as np
import pytest

from sentemb.config import ConfigError
from sentemb.refine.whitening import Whitening


def test_whitening_makes_the_fitting_covariance_the_identity() -> None:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(500, 6)) @ rng.normal(size=(6, 6)) + 3.0
    white = Whitening.fit(x).transform(x)
    np.testing.assert_allclose(white.mean(axis=0), 0.0, atol=1e-4)
    np.testing.assert_allclose(np.cov(white, rowvar=False, bias=True), np.eye(6), atol=1e-4)
    cut = Whitening.fit(x, dim=3).transform(x)
    np.testing.assert_allclose(np.cov(cut, rowvar=False, bias=True), np.eye(3), atol=1e-4)
    flat = Whitening.fit(x[:3])  # 3 points span 2 directions: the zero-variance ones are dropped
    assert flat.kernel.shape == (6, 2)
    np.testing.assert_allclose(
        np.cov(flat.transform(x[:3]), rowvar=False, bias=True), np.eye(2), atol=1e-6
    )
    with pytest.raises(ConfigError, match="all equal"):
        Whitening.fit(np.ones((4, 6)))
    for rows in (0, 1):  # a fit on the sentences of an empty call ended in numpy's SVD error
        with pytest.raises(ConfigError, match=f"2 or more vectors, got {rows}"):
            Whitening.fit(x[:rows])
    for dim in (7, 10_000):  # more dimensions than the vectors have kept all 6 silently
        with pytest.raises(ConfigError, match=rf"^refine.whitening.dim: {dim} is more than the 6"):
            Whitening.fit(x, dim=dim)


@pytest.mark.parametrize(
    ("rows", "dim", "warned"),
    [
        (500, None, None),
        (500, 3, None),
        (4, 3, None),
        (
            4,
            5,
            "4 fitting vectors span at most 3 of the 5 dimensions asked for, so the kernel keeps 3",
        ),
        (
            3,
            None,
            "3 fitting vectors span at most 2 of the 6 dimensions asked for, so the kernel keeps 2",
        ),
        (
            3,
            3,
            "3 fitting vectors span at most 2 of the 3 dimensions asked for, so the kernel keeps 2",
        ),
    ],
)
def test_a_fit_on_too_few_vectors_says_how_many_dimensions_it_keeps(
    caplog: pytest.LogCaptureFixture, rows: int, dim: int | None, warned: str | None
) -> None:
    """`refine.valid_pairs: 2` fits each Chinese set on 4 sentences: the kernel keeps at most 3
    dimensions, said once, with the params that give it more; a fit with enough vectors is
    silent."""
    x = np.random.default_rng(1).normal(size=(rows, 6))
    with caplog.at_level(logging.WARNING, logger="sentemb.refine.whitening"):
        kernel = Whitening.fit(x, dim).kernel
    messages = [record.getMessage() for record in caplog.records]
    assert kernel.shape[1] == min(rows - 1, dim or 6)
    if warned is None:
        assert messages == []
    else:
        assert len(messages) == 1 and warned in messages[0] and "refine.valid_pairs" in messages[0]


def test_vectors_flat_in_some_directions_fit_without_a_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Enough vectors that span fewer dimensions than they have (MiniLM's 11,549 corpus vectors
    span 381 of 384): the kernel keeps those, `whitening/dims` records it, and no warning asks
    for more sentences, which would not help."""
    rng = np.random.default_rng(1)
    flat = rng.normal(size=(500, 4)) @ rng.normal(size=(4, 6))
    with caplog.at_level(logging.WARNING, logger="sentemb.refine.whitening"):
        assert Whitening.fit(flat).kernel.shape == (6, 4)
    assert caplog.records == []
