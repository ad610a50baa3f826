"""What a trained encoder's space looks like, beyond its scores.

- Alignment and uniformity (Wang & Isola, 2020; plotted per method in IS-CSE Fig. 3):
  ``align = E_(x, x+) |f(x) - f(x+)|^2`` over positive pairs, ``uniform = log E_(x, y)
  exp(-t |f(x) - f(y)|^2)`` over all pairs of distinct sentences, on L2-normalised vectors.
  Positive pairs are the STS-B pairs with a gold score above a threshold (SimCSE §5: > 4).
- Over-smoothing (SSCL, Chen et al., 2023, §2): token-wise similarity, eq. 1, the mean cosine of
  the distinct token pairs of a sentence, per layer; inter-layer similarity, eq. 2, the cosine
  of a sentence's representations in adjacent layers (SSCL Fig. 1 and 4, on STS-B test).
Both come from one forward pass over the distinct STS-B test sentences.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from scipy.spatial.distance import pdist
from scipy.special import logsumexp
from sklearn.preprocessing import normalize

from sentemb.config import ConfigError, NonNegative, Positive
from sentemb.data.readers import read_stsb
from sentemb.encoder import Encoder
from sentemb.evaluation.base import check_vectors, distinct, probe, require_finite, scoring
from sentemb.model_config import ModelConfig
from sentemb.pooling import POOLERS


@dataclass
class AnalysisConfig:
    """Params section `analysis`."""

    # alignment's positives score above it; the data bounds it (it must leave a pair)
    positive_threshold: NonNegative = 4.0
    uniformity_t: Positive = 2.0


def alignment(first: np.ndarray, second: np.ndarray) -> float:
    """Mean squared distance of the normalised rows of `first` and `second` (Wang & Isola, α=2)."""
    return float(np.mean(np.sum((normalize(first) - normalize(second)) ** 2, axis=1)))


def uniformity(vectors: np.ndarray, t: float = 2.0) -> float:
    """``log mean exp(-t |x - y|^2)`` over the distinct pairs of normalised rows, computed as a
    log-sum-exp so that a large `t` gives a large negative number, not log(0)."""
    squared = pdist(normalize(vectors), "sqeuclidean")
    return float(logsumexp(-t * squared) - np.log(len(squared)))


def token_similarity(tokens: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """SSCL eq. 1 per sentence: the mean cosine over the ordered pairs u != v of its tokens.

    `tokens` is (batch, length, dim); `mask` is 1 on the tokens that count. With unit vectors the
    sum over u != v is |sum_u x_u|^2 - m. Sentences with fewer than two tokens give NaN.
    """
    unit = torch.nn.functional.normalize(tokens.float(), dim=-1) * mask.unsqueeze(-1)
    m = mask.sum(1).float()
    total = unit.sum(1).pow(2).sum(-1) - m
    return torch.where(m > 1, total / (m * (m - 1)).clamp(min=1.0), torch.nan)


@torch.inference_mode()
def vectors_and_over_smoothing(
    encoder: Encoder, sentences: Sequence[str], batch_size: int
) -> tuple[np.ndarray, dict[str, list[float]]]:
    """One forward pass over `sentences` in `Encoder.batches`: their vectors (those `encode`
    gives, from the same batches) and, per layer (0 = embeddings) averaged over them, eq. 1 over
    each sentence's own tokens (no [CLS], [SEP] or padding) and eq. 2 between each layer and the
    next, on the layer's sentence vectors as the encoder's pooler makes them (its `vector`: [CLS]
    for the [CLS] poolers, else the masked token mean)."""
    encoder.eval()
    layer_vector = POOLERS[encoder.pooler].vector
    vectors = np.zeros((len(sentences), encoder.backbone.config.hidden_size), dtype=np.float32)
    token_wise, inter_layer = [], []
    for index, batch in encoder.batches(sentences, batch_size, special_tokens_mask=True):
        words = (batch["attention_mask"] * (1 - batch.pop("special_tokens_mask"))).cpu()
        with encoder.autocast():
            out = encoder(batch["input_ids"], batch["attention_mask"])
        vectors[index] = out.pooled.float().cpu().numpy()
        token_wise.append(
            torch.stack([token_similarity(h.cpu(), words) for h in out.hidden_states], 1)
        )
        layers = [layer_vector(h, batch["attention_mask"]).float() for h in out.hidden_states]
        inter_layer.append(
            torch.stack(
                [
                    torch.nn.functional.cosine_similarity(a, b, dim=-1).cpu()
                    for a, b in itertools.pairwise(layers)
                ],
                dim=1,
            )
        )
    return vectors, {
        "token_wise": torch.cat(token_wise).nanmean(0).tolist(),
        "inter_layer": torch.cat(inter_layer).mean(0).tolist(),
    }


def analyze(
    name: str,
    pooler: str,
    config: AnalysisConfig,
    model: ModelConfig,
    data: Path,
    params: tuple[str, str] = ("model.name_or_path", "model.pooler"),
) -> dict[str, Any]:
    """Alignment and uniformity over STS-B test (positives: gold score above
    `analysis.positive_threshold`) and the per-layer over-smoothing of the encoder `name` with
    `pooler` (`params`: the settings that chose them, named in errors); a threshold selecting
    no pair, unusable vectors (refused on a probe before the whole set) or a non-finite result
    are errors."""
    pairs = read_stsb(data, "test")
    positive = [i for i, score in enumerate(pairs.scores) if score > config.positive_threshold]
    if not positive:
        raise ConfigError(
            f"analysis.positive_threshold: {config.positive_threshold} selects no STS-B test pair "
            f"(positives score above it; the gold scores under {data} go up to "
            f"{max(pairs.scores)}): choose a lower threshold"
        )
    encoder = Encoder.from_pretrained(
        name, pooler, model.max_length, model.trust_remote_code, model.precision, *params
    )
    row = distinct([*pairs.first, *pairs.second])
    with scoring(name):
        probe(encoder, list(row), model.batch_size)
    vectors, layers = vectors_and_over_smoothing(encoder, list(row), model.batch_size)
    with scoring(name):
        check_vectors(vectors, encoder)
    first = vectors[[row[pairs.first[i]] for i in positive]]
    second = vectors[[row[pairs.second[i]] for i in positive]]
    result = {
        "model": name,
        "pooler": encoder.pooler,
        "sentences": len(row),
        "positive_pairs": len(positive),
        "alignment": alignment(first, second),
        "uniformity": uniformity(vectors, config.uniformity_t),
        **layers,
    }
    require_finite(f"{name}, analysis", result)
    return result
