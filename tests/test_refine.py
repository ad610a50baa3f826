"""RepAL (eq. 1-5) and whitening on toy encoders, by hand; the registry of refinements; the
fitted state's round trip (also of folders written before the registry), and its refusal around
another model."""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.numpy import load_file, save_file

from sentemb.config import ConfigError, read_yaml, section
from sentemb.data.readers import PairSet
from sentemb.encoder import Encoder, ModelIdentity, model_identity
from sentemb.evaluation.base import SentenceEncoder, UnusableVectors
from sentemb.phrases import IdfTable
from sentemb.refine.base import (
    CHINESE,
    ENGLISH,
    ENGLISH_SCOPE,
    Context,
    Refinement,
    RefinementMismatch,
)
from sentemb.refine.config import RefineConfig
from sentemb.refine.fit import fit_scope
from sentemb.refine.repal import (
    PartialMask,
    RepALConfig,
    RepALEncoder,
    RepALFit,
    eigenvalue_bounds,
    search_lambdas,
)
from sentemb.refine.store import TENSOR_FILE, load_refinement, save_refinement
from sentemb.refine.whitening import Whitening
from sentemb.refine.wrap import PerSetEncoder, build, refinements
from sentemb.registry import REFINEMENTS

from support import REPO
from support.encoders import CountingEncoder, TableEncoder

TOY = ModelIdentity("toy", "ab" * 32, "mean", 8)  # what toy_dev's encoder stands for
IDF = IdfTable({"cat": 2.0, "sat": 1.5, "mat": 3.0, "dog": 2.5}, documents=10)


class ToyMask:
    """Stands in for `PartialMask`: x* of sentence s is the sentence "s*"."""

    mask = "tri"

    def __call__(self, sentence: str) -> str:
        return sentence + "*"


def test_refinement_is_eq_3_on_a_toy_encoder() -> None:
    table = {
        "a": np.array([1.0, 2.0]),
        "a*": np.array([0.5, 0.0]),
        "b": np.array([3.0, -1.0]),
        "b*": np.array([0.0, 1.0]),
    }
    mean = np.array([0.2, 0.4])
    refined = RepALEncoder(TableEncoder(table, dtype=None), ToyMask(), 0.5, 2.0, mean).encode(
        ["a", "b", "a"]
    )
    # v' = f(x) - 0.5 f(x*) - 2 v̂
    expected = [[1 - 0.25 - 0.4, 2 - 0 - 0.8], [3 - 0 - 0.4, -1 - 0.5 - 0.8], [0.35, 1.2]]
    np.testing.assert_allclose(refined, expected, rtol=1e-6)
    # v̂ fitted on the call's distinct sentences (eq. 2): mean of f(a), f(b) = (2, 0.5)
    fitted_here = RepALEncoder(TableEncoder(table, dtype=None), None, 0.0, 1.0, None).encode(
        ["a", "b", "a"]
    )
    np.testing.assert_allclose(fitted_here[0], [1 - 2, 2 - 0.5], rtol=1e-6)


@pytest.mark.parametrize("lambda1", [0.0, 0.5])
def test_tri_mask_encodes_x_star_only_where_lambda1_weighs_it(lambda1: float) -> None:
    table = {"a": np.array([1.0, 2.0]), "a*": np.array([0.5, 4.0])}
    mean = np.array([0.2, 0.4])
    encoder = CountingEncoder(table)
    refined = RepALEncoder(encoder, ToyMask(), lambda1, 2.0, mean).encode(["a"])
    # v' = f(a) - λ1 f(a*) - 2 v̂: at λ1 = 0, a* is never encoded and v' is f(a) - 2 v̂
    expected = [[1 - lambda1 * 0.5 - 0.4, 2 - lambda1 * 4.0 - 0.8]]
    np.testing.assert_allclose(refined, expected, rtol=1e-6)
    assert encoder.calls == ([["a"]] if lambda1 == 0 else [["a"], ["a*"]])


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


def test_lambda_search_finds_the_known_best_on_a_toy_dev_set() -> None:
    encoder, dev, fit = toy_dev()
    config = RefineConfig(
        methods=["repal"],
        repal=RepALConfig(lambda1=[0.0, 0.5, 1.0, 1.5], lambda2=[0.0, 0.5, 1.0, 1.5, 2.0]),
    )
    fitted, metrics, tried = fit_scope(encoder, dev, fit, toy_parts(config), config, batch_size=8)
    assert set(fitted) == {"repal"}
    np.testing.assert_allclose(fitted["repal"].mean, encoder.encode(fit).mean(axis=0))
    assert (fitted["repal"].lambda1, fitted["repal"].lambda2) == (1.0, 1.0)
    assert metrics["dev/repal"] == pytest.approx(100.0)
    assert metrics["dev/repal"] > metrics["dev/none"]
    # §4.6 order: the λ2 grid with λ1 = 0, then the λ1 grid at the chosen λ2
    assert [(t["lambda1"], t["lambda2"]) for t in tried["repal"]] == [
        *[(0.0, l2) for l2 in (0.0, 0.5, 1.0, 1.5, 2.0)],
        *[(l1, 1.0) for l1 in (0.0, 0.5, 1.0, 1.5)],
    ]


def test_lambda_search_levels_and_ties() -> None:
    calls: list[tuple[float, float]] = []

    def score(l1: float, l2: float) -> float:
        calls.append((l1, l2))
        return -((l1 - 0.3) ** 2) - (l2 - 2.0) ** 2

    assert search_lambdas(score, [0.0, 0.3, 0.6], [1.0, 2.0, 3.0])[:2] == (0.3, 2.0)
    calls.clear()
    assert search_lambdas(score, [0.0, 0.3], [1.0, 2.0], levels=["corpus"])[:2] == (0.0, 2.0)
    assert calls == [(0.0, 1.0), (0.0, 2.0)]
    assert search_lambdas(lambda a, b: 1.0, [0.5, 0.0], [0.7, 0.0])[:2] == (0.5, 0.7)
    # a NaN score ranks last, wherever it is (first, max() returned it and the search crashed)
    nan_first = search_lambdas(lambda a, b: b if b else float("nan"), [0.0], [0.0, 1.0, 2.0])
    assert nan_first[:2] == (0.0, 2.0)
    assert search_lambdas(lambda a, b: float("nan"), [0.5, 0.0], [0.7, 0.0])[:2] == (0.5, 0.7)


@pytest.mark.parametrize(
    ("gold", "second", "counts"),
    [
        ([1.0, 1.0], ["b0", "b1"], "4 distinct sentences and 1 distinct gold"),
        ([1.0, 2.0], ["a0", "a0"], "1 distinct sentences and 2 distinct gold"),
    ],
)
def test_tuning_needs_two_sentences_and_two_gold_scores(
    gold: list[float], second: list[str], counts: str
) -> None:
    """A Chinese valid sample of one gold score (tiny `refine.valid_pairs`) gave NaN Spearmans
    and a bare StopIteration; one sentence crashed the random-pair cosine in numpy."""
    encoder, _, fit = toy_dev()
    first = ["a0", "a1"] if second[0] == "b0" else ["a0", "a0"]
    config = RefineConfig(methods=["repal", "whitening"])
    with pytest.raises(UnusableVectors, match=f"2 tuning pairs have {counts} scores"):
        fit_scope(encoder, PairSet(first, second, gold), fit, toy_parts(config), config)


def test_partial_mask_masks_exactly_the_tf_idf_keywords_english() -> None:
    sentence = "The Cat sat on the mat, with the cat."
    tri = PartialMask("[MASK]", False, IDF, keywords=2)
    # TF-IDF: cat 2 x 2.0 = 4.0, mat 3.0, sat 1.5; stopwords never count
    assert tri.keywords(sentence) == {"cat", "mat"}
    assert tri(sentence) == "The [MASK] sat on the [MASK], with the [MASK]."
    key = PartialMask("[MASK]", False, IDF, keywords=2, mask="key")
    assert key(sentence) == "[MASK] Cat [MASK] [MASK] [MASK] mat, [MASK] [MASK] cat."
    assert PartialMask("<mask>", False, IDF, keywords=20)(sentence) == (
        "The <mask> <mask> on the <mask>, with the <mask>."
    )
    # a word the corpus lacks has df = 0: IDF ln(1 + 10) + 1 = 3.40, above mat's 3.0 (it was 0)
    assert IDF["zyxwv"] == pytest.approx(np.log(11) + 1)
    assert PartialMask("[MASK]", False, IDF, keywords=1)("mat zyxwv") == "mat [MASK]"


def test_partial_mask_masks_exactly_the_jieba_keywords_chinese() -> None:
    sentence = "我想申请信用卡"  # jieba: 我 / 想 / 申请 / 信用卡; TF-IDF keywords 信用卡 > 申请
    assert PartialMask("[MASK]", True, None, keywords=1)(sentence) == "我想申请[MASK]"
    assert PartialMask("[MASK]", True, None, keywords=20)(sentence) == "我想[MASK][MASK]"
    key = PartialMask("[MASK]", True, None, keywords=1, mask="key")
    assert key(sentence) == "[MASK][MASK][MASK]信用卡"


def test_whitening_makes_the_fitting_covariance_the_identity() -> None:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(500, 6)) @ rng.normal(size=(6, 6)) + 3.0
    white = Whitening.fit(x).transform(x)
    np.testing.assert_allclose(white.mean(axis=0), 0.0, atol=1e-4)
    np.testing.assert_allclose(np.cov(white, rowvar=False, bias=True), np.eye(6), atol=1e-4)
    cut = Whitening.fit(x, dim=3).transform(x)
    np.testing.assert_allclose(np.cov(cut, rowvar=False, bias=True), np.eye(3), atol=1e-4)
    flat = Whitening.fit(x[:3])  # 3 points span 2 directions: the zero-variance ones are dropped
    assert flat.kernel.shape == (6, 2)
    np.testing.assert_allclose(
        np.cov(flat.transform(x[:3]), rowvar=False, bias=True), np.eye(2), atol=1e-6
    )
    with pytest.raises(ConfigError, match="all equal"):
        Whitening.fit(np.ones((4, 6)))
    for rows in (0, 1):  # a fit on the sentences of an empty call ended in numpy's SVD error
        with pytest.raises(ConfigError, match=f"2 or more vectors, got {rows}"):
            Whitening.fit(x[:rows])
    for dim in (7, 10_000):  # more dimensions than the vectors have kept all 6 silently
        with pytest.raises(ConfigError, match=rf"^refine.whitening.dim: {dim} is more than the 6"):
            Whitening.fit(x, dim=dim)


def test_eigenvalue_bound_is_eq_5_by_hand() -> None:
    e = np.eye(2)
    # λ = 0: W = I, a = 1, b = 0: (2·0 + sqrt(0 + 3·1)) / 2
    # λ = 1: E* = E - mean = ±0.5, W* = [[.5, -.5], [-.5, .5]]: (2·(-.5) + sqrt(.25 + 3·.25)) / 2
    assert eigenvalue_bounds(e, [0.0, 1.0]) == pytest.approx([np.sqrt(3) / 2, 0.0])


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


# --- the registry: a refinement is one file with its params sub-section ----------------------


def test_refinements_are_the_package_files_each_with_its_params_section() -> None:
    assert set(REFINEMENTS) == set(REFINEMENTS.names())
    sections = {f.name: f.type for f in dataclasses.fields(RefineConfig)}
    params = read_yaml(REPO / "params.yaml")["refine"]
    for name, entry in REFINEMENTS.items():
        assert (entry.cls.name, entry.cls.__module__) == (name, f"sentemb.refine.{name}")
        assert sections[name] is entry.config  # `refine.<name>`: the class it registered
        assert name in params
    assert section({"refine": params}, "refine", RefineConfig).methods == params["methods"]


def test_unknown_refinement_is_one_error_naming_the_known_ones() -> None:
    with pytest.raises(ConfigError) as caught:
        section({"refine": {"methods": ["repal", "whiten", "pca"]}}, "refine", RefineConfig)
    assert str(caught.value) == (
        f"refine.methods: unknown ['whiten', 'pca']; the refinements are {list(REFINEMENTS)}"
    )
    with pytest.raises(ConfigError, match=r"refine: unknown key\(s\) \['whitenin'\]; known keys"):
        section({"refine": {"whitenin": {"dim": 8}}}, "refine", RefineConfig)


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
