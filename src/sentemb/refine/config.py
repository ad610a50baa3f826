"""Params section `refine`: the keys every refinement shares, then one sub-section per
registered refinement (`refine.repal`, `refine.whitening`), each read into the config class it
registered."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Annotated

from sentemb.config import Count, Range, Seed
from sentemb.registry import REFINEMENTS, SUITES

FIT_ON = ("corpus", "eval")
AtLeastTwo = Annotated[int, Range(2)]  # a fit needs two vectors


@dataclass
class SharedRefineConfig:
    """The keys of params section `refine` that every refinement shares."""

    methods: list[str] = field(default_factory=lambda: list(REFINEMENTS))
    fit_on: str = "corpus"  # v̂ and the whitening kernel: training corpus | evaluation sentences
    corpus_size: AtLeastTwo | None = 100_000  # first sentences of the corpus for `fit_on: corpus`
    suites: list[str] = field(default_factory=lambda: list(SUITES.names()))  # scored refined
    pairs: Count = 10_000  # random pairs for the mean-cosine diagnostic
    seed: Seed = 0
    valid_pairs: AtLeastTwo | None = None  # a fixed sample of each Chinese valid split

    def validate(self) -> list[str]:
        problems = []
        unknown = [name for name in self.methods if name not in REFINEMENTS]
        if unknown:
            problems.append(f"methods: unknown {unknown}; the refinements are {list(REFINEMENTS)}")
        if self.fit_on not in FIT_ON:
            problems.append(f"fit_on: {self.fit_on!r} is not one of {list(FIT_ON)}")
        if set(self.suites) - set(SUITES.names()):
            problems.append(f"suites: {self.suites} must be a subset of {list(SUITES.names())}")
        return problems


RefineConfig = dataclasses.make_dataclass(
    "RefineConfig",
    [(name, e.config, field(default_factory=e.config)) for name, e in REFINEMENTS.items()],
    bases=(SharedRefineConfig,),
    namespace={"__module__": __name__, "__doc__": "Params section `refine`."},
)
