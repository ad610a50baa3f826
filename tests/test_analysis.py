"""Alignment, uniformity (Wang & Isola) and SSCL's over-smoothing measures, by hand."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from sentemb.analysis import (
    AnalysisConfig,
    alignment,
    over_smoothing,
    token_similarity,
    uniformity,
)
from sentemb.config import ConfigError, from_dict
from sentemb.encoder import Encoder


def test_alignment_by_hand() -> None:
    first = np.array([[1.0, 0.0], [0.0, 2.0]])
    second = np.array([[0.0, 3.0], [0.0, 1.0]])  # unit vectors: distance^2 2 and 0
    assert alignment(first, second) == pytest.approx(1.0)


def test_uniformity_by_hand() -> None:
    vectors = np.array([[1.0, 0.0], [0.0, 1.0], [-2.0, 0.0]])  # squared distances 2, 4, 2
    expected = math.log((math.exp(-4) + math.exp(-8) + math.exp(-4)) / 3)
    assert uniformity(vectors, t=2.0) == pytest.approx(expected)


def test_token_similarity_eq1_by_hand() -> None:
    tokens = torch.tensor(
        [[[1.0, 0.0], [0.0, 1.0], [1.0, 1.0], [5.0, 5.0]], [[1.0, 0.0], [9.0, 9.0], [0, 0], [0, 0]]]
    )
    mask = torch.tensor([[1, 1, 1, 0], [1, 0, 0, 0]])
    # first sentence: cos 0, 1/sqrt2, 1/sqrt2 over 3 unordered pairs; second has one token
    result = token_similarity(tokens, mask)
    assert result[0].item() == pytest.approx(math.sqrt(2) / 3)
    assert math.isnan(result[1].item())


def test_over_smoothing_on_a_tiny_model(tiny_encoder: Encoder) -> None:
    sentences = ["a cat sat on the mat", "dogs bark", "the quick brown fox jumps"]
    result = over_smoothing(tiny_encoder, sentences, batch_size=2)
    layers = tiny_encoder.backbone.config.num_hidden_layers
    assert len(result["token_wise"]) == layers + 1 and len(result["inter_layer"]) == layers
    batch = tiny_encoder.tokenize(sentences[1:2])
    with torch.inference_mode():
        hidden = tiny_encoder(batch["input_ids"], batch["attention_mask"]).hidden_states
    first = torch.nn.functional.cosine_similarity(hidden[0][0, 0], hidden[1][0, 0], dim=0)
    single = over_smoothing(tiny_encoder, sentences[1:2], batch_size=1)
    assert single["inter_layer"][0] == pytest.approx(first.item(), abs=1e-5)  # eq. 2 on [CLS]
    assert all(-1.0 <= v <= 1.0 for v in result["token_wise"] + result["inter_layer"])


def test_uniformity_stays_finite_for_a_large_t() -> None:
    vectors = np.array([[1.0, 0.0], [0.0, 1.0], [-2.0, 0.0]])  # squared distances 2, 4, 2
    # log mean exp(-t d) with exp(-1000 d) = 0 in floating point: the log-sum-exp keeps it exact
    assert uniformity(vectors, t=1000.0) == pytest.approx(-2000.0 + math.log(2 / 3))


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"uniformity_t": 0.0}, "analysis.uniformity_t: must be > 0 and finite, got 0.0"),
        ({"uniformity_t": -2.0}, "analysis.uniformity_t: must be > 0 and finite, got -2.0"),
        ({"uniformity_t": math.inf}, "analysis.uniformity_t: must be > 0 and finite, got inf"),
        ({"uniformity_t": math.nan}, "analysis.uniformity_t: must be > 0 and finite, got nan"),
        ({"positive_threshold": math.nan}, "analysis.positive_threshold: must be a number"),
        ({"positive_threshold": -math.inf}, "analysis.positive_threshold: must be a number"),
    ],
)
def test_analysis_params_out_of_range_are_refused(values: dict, message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        from_dict(AnalysisConfig, values, "analysis")
    assert str(caught.value).startswith(message)
