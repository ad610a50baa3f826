"""The fitted state's round trip (also of folders written before the registry), and its refusal
around another model."""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.numpy import load_file, save_file
from toy_refine import IDF, TOY, toy_dev, toy_parts

from sentemb.config import ConfigError
from sentemb.encoder import Encoder
from sentemb.evaluation.base import SentenceEncoder
from sentemb.identity import ModelIdentity, model_identity
from sentemb.refine.base import CHINESE, ENGLISH, ENGLISH_SCOPE, RefinementMismatch
from sentemb.refine.config import RefineConfig
from sentemb.refine.fit import fit_scope
from sentemb.refine.repal import RepALConfig, RepALEncoder, RepALFit
from sentemb.refine.store import TENSOR_FILE, load_refinement, save_refinement
from sentemb.refine.wrap import PerSetEncoder, refinements


def refined_encoders(
    folder: Path, encoder: SentenceEncoder, identity: ModelIdentity = TOY
) -> dict[str, SentenceEncoder]:
    """The English refinements in `folder` around `encoder`, as the evaluate stage builds them."""
    return refinements(*load_refinement(folder, {ENGLISH: identity}), encoder, None, False)


def saved_toy_refinement(folder: Path) -> Path:
    """RepAL (corpus level) and whitening fitted on the toy encoder, saved as fitted on TOY."""
    encoder, dev, fit = toy_dev()
    config = RefineConfig(repal=RepALConfig(levels=["corpus"], lambda2=[0.0, 1.0]))
    fitted, _, _ = fit_scope(encoder, dev, fit, toy_parts(config), config, batch_size=8)
    save_refinement(folder, config, {ENGLISH_SCOPE: fitted}, None, {ENGLISH: TOY, CHINESE: TOY})
    return folder


def test_saved_refinement_gives_the_same_vectors(tmp_path: Path) -> None:
    encoder, dev, fit = toy_dev()
    config = RefineConfig(repal=RepALConfig(levels=["corpus"], lambda2=[0.0, 1.0]))
    fitted, _, _ = fit_scope(encoder, dev, fit, toy_parts(config), config, batch_size=8)
    repal, whitening = fitted["repal"], fitted["whitening"]
    assert whitening is not None
    save_refinement(tmp_path / "refined", config, {ENGLISH_SCOPE: fitted}, None, {ENGLISH: TOY})
    loaded = refined_encoders(tmp_path / "refined", encoder)
    assert set(loaded) == {"repal", "whitening"}
    direct = RepALEncoder(encoder, None, repal.lambda1, repal.lambda2, repal.mean)
    np.testing.assert_array_equal(loaded["repal"].encode(dev.first), direct.encode(dev.first))
    np.testing.assert_allclose(
        loaded["whitening"].encode(dev.first), whitening.transform(encoder.encode(dev.first))
    )


def test_sentence_level_needs_a_mask_token(tmp_path: Path) -> None:
    encoder = toy_dev()[0]
    fits = {ENGLISH_SCOPE: {"repal": RepALFit(), "whitening": None}}
    save_refinement(tmp_path / "r", RefineConfig(), fits, IDF, {ENGLISH: TOY})
    with pytest.raises(ConfigError, match=r"refine\.repal\.levels"):
        refined_encoders(tmp_path / "r", encoder)


# --- a refinement belongs to one model ------------------------------------------------------


def test_model_identity_is_the_weights_pooler_and_width(
    tiny_model_dir: Path, tmp_path: Path
) -> None:
    first = model_identity("a", Encoder.from_pretrained(str(tiny_model_dir)))
    assert (first.pooler, first.dim, len(first.sha256)) == ("cls_before_pooler", 32, 64)
    copy = shutil.copytree(tiny_model_dir, tmp_path / "copy")
    same = model_identity("b", Encoder.from_pretrained(str(copy)))
    assert same.same_vectors(first) and same.model == "b"  # the path is a name, not the identity
    mean = model_identity("a", Encoder.from_pretrained(str(tiny_model_dir), pooler="mean"))
    assert not mean.same_vectors(first)
    changed = Encoder.from_pretrained(str(copy))
    with torch.no_grad():
        changed.backbone.embeddings.word_embeddings.weight[0, 0] += 1e-3
    assert model_identity("b", changed).sha256 != first.sha256


@pytest.mark.parametrize(
    ("other", "shown"),
    [
        (dataclasses.replace(TOY, model="other", sha256="cd" * 32), "weights sha256 cdcdcdcdcdcd"),
        (dataclasses.replace(TOY, pooler="cls"), "pooler cls"),
        (dataclasses.replace(TOY, model="wide", sha256="ef" * 32, dim=384), "384-dim vectors"),
    ],
)
def test_refinement_of_another_model_is_refused_naming_both(
    tmp_path: Path, other: ModelIdentity, shown: str
) -> None:
    folder = saved_toy_refinement(tmp_path / "r")
    with pytest.raises(RefinementMismatch) as caught:
        refined_encoders(folder, toy_dev()[0], other)
    message = str(caught.value)
    assert message.startswith(f"{folder}: its english refinement was fitted on {TOY}, not on ")
    assert str(other) in message and shown in message
    with pytest.raises(RefinementMismatch, match="its chinese refinement"):
        load_refinement(folder, {ENGLISH: TOY, CHINESE: other})


def test_refinement_without_a_model_record_or_damaged_is_refused(tmp_path: Path) -> None:
    folder = saved_toy_refinement(tmp_path / "r")
    state_file = folder / "refinement.json"
    state = json.loads(state_file.read_text())
    state_file.write_text(json.dumps({k: v for k, v in state.items() if k != "models"}))
    with pytest.raises(RefinementMismatch, match="records no model its english fits were made on"):
        refined_encoders(folder, toy_dev()[0])
    state_file.write_text(json.dumps(state | {"models": {ENGLISH: {"model": "x"}}}))
    with pytest.raises(ConfigError, match="not a refinement written by the refine stage"):
        refined_encoders(folder, toy_dev()[0])
    state_file.write_text(json.dumps(state))
    tensors = load_file(folder / TENSOR_FILE)
    tensors["english/mean"] = np.zeros(16, dtype=np.float32)  # another width than recorded
    save_file(tensors, folder / TENSOR_FILE)
    with pytest.raises(ConfigError, match=r"english/mean has shape \(16,\), but the model it"):
        refined_encoders(folder, toy_dev()[0])


def test_chinese_set_without_a_fit_is_one_error() -> None:
    per_set = PerSetEncoder({"PAWSX": toy_dev()[0]})
    with pytest.raises(
        RefinementMismatch, match=r"no refinement was fitted for the Chinese set BQ"
    ):
        per_set.for_set("BQ")


@pytest.mark.parametrize("methods", [["repal", "whitening"], ["whitening"]])
def test_a_folder_written_before_the_registry_still_loads(tmp_path: Path, methods: list) -> None:
    """The layout the refine stage wrote before refinements registered themselves: every scope
    carries RepAL's λs and v̂ (also when only whitening ran), then the whitening kernel."""
    rng = np.random.default_rng(0)
    mean, kernel, bias = rng.normal(size=8), rng.normal(size=(8, 5)), rng.normal(size=8)
    config = dataclasses.asdict(RefineConfig(methods=methods))
    config["repal"]["levels"] = ["corpus"]
    state = {
        "config": config,
        "models": {ENGLISH: dataclasses.asdict(TOY)},
        "scopes": {ENGLISH_SCOPE: {"lambda1": 0.0, "lambda2": 0.7}},
    }
    folder = tmp_path / "old"
    folder.mkdir()
    (folder / "refinement.json").write_text(json.dumps(state, indent=1) + "\n")
    tensors = {"english/mean": mean, "english/kernel": kernel, "english/bias": bias}
    save_file({k: v.astype(np.float32) for k, v in tensors.items()}, folder / TENSOR_FILE)
    encoder = toy_dev()[0]
    loaded = refined_encoders(folder, encoder)
    assert list(loaded) == methods
    x = encoder.encode(["a0", "b0"])
    white = (x - bias.astype(np.float32)) @ kernel.astype(np.float32)
    np.testing.assert_allclose(loaded["whitening"].encode(["a0", "b0"]), white, rtol=1e-5)
    if "repal" in loaded:
        expected = x - 0.7 * mean.astype(np.float32)
        np.testing.assert_allclose(loaded["repal"].encode(["a0", "b0"]), expected, rtol=1e-5)
