"""Statistics of one experiment over its seeds (stage `summary`, the leaderboard): mean ±
sample standard deviation, and the STS-B cosine density by gold-score bin; the `compare`
params of the paired tests (`sentemb.review.paired`).
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Annotated

import numpy as np

from sentemb.config import NonNegative, Range, Seed


@dataclass
class CompareConfig:
    """Params section `compare`."""

    resamples: Annotated[int, Range(1, 100_000, why="more only costs time")] = 1000
    confidence: Annotated[float, Range(0, 1, open_low=True, open_high=True)] = 0.95
    seed: Seed = 0
    # gold-score bin edges of the STS-B cosine density plot
    bins: list[Annotated[float, Range(0, 5)]] = field(
        default_factory=lambda: [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]
    )
    noise: NonNegative = 0.07  # score points; docs/protocol.md: which results are bit-identical

    def validate(self) -> list[str]:
        problems = []
        if len(self.bins) < 2 or any(b >= c for b, c in itertools.pairwise(self.bins)):
            problems.append(f"bins: must be at least 2 increasing edges, got {self.bins}")
        return problems


def mean_std(values: Sequence[float]) -> dict[str, float]:
    """Mean and sample standard deviation (ddof 1; 0 for a single value) and the count."""
    array = np.asarray(values, dtype=np.float64)
    std = float(array.std(ddof=1)) if len(array) > 1 else 0.0
    return {"mean": float(array.mean()), "std": std, "n": len(array)}


def density_bins(
    predicted: list[np.ndarray], gold: np.ndarray, edges: list[float]
) -> dict[str, np.ndarray]:
    """The pair cosines of all seeds pooled, per gold-score bin `[edge_i, edge_i+1)`; values
    below the second edge fall in the first bin and values from the last inner edge on in the
    last (PaSeR App. C's five levels of STS-B with `edges` 0..5)."""
    cosines = np.concatenate(predicted)
    index = np.digitize(np.tile(gold, len(predicted)), edges[1:-1])
    labels = [f"{low:g}-{high:g}" for low, high in itertools.pairwise(edges)]
    return {label: cosines[index == i] for i, label in enumerate(labels)}
