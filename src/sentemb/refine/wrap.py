"""Refined encoders: each refinement of `refine.methods` built for an encoder and wrapped
around it with its fits (English, or per Chinese set)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from sentemb.evaluation.base import SentenceEncoder
from sentemb.phrases import IdfTable
from sentemb.refine.base import (
    CHINESE_SCOPE,
    ENGLISH_SCOPE,
    Context,
    Fitted,
    Refinement,
    RefinementMismatch,
)
from sentemb.refine.config import SharedRefineConfig
from sentemb.registry import REFINEMENTS


def build(config: SharedRefineConfig, context: Context) -> dict[str, Refinement]:
    """Each of `config.methods`, with its sub-section of `config`, for encoders of `context`."""
    return {name: REFINEMENTS[name].cls(getattr(config, name), context) for name in config.methods}


class PerSetEncoder:
    """A refined encoder per dataset (Chinese fits are per set); see `for_set`."""

    def __init__(self, encoders: Mapping[str, SentenceEncoder]) -> None:
        self.encoders = dict(encoders)

    def for_set(self, name: str) -> SentenceEncoder:
        if name not in self.encoders:
            raise RefinementMismatch(
                f"no refinement was fitted for the Chinese set {name} (fitted: "
                f"{sorted(self.encoders)}); re-run the refine stage with the same "
                "eval.chinese.tasks and eval.retrieval.offline_sets"
            )
        return self.encoders[name]

    def encode(self, sentences: Sequence[str], batch_size: int = 128) -> np.ndarray:
        raise TypeError("a per-set refinement encodes through for_set(dataset)")


def refinements(
    config: SharedRefineConfig,
    fitted: Mapping[str, Fitted],
    idf: IdfTable | None,
    encoder: SentenceEncoder,
    mask_token: str | None,
    chinese: bool,
) -> dict[str, SentenceEncoder]:
    """Each of `config.methods` around `encoder`, from the fits of English or the Chinese sets."""
    encoders: dict[str, SentenceEncoder] = {}
    for name, part in build(config, Context(mask_token, chinese, idf)).items():
        if chinese:
            encoders[name] = PerSetEncoder(
                {
                    scope.removeprefix(CHINESE_SCOPE): part.wrap(encoder, fits[name])
                    for scope, fits in fitted.items()
                    if scope.startswith(CHINESE_SCOPE)
                }
            )
        elif ENGLISH_SCOPE in fitted:
            encoders[name] = part.wrap(encoder, fitted[ENGLISH_SCOPE][name])
    return encoders
