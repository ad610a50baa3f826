"""What every refinement shares: the interface and the context it is built for; a refinement
registers itself with `sentemb.registry.register_refinement` (its name is `refine.methods`' and
its params sub-section's, `refine.<name>`)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from sentemb.config import UserError
from sentemb.evaluation.base import SentenceEncoder
from sentemb.phrases import IdfTable

Scalars = dict[str, float]  # a fit's numbers, saved as JSON
Tensors = dict[str, np.ndarray]  # a fit's arrays, saved as safetensors
ENGLISH, CHINESE = "english", "chinese"  # the encoders a refinement is fitted around
ENGLISH_SCOPE = ENGLISH
CHINESE_SCOPE = f"{CHINESE}/"  # + the set's name: Chinese fits are per set
Fitted = dict[str, Any]  # one scope's fits: refinement name -> what it fitted


class RefinementMismatch(UserError, ValueError):
    """A saved refinement does not belong to the model (or the sets) it is applied to."""


@dataclass(frozen=True)
class Curve:
    """A figure of a refinement on STS-B dev: its `points` (written as `<name>.json`) and two of
    their keys, `left` and `right`, against a third, `x`, each a (key, label) pair, drawn by
    `report.plots.dev_curve` as `<name>.png` under `title` and the model's name."""

    name: str
    title: str
    points: list[Scalars]
    x: tuple[str, str]
    left: tuple[str, str, str]  # key, legend, axis label
    right: tuple[str, str, str]


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
    label: ClassVar[str]  # how reports name it ("simcse + RepAL")
    figures: ClassVar[tuple[str, ...]] = ()  # the names of its `curves`
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

    @classmethod
    def curves(
        cls, config: Any | None, vectors: np.ndarray, tried: list[Scalars], dev_none: float
    ) -> tuple[Scalars, list[Curve]]:
        """Its `figures` from the English dev sentences' `vectors`, the candidates `tune` tried
        and the unrefined dev score, with what they report; drawn whether it was fitted or not
        (`config` None: not in `refine.methods`), as the pipeline expects the files."""
        return {}, []
