"""Poolers against hand-computed values; encode order, deduplication and model resolution."""

from __future__ import annotations

import copy
import io
import json
import os
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from sentemb import model_files
from sentemb.config import ConfigError, section
from sentemb.encoder import Encoder
from sentemb.model_checks import check_pooling
from sentemb.model_config import DEFAULT_MODEL, ModelConfig
from sentemb.model_files import (
    POOLER_FILE,
    resolve_model,
    saved_pooler,
    sentence_transformers_pooler,
)
from sentemb.pooling import POOLERS, check_pooler, pool

from support.models import broken_copy

# batch of 2 sentences, 3 positions, dim 2; the second sentence has one padding position
LAYER1 = torch.tensor([[[1.0, 1.0], [3.0, 1.0], [5.0, 1.0]], [[0.0, 2.0], [2.0, 2.0], [9.0, 9.0]]])
LAYER2 = torch.tensor([[[2.0, 0.0], [4.0, 0.0], [6.0, 0.0]], [[1.0, 1.0], [1.0, 3.0], [9.0, 9.0]]])
MASK = torch.tensor([[1, 1, 1], [1, 1, 0]])
HIDDEN = (torch.zeros_like(LAYER1), LAYER1, LAYER2)


def test_cls_before_pooler_is_first_token_of_last_layer() -> None:
    assert torch.equal(
        pool("cls_before_pooler", HIDDEN, MASK), torch.tensor([[2.0, 0.0], [1.0, 1.0]])
    )


def test_mean_ignores_padding() -> None:
    assert torch.allclose(pool("mean", HIDDEN, MASK), torch.tensor([[4.0, 0.0], [1.0, 2.0]]))


def test_first_last_avg() -> None:
    # sentence 1: mean of (L1+L2)/2 = mean([1.5,.5],[3.5,.5],[5.5,.5]) = [3.5, .5]
    # sentence 2: mean([.5,1.5],[1.5,2.5]) = [1, 2]
    expected = torch.tensor([[3.5, 0.5], [1.0, 2.0]])
    assert torch.allclose(pool("first_last_avg", HIDDEN, MASK), expected)


def test_cls_uses_pooler_layer() -> None:
    layer = torch.nn.Linear(2, 2)
    assert torch.allclose(pool("cls", HIDDEN, MASK, lambda h: layer(h[:, 0])), layer(LAYER2[:, 0]))


def test_a_pooler_is_checked_against_the_backbone_under_the_param_that_chose_it(
    tiny_encoder: Encoder, tiny_model_dir: Path
) -> None:
    without_layer = torch.nn.Linear(2, 2)  # no `pooler` attribute, like DistilBERT's backbone
    assert check_pooling(tiny_encoder, "cls", "train.pooler") == "cls"
    assert check_pooler("auto", "model.pooler", auto=True) == "auto"
    no_layer = copy.deepcopy(tiny_encoder)
    no_layer.backbone.pooler = None
    assert check_pooling(no_layer, "mean", "train.pooler") == "mean"
    message = (
        r"^train\.eval_pooler: 'cls' needs a backbone with a pooler layer; model\.name_or_path: "
        rf"{tiny_model_dir} \(BertModel\) has none; cls_before_pooler reads \[CLS\] without one"
    )
    with pytest.raises(ConfigError, match=message):
        check_pooling(no_layer, "cls", "train.eval_pooler")
    with pytest.raises(ConfigError, match=r"^pooler: 'cls' needs a backbone with a pooler layer"):
        Encoder(without_layer, tiny_encoder.tokenizer, "cls")
    with pytest.raises(ConfigError, match=r"^dclr\.complementary_pooler: 'max' is not one of \["):
        Encoder(
            tiny_encoder.backbone,
            tiny_encoder.tokenizer,
            "max",
            None,
            "auto",
            "dclr.complementary_pooler",
        )


def test_encode_keeps_order(tiny_encoder: Encoder) -> None:
    tiny_encoder.precision = "fp32"
    sentences = ["a short one", "a much longer sentence than the others", "a short one", "mid"]
    vectors = tiny_encoder.encode(sentences, batch_size=2, show_progress=False)
    assert vectors.shape == (4, 32) and vectors.dtype == np.float32
    alone = np.stack([tiny_encoder.encode([s], show_progress=False)[0] for s in sentences])
    np.testing.assert_allclose(vectors, alone, atol=1e-5)
    assert tiny_encoder.encode([], show_progress=False).shape == (0, 32)


def test_encode_tokenizes_once_and_batches_by_token_count(
    tiny_encoder: Encoder, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Batches run longest first by tokens (not characters), each padded to its own longest,
    exactly as `tokenize` pads them."""
    sentences = ["tokenization", "a b c d e", "mid one", "x", "one two three", "a b c d e f g"]
    ids = tiny_encoder.tokenizer(sentences)["input_ids"]
    assert len(ids[0]) < len(ids[1])  # longer in characters, shorter in tokens
    padded = tiny_encoder.pad(ids)
    reference = tiny_encoder.tokenize(sentences)
    for key in ("input_ids", "attention_mask"):
        assert torch.equal(padded[key], reference[key])
    widths: list[list[int]] = []
    pad = tiny_encoder.pad
    monkeypatch.setattr(
        tiny_encoder, "pad", lambda rows: widths.append(list(map(len, rows))) or pad(rows)
    )
    tiny_encoder.encode(sentences, batch_size=4, show_progress=False)
    assert widths == [
        sorted(map(len, ids), reverse=True)[:4],
        sorted(map(len, ids), reverse=True)[4:],
    ]


def test_progress_bar_only_on_a_terminal(
    tiny_encoder: Encoder, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A log file gets no bar (issue 17); a terminal gets one, unless `show_progress` is off."""

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    for stderr, show, drawn in [
        (io.StringIO(), True, False),
        (Terminal(), True, True),
        (Terminal(), False, False),
    ]:
        monkeypatch.setattr(sys, "stderr", stderr)
        tiny_encoder.encode(["a sentence", "another"], show_progress=show)
        assert ("encode" in stderr.getvalue()) is drawn


def test_no_transformers_bar_in_a_log_file(
    tiny_model_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from transformers.utils import logging as transformers_logging

    transformers_logging.enable_progress_bar()
    monkeypatch.setattr(sys, "stderr", io.StringIO())
    Encoder.from_pretrained(str(tiny_model_dir))
    assert "Loading weights" not in sys.stderr.getvalue()
    assert not transformers_logging.is_progress_bar_enabled()


def test_default_model_resolves_to_installed_package() -> None:
    path = resolve_model(DEFAULT_MODEL)
    assert Path(path, "model.safetensors").is_file()
    assert os.environ["HF_HUB_OFFLINE"] == "1"
    assert sentence_transformers_pooler(path) == "mean"


def test_sentence_transformers_cls_config(tmp_path: Path) -> None:
    (tmp_path / "modules.json").write_text(
        json.dumps([{"idx": 1, "name": "1", "path": "1_Pooling", "type": "x.Pooling"}])
    )
    (tmp_path / "1_Pooling").mkdir()
    (tmp_path / "1_Pooling" / "config.json").write_text(
        json.dumps({"pooling_mode_cls_token": True})
    )
    assert sentence_transformers_pooler(str(tmp_path)) == "cls_before_pooler"


@pytest.mark.parametrize("pooler", list(POOLERS))
def test_every_registered_pooler_is_saved_and_read_back(
    tiny_encoder: Encoder, tmp_path: Path, pooler: str
) -> None:
    tiny_encoder.pooler = pooler
    tiny_encoder.save(tmp_path)
    assert saved_pooler(str(tmp_path)) == pooler
    (tmp_path / POOLER_FILE).unlink()
    if POOLERS[pooler].st_mode is None:  # sentence-transformers has no such pooling
        assert not (tmp_path / "modules.json").exists()
        return
    assert sentence_transformers_pooler(str(tmp_path)) == pooler
    config = json.loads((tmp_path / "1_Pooling" / "config.json").read_text())
    assert list(config.items()) == [
        ("word_embedding_dimension", 32),
        ("pooling_mode_cls_token", pooler == "cls_before_pooler"),
        ("pooling_mode_mean_tokens", pooler == "mean"),
    ]


def test_max_length_defaults_to_model_maximum(tiny_model_dir: Path) -> None:
    assert Encoder.from_pretrained(str(tiny_model_dir)).max_length == 128
    assert Encoder.from_pretrained(str(tiny_model_dir), max_length=16).max_length == 16
    assert Encoder.from_pretrained(str(tiny_model_dir), max_length=3).max_length == 3


@pytest.mark.parametrize("length", [1, 2, 129, 512, 100_000])
def test_a_max_length_the_model_cannot_take_names_the_param_and_its_limits(
    tiny_model_dir: Path, length: int
) -> None:
    """Above the model's 128 positions it failed at the first long batch (training passed it on
    unclamped); 1 or 2 left [CLS] [SEP] and no word. Both limits come from the model."""
    message = (
        f"model.max_length: must be in [3, 128] for {tiny_model_dir} (2 special token(s) "
        f"plus a word; 128 positions), got {length}"
    )
    with pytest.raises(ConfigError) as err:
        Encoder.from_pretrained(str(tiny_model_dir), max_length=length)
    assert str(err.value) == message


def test_positions_leave_out_those_a_roberta_reserves(tiny_model_dir: Path) -> None:
    """RoBERTa-like models count positions from padding_idx + 1: 20 position embeddings take 18
    tokens."""
    from transformers import AutoTokenizer, RobertaConfig, RobertaModel

    config = RobertaConfig(
        vocab_size=30522, hidden_size=8, num_hidden_layers=1, num_attention_heads=2,
        intermediate_size=8, max_position_embeddings=20,
    )  # fmt: skip
    tokenizer = AutoTokenizer.from_pretrained(str(tiny_model_dir))
    encoder = Encoder(RobertaModel(config), tokenizer, "mean")
    assert encoder.positions == encoder.max_length == 18
    vectors = encoder.encode(["word " * 100], show_progress=False)  # cut to 18: no IndexError
    assert vectors.shape == (1, 8)


def test_precision_param_and_bf16_encoding(tiny_encoder: Encoder) -> None:
    with pytest.raises(ConfigError, match=r"model\.precision: 'int8' is not one of"):
        section({"model": {"precision": "int8"}}, "model", ModelConfig)
    sentences = ["a short one", "and a somewhat longer sentence to encode"]
    tiny_encoder.precision = "fp32"
    full = tiny_encoder.encode(sentences, show_progress=False)
    tiny_encoder.precision = "bf16"
    half = tiny_encoder.encode(sentences, show_progress=False)
    assert half.dtype == np.float32 and not np.array_equal(full, half)
    cosine = (full * half).sum(1) / np.linalg.norm(full, axis=1) / np.linalg.norm(half, axis=1)
    assert cosine.min() > 0.99


MODEL_FAULTS = {
    "no weights": r"has no weights \(none of model\.safetensors, ",
    "no config": "has no config.json",
    "remote code": r"needs its own Python code .* unless model\.trust_remote_code is true",
    "other tokenizer": "tokenizer .* has 30522 tokens but the model's embedding has 1000 rows",
    "pickle weights": r"model/pytorch_model\.bin: weights saved as a pickle, which can run code "
    r"when loaded; the pipeline loads only safetensors: convert them",
    "config not JSON": r"model/config\.json: not a readable JSON file",
    "pooler file damaged": r"model/sentemb_pooler\.json: expected \{'pooler': one of \['cls', ",
    "pooling config missing": r"model/1_Pooling/config\.json: not a readable JSON file \(\[Errno 2",
    "damaged weights": r"model: cannot be loaded: .*incomplete metadata",
}


@pytest.mark.parametrize("fault", sorted(MODEL_FAULTS))
def test_broken_model_folder_is_refused(tiny_model_dir: Path, tmp_path: Path, fault: str) -> None:
    folder = broken_copy(tiny_model_dir, tmp_path / "model", fault)
    with pytest.raises(ConfigError, match=rf"^model\.name_or_path: .*{MODEL_FAULTS[fault]}"):
        Encoder.from_pretrained(str(folder))


def test_hub_refusal_of_custom_code_names_the_param(monkeypatch: pytest.MonkeyPatch) -> None:
    """A hub model (no local folder) with custom code: transformers' ValueError, reworded."""
    from transformers import AutoTokenizer

    def refuse(*args, **kwargs):
        raise ValueError("... contains custom code ... pass `trust_remote_code=True` ...")

    monkeypatch.setattr(model_files, "hub_model", lambda name, param: name)  # as if downloadable
    monkeypatch.setattr(AutoTokenizer, "from_pretrained", refuse)
    with pytest.raises(ConfigError, match=r"^dclr\.complementary_model: org/custom needs its own"):
        Encoder.from_pretrained("org/custom", param="dclr.complementary_model")
