"""Toy encoders: anything with `encode(sentences, batch_size) -> vectors` plugs into the
evaluators, refinements and caches, so these stand in for a model with vectors chosen by hand."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import scipy.sparse as sp


class TableEncoder:
    """Looks each sentence up in `table` (`default(sentence)` for one not in it), as a `dtype`
    array (None: the table's own), dense or CSR (`sparse`); records every call in `calls`."""

    def __init__(
        self,
        table: dict[str, Sequence[float] | np.ndarray] | None = None,
        *,
        default: Callable[[str], Sequence[float]] | None = None,
        dtype: type | None = np.float32,
        sparse: bool = False,
        width: int = 2,
    ) -> None:
        self.table, self.default, self.dtype, self.sparse = table or {}, default, dtype, sparse
        self.width = width  # of an empty call's (0, width) array
        self.calls: list[list[str]] = []

    @property
    def seen(self) -> list[str]:
        """Every sentence encoded, in order, over all calls."""
        return [sentence for call in self.calls for sentence in call]

    def encode(self, sentences: Sequence[str], batch_size: int = 128) -> np.ndarray | sp.csr_array:
        self.calls.append(list(sentences))
        rows = [
            self.table[s] if self.default is None or s in self.table else self.default(s)
            for s in sentences
        ]
        vectors = (
            np.array(rows, dtype=self.dtype) if rows else np.zeros((0, self.width), self.dtype)
        )
        return sp.csr_array(vectors) if self.sparse else vectors


def by_length(sentence: str) -> list[float]:
    """A vector of its length: distinct sentences of distinct lengths get distinct vectors."""
    return [1.0, float(len(sentence))]


class CountingEncoder(TableEncoder):
    """A `TableEncoder` whose vectors default to `by_length`, for counting what gets encoded."""

    def __init__(self, table: dict[str, np.ndarray] | None = None) -> None:
        super().__init__(table, default=by_length)


class HashEncoder:
    """A fixed random 8-dim vector per text (seeded by the text), for metric checks."""

    def encode(self, sentences: Sequence[str], batch_size: int = 128) -> np.ndarray:
        return np.stack(
            [np.random.default_rng(abs(hash(s)) % 2**32).normal(size=8) for s in sentences]
        ).astype(np.float32)
