"""A toy encoder whose best refinement is known (`toy_dev`), and the refinements built for it,
for the RepAL and refinement-store tests."""

from __future__ import annotations

import numpy as np

from sentemb.data.readers import PairSet
from sentemb.identity import ModelIdentity
from sentemb.phrases import IdfTable
from sentemb.refine.base import Context, Refinement
from sentemb.refine.config import RefineConfig
from sentemb.refine.wrap import build

from support.encoders import TableEncoder

TOY = ModelIdentity("toy", "ab" * 32, "mean", 8)  # what toy_dev's encoder stands for
IDF = IdfTable({"cat": 2.0, "sat": 1.5, "mat": 3.0, "dog": 2.5}, documents=10)


class ToyMask:
    """Stands in for `PartialMask`: x* of sentence s is the sentence "s*"."""

    mask = "tri"

    def __call__(self, sentence: str) -> str:
        return sentence + "*"


def toy_dev(seed: int = 0, n: int = 40) -> tuple[TableEncoder, PairSet, list[str]]:
    """f(x) = u + c + t and f(x*) = t: the gold similarity is cos(u_a, u_b), so the best
    refinement removes the shared c (λ2 = 1) and then the trivial-word part t (λ1 = 1)."""
    rng = np.random.default_rng(seed)
    c = np.zeros(8)
    c[:4] = 5.0
    table, first, second, gold = {}, [], [], []
    for i in range(n):
        u_a, u_b = rng.normal(size=(2, 8))
        u_a[4:], u_b[4:] = 0.0, 0.0
        for name, u in ((f"a{i}", u_a), (f"b{i}", u_b)):
            t = np.zeros(8)
            t[4:] = rng.normal(size=4)
            table[name], table[name + "*"] = u + c + t, t
        first.append(f"a{i}")
        second.append(f"b{i}")
        gold.append(float(u_a @ u_b / np.linalg.norm(u_a) / np.linalg.norm(u_b)))
    fit = [f"f{i}" for i in range(16)]  # a fitting corpus whose mean is exactly c
    for i, name in enumerate(fit):
        table[name] = c + (-1.0) ** i * np.eye(8)[i // 2]
    return TableEncoder(table, dtype=None), PairSet(first, second, gold), fit


def toy_parts(config: RefineConfig) -> dict[str, Refinement]:
    """The refinements of `config` for the toy encoder; RepAL's sentence level masks with
    `ToyMask`."""
    parts = build(config, Context("[MASK]", False, IDF))
    if "repal" in parts and parts["repal"].mask is not None:
        parts["repal"].mask = ToyMask()
    return parts
