"""What every refinement shares: the interface, the registry, the context it is built for."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from sentemb.evaluation.base import SentenceEncoder
from sentemb.phrases import IdfTable

Scalars = dict[str, float]  # a fit's numbers, saved as JSON
Tensors = dict[str, np.ndarray]  # a fit's arrays, saved as safetensors


@dataclass(frozen=True)
class Context:
    """What a refinement may need of the encoder it refines and the sentences' language."""

    mask_token: str | None  # of the encoder's tokenizer (None without one)
    chinese: bool
    idf: IdfTable | None  # the English IDF table (None for Chinese: jieba's own)


class Refinement(ABC):
    """A training-free refinement around an encoder, fitted once per scope (English, or one
    Chinese set): `fit` the corpus statistics, `tune` on a dev set, then `wrap` an encoder.

    A fit is whatever the subclass keeps (saved through `save`/`load` as JSON numbers and
    tensors); a statistic that is None is fitted on the sentences of each `encode` call.
    """

    name: ClassVar[str]
    keywords: ClassVar[bool] = False  # masks TF-IDF keywords: fitted with the English IDF table

    def __init__(self, config: Any, context: Context) -> None:
        """`config`: its params sub-section; `context`: the encoder and language it refines."""
        self.config = config

    @abstractmethod
    def fit(self, vectors: np.ndarray | None) -> tuple[Any, Scalars]:
        """The fit from the fitting sentences' vectors (None: fitted at each call), and what it
        reports."""

    def tune(
        self,
        fit: Any,
        encoder: SentenceEncoder,
        dev_score: Callable[[SentenceEncoder], float],
    ) -> tuple[Any, Scalars, list[Scalars]]:
        """The fit with its hyper-parameters chosen by `dev_score`, what it reports, and every
        candidate tried; a refinement without any keeps `fit`."""
        return fit, {}, []

    @abstractmethod
    def wrap(self, encoder: SentenceEncoder, fit: Any) -> SentenceEncoder:
        """`encoder` refined with `fit`."""

    @staticmethod
    @abstractmethod
    def save(fit: Any) -> tuple[Scalars, Tensors]:
        """`fit` as JSON numbers and tensors (each tensor's first axis is the vector width)."""

    @staticmethod
    @abstractmethod
    def load(scalars: Scalars, tensors: Tensors) -> Any:
        """The fit `save` wrote; a missing value is a KeyError."""


REFINEMENTS: dict[str, tuple[type[Refinement], type]] = {}


def register_refinement(name: str, config: type) -> Callable[[type[Refinement]], type[Refinement]]:
    """Class decorator: make a refinement available as `refine.methods: [<name>]`, with its
    params sub-section `refine.<name>` read into `config`."""

    def register(cls: type[Refinement]) -> type[Refinement]:
        cls.name = name
        REFINEMENTS[name] = (cls, config)
        return cls

    return register
