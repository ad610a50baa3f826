"""Alignment, uniformity (Wang & Isola) and SSCL's over-smoothing measures, by hand."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from sentemb.analysis import (
    AnalysisConfig,
    alignment,
    token_similarity,
    uniformity,
    vectors_and_over_smoothing,
)
from sentemb.config import ConfigError, from_dict
from sentemb.encoder import Encoder
from sentemb.pooling import POOLERS, Pooler, check_pooler, masked_mean, pool


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
    result = vectors_and_over_smoothing(tiny_encoder, sentences, batch_size=2)[1]
    layers = tiny_encoder.backbone.config.num_hidden_layers
    assert len(result["token_wise"]) == layers + 1 and len(result["inter_layer"]) == layers
    batch = tiny_encoder.tokenize(sentences[1:2])
    with torch.inference_mode():
        hidden = tiny_encoder(batch["input_ids"], batch["attention_mask"]).hidden_states
    first = torch.nn.functional.cosine_similarity(hidden[0][0, 0], hidden[1][0, 0], dim=0)
    single = vectors_and_over_smoothing(tiny_encoder, sentences[1:2], batch_size=1)[1]
    assert single["inter_layer"][0] == pytest.approx(first.item(), abs=1e-5)  # eq. 2 on [CLS]
    assert all(-1.0 <= v <= 1.0 for v in result["token_wise"] + result["inter_layer"])


def test_analysis_forwards_each_sentence_once_and_gives_encodes_vectors(
    tiny_encoder: Encoder, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One forward pass gives both results: the vectors are `encode`'s bit for bit (the same
    batches), and eq. 1 over padded, length-sorted batches is the mean of each sentence's own
    (a one-token sentence has none: NaN, left out)."""
    sentences = ["a cat sat on the mat", "dogs bark", "the quick brown fox jumps", "x"]
    rows: list[int] = []
    forward = tiny_encoder.forward
    monkeypatch.setattr(
        tiny_encoder, "forward", lambda ids, mask: rows.append(len(ids)) or forward(ids, mask)
    )
    vectors, result = vectors_and_over_smoothing(tiny_encoder, sentences, batch_size=3)
    assert rows == [3, 1]
    monkeypatch.undo()
    encoded = tiny_encoder.encode(sentences, batch_size=3, show_progress=False)
    np.testing.assert_array_equal(vectors, encoded)
    alone = [vectors_and_over_smoothing(tiny_encoder, [s], 1)[1]["token_wise"] for s in sentences]
    assert np.isnan(alone[3]).all()
    expected = np.mean(alone[:3], axis=0)
    np.testing.assert_allclose(result["token_wise"], expected, atol=0.02)  # bf16 autocast


def inter_layer_of_one_sentence(encoder: Encoder, sentence: str, vector) -> float:
    """SSCL eq. 2 between the embedding layer and layer 1 of `sentence`, by hand."""
    batch = encoder.tokenize([sentence])
    with torch.inference_mode():
        hidden = encoder(batch["input_ids"], batch["attention_mask"]).hidden_states
    first, second = (vector(h, batch["attention_mask"])[0] for h in hidden[:2])
    return torch.nn.functional.cosine_similarity(first, second, dim=0).item()


@pytest.mark.parametrize("pooler", ["mean", "first_last_avg"])
def test_inter_layer_of_the_mean_poolers_is_on_token_means(
    tiny_encoder: Encoder, pooler: str
) -> None:
    tiny_encoder.pooler = pooler
    single = vectors_and_over_smoothing(tiny_encoder, ["dogs bark"], batch_size=1)[1]
    expected = inter_layer_of_one_sentence(tiny_encoder, "dogs bark", masked_mean)
    assert single["inter_layer"][0] == pytest.approx(expected, abs=1e-5)


def test_a_pooler_registered_once_serves_training_evaluation_and_analysis(
    tiny_encoder: Encoder, monkeypatch: pytest.MonkeyPatch
) -> None:
    def max_vector(hidden: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        padding = attention_mask.unsqueeze(-1) == 0
        return hidden.masked_fill(padding, -torch.inf).max(1).values

    monkeypatch.setitem(POOLERS, "max", Pooler(max_vector))
    assert check_pooler("max", "train.pooler") == "max"
    batch = tiny_encoder.tokenize(["dogs bark", "a cat sat on the mat"])
    with torch.inference_mode():
        hidden = tiny_encoder(batch["input_ids"], batch["attention_mask"]).hidden_states
    pooled = pool("max", hidden, batch["attention_mask"])
    assert torch.equal(pooled, max_vector(hidden[-1], batch["attention_mask"]))
    tiny_encoder.pooler = "max"
    vectors = tiny_encoder.encode(["dogs bark"], show_progress=False)
    np.testing.assert_allclose(vectors[0], pooled[0].numpy(), atol=0.05)  # bf16 autocast
    single = vectors_and_over_smoothing(tiny_encoder, ["dogs bark"], batch_size=1)[1]
    expected = inter_layer_of_one_sentence(tiny_encoder, "dogs bark", max_vector)
    assert single["inter_layer"][0] == pytest.approx(expected, abs=1e-5)


def test_uniformity_stays_finite_for_a_large_t() -> None:
    vectors = np.array([[1.0, 0.0], [0.0, 1.0], [-2.0, 0.0]])  # squared distances 2, 4, 2
    # log mean exp(-t d) with exp(-1000 d) = 0 in floating point: the log-sum-exp keeps it exact
    assert uniformity(vectors, t=1000.0) == pytest.approx(-2000.0 + math.log(2 / 3))


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"uniformity_t": 0.0}, "analysis.uniformity_t: must be > 0, got 0.0"),
        ({"uniformity_t": -2.0}, "analysis.uniformity_t: must be > 0, got -2.0"),
        ({"uniformity_t": math.inf}, "analysis.uniformity_t: expected a finite number, got inf"),
        ({"uniformity_t": math.nan}, "analysis.uniformity_t: expected a finite number, got nan"),
        ({"positive_threshold": math.nan}, "analysis.positive_threshold: expected a finite number"),
        ({"positive_threshold": -math.inf}, "analysis.positive_threshold: expected a finite"),
    ],
)
def test_analysis_params_out_of_range_are_refused(values: dict, message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        from_dict(AnalysisConfig, values, "analysis")
    assert str(caught.value).startswith(message)
