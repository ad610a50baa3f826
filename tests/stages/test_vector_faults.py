"""Models and poolers whose vectors cannot be used, as a class: each architecture (a BERT-like
encoder, with and without its pooler weights or [CLS]; decoder-only models, which attend
causally: GPT-2, Llama, a BERT decoder; an encoder-decoder T5) with each pooler of `POOLERS`,
wherever vectors are made (evaluate, refine, analyze, train and DCLR's complementary model).

A pair certain to give unusable vectors is one error naming the pooler's param, the model and the
fix before a sentence is encoded; a doubtful one is a warning, named again if vectors are
refused; a model whose vectors are refused for any other reason is refused on a probe of a few
sentences, not after encoding them all. Nothing is written: no metrics, no model, no lock."""

from __future__ import annotations

import json
import logging
import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest
import torch

from sentemb.config import ConfigError
from sentemb.encoder import Encoder
from sentemb.evaluation.base import PROBE_SIZE, UnusableVectors, check_vectors
from sentemb.pooling import POOLERS, cls_vector

from support.models import LAST_NORM, edited_copy, set_weight
from support.stages import LINKED_CORPUS, last_error, run_stage, train_args, write_params

FIRST_TOKEN = [name for name, spec in POOLERS.items() if spec.vector is cls_vector]
LAYER = [name for name, spec in POOLERS.items() if spec.dense]  # the backbone's pooler layer
SENTENCES = ["a man plays a guitar", "the stock market fell", "dogs bark", "it rained all day"]


def tiny_model(kind: str) -> torch.nn.Module:
    """A 2-layer, 32-dim random backbone of `kind` over MiniLM's 30522-token vocabulary."""
    from transformers import (
        BertConfig,
        BertModel,
        GPT2Config,
        GPT2Model,
        LlamaConfig,
        LlamaModel,
        T5Config,
        T5Model,
    )

    torch.manual_seed(0)
    shape = {"vocab_size": 30522, "max_position_embeddings": 128}
    bert = {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2}
    bert |= {"intermediate_size": 64, **shape}
    if kind == "gpt2":
        shape = {"n_embd": 32, "n_layer": 2, "n_head": 2, "n_positions": 128}
        ids = {"vocab_size": 30522, "bos_token_id": 101, "eos_token_id": 102}  # [CLS], [SEP]
        return GPT2Model(GPT2Config(**shape, **ids))
    if kind == "llama":
        return LlamaModel(LlamaConfig(**bert, num_key_value_heads=2))
    if kind == "t5":
        config = T5Config(vocab_size=30522, d_model=32, d_kv=16, d_ff=64, num_layers=2)
        return T5Model(config)
    return BertModel(BertConfig(**bert, is_decoder=kind == "bert-decoder"), kind != "no-pooler")


ARCHITECTURES = {  # name -> (backbone kind, whether its tokenizer puts [CLS] first)
    "bert": ("bert", True),
    "bert-no-pooler-weights": ("no-pooler", True),  # saved without its pooler layer
    "bert-no-cls": ("bert", False),
    "bert-decoder": ("bert-decoder", True),
    "gpt2": ("gpt2", True),
    "gpt2-no-bos": ("gpt2", False),
    "llama": ("llama", True),
    "t5": ("t5", True),
}
CAUSAL = {  # the architectures that attend causally, and their backbone's class
    "bert-decoder": "BertModel",
    "gpt2": "GPT2Model",
    "gpt2-no-bos": "GPT2Model",
    "llama": "LlamaModel",
}


def expected(architecture: str, pooler: str, param: str) -> tuple[str, str] | None:
    """What choosing `pooler` by `param` for `architecture` gives: ("error", the start of the
    error after the model's path) or ("warning", part of the warning); None when it is fine."""
    backbone = CAUSAL.get(architecture)
    if architecture == "t5":
        return "error", " (T5Model) is an encoder-decoder model: its forward pass needs decoder"
    has_layer = architecture.startswith("bert")
    if pooler in LAYER and not has_layer:
        return "error", f" ({backbone}) has none; cls_before_pooler reads [CLS] without one"
    if pooler in FIRST_TOKEN and architecture in CAUSAL:
        sees = (
            ", a sentence's first word, sees only itself, so a sentence's vector would be that of "
            "its first word alone"
            if architecture == "gpt2-no-bos"
            else " ([CLS]) sees only itself, so every sentence would get the same vector"
        )
        return "error", (
            f" ({backbone}) attends causally (each token sees only those before it): the first "
            f"token{sees}; use mean ({param}: mean)"
        )
    if pooler in FIRST_TOKEN and architecture == "bert-no-cls":
        return "warning", f"{param}: {pooler!r} reads the first token, but the tokenizer of "
    if pooler in LAYER and architecture == "bert-no-pooler-weights":
        return "warning", (
            f"{param}: {pooler!r} passes [CLS] through the pooler layer, which the checkpoint of "
        )
    return None


def refused(architecture: str, pooler: str) -> bool:
    outcome = expected(architecture, pooler, "")
    return outcome is not None and outcome[0] == "error"


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory, tiny_model_dir: Path) -> dict[str, Path]:
    """A folder per architecture, with the tiny BERT's tokenizer (no [CLS] for the `-no-` ones)
    and the tiny BERT's constant and NaN copies."""
    root = tmp_path_factory.mktemp("architectures")
    made = {}
    for name, (kind, cls_first) in ARCHITECTURES.items():
        folder = root / name
        tiny_model(kind).save_pretrained(folder)
        for file in ("tokenizer.json", "tokenizer_config.json"):
            shutil.copy(tiny_model_dir / file, folder / file)
        if not cls_first:  # a tokenizer that adds no special token around a sentence
            tokenizer = json.loads((folder / "tokenizer.json").read_text())
            tokenizer["post_processor"] = None
            (folder / "tokenizer.json").write_text(json.dumps(tokenizer))
            config = json.loads((folder / "tokenizer_config.json").read_text())
            config["tokenizer_class"] = "PreTrainedTokenizerFast"
            (folder / "tokenizer_config.json").write_text(json.dumps(config))
        made[name] = folder
    faults = {  # the tiny BERT with all-equal vectors (a zeroed LayerNorm) and NaN vectors
        "constant": set_weight(f"{LAST_NORM}.weight", 0.0),
        "nan": set_weight("embeddings.LayerNorm.weight", float("nan")),
    }
    for name, edit in faults.items():
        made[name] = edited_copy(tiny_model_dir, root / name, edit)
    return made


@pytest.fixture
def encoded(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """How many sentences each `Encoder.batches` call got: every encode (probes included) and
    the analysis's forward pass go through it."""
    counts: list[int] = []
    batches = Encoder.batches

    def counting(self: Encoder, sentences: Sequence[str], *args, **kwargs):
        counts.append(len(sentences))
        return batches(self, sentences, *args, **kwargs)

    monkeypatch.setattr(Encoder, "batches", counting)
    return counts


# -- each architecture with each pooler, as the library loads them ------------------------------


@pytest.mark.parametrize("pooler", list(POOLERS))
@pytest.mark.parametrize("architecture", list(ARCHITECTURES))
def test_each_architecture_with_each_pooler(
    models: dict[str, Path], caplog: pytest.LogCaptureFixture, architecture: str, pooler: str
) -> None:
    """A pair certain to fail is a `ConfigError` at load; any other loads, with its doubts
    warned about (and listed by `suspects`), and gives distinct, finite vectors."""
    folder = models[architecture]
    outcome = expected(architecture, pooler, "model.pooler")

    def load() -> Encoder:
        return Encoder.from_pretrained(str(folder), pooler, pooler_param="model.pooler")

    if outcome is not None and outcome[0] == "error":
        with pytest.raises(ConfigError) as refused:
            load()
        assert f"model.name_or_path: {folder}{outcome[1]}" in str(refused.value)
        return
    with caplog.at_level(logging.WARNING, logger="sentemb.model_checks"):
        encoder = load()
    warned = [r.getMessage() for r in caplog.records if r.name == "sentemb.model_checks"]
    if outcome is None:
        assert warned == [] and encoder.suspects(non_finite=False) == []
    else:
        (warning,) = warned
        assert warning.startswith(outcome[1]) and str(folder) in warning
        assert warning.removeprefix("model.pooler: ") in encoder.suspects(non_finite=False)
    check_vectors(encoder.encode(SENTENCES, show_progress=False))


def test_the_issue_example_in_full(models: dict[str, Path]) -> None:
    folder = models["gpt2"]
    with pytest.raises(ConfigError) as refused:
        Encoder.from_pretrained(str(folder), pooler_param="model.pooler")
    assert str(refused.value) == (
        f"model.pooler: 'auto' (here 'cls_before_pooler') reads the first token, but "
        f"model.name_or_path: {folder} (GPT2Model) attends causally (each token sees only those "
        "before it): the first token ([CLS]) sees only itself, so every sentence would get the "
        "same vector; use mean (model.pooler: mean)"
    )


# -- wherever a stage makes vectors -----------------------------------------------------------

WHERE = {  # where -> the stage, and the param that sets the pooler there
    "evaluate": ("evaluate.py", "model.pooler"),
    "refine": ("refine.py", "model.pooler"),
    "analyze": ("analyze.py", "train.eval_pooler"),
    "train": ("train.py", "train.pooler"),
    "train-eval": ("train.py", "train.eval_pooler"),
    "dclr": ("train.py", "dclr.complementary_pooler"),
}


def run(
    where: str,
    work: Path,
    data_root: Path,
    stage_env: dict,
    model_dir: Path,
    pooler: str,
    **sections: dict,
) -> subprocess.CompletedProcess:
    """The stage of `where` on `model_dir`, with `pooler` set by the param of `where` (training's
    other poolers `mean`) and `sections` updating the params; every output goes into `work`."""
    script, param = WHERE[where]
    values = {"model": {"name_or_path": str(model_dir)}, "train": {"pooler": "mean"}}
    values["train"]["eval_pooler"] = "mean"
    for name, section in sections.items():
        values[name] = {**values.get(name, {}), **section}
    section, key = param.split(".")
    values.setdefault(section, {})[key] = pooler
    params = write_params(work, data_root, **values)
    common = ["--data", str(data_root), "--params", str(params)]
    if where in ("refine", "train", "train-eval", "dclr"):
        common += ["--corpus", str(data_root / LINKED_CORPUS)]
    if where == "evaluate":
        args = ["--model", str(model_dir), "--suites", "sts", "--out-dir", str(work / "out")]
    elif where == "refine":
        args = ["--model", str(model_dir), "--out", str(work / "refined")]
        args += ["--metrics", str(work / "refine.json"), "--plots", str(work / "plots")]
    elif where == "analyze":
        args = ["--out", str(work / "analysis.json")]
    else:
        args = train_args(params, work, "dclr" if where == "dclr" else "simcse")
    return run_stage(script, [*args, *common], work, stage_env)


SMALL = {  # small tasks, so a stage that runs does so in seconds
    "eval": {"sts": {"tasks": ["STSBenchmark"]}},
    "refine": {"methods": ["whitening"], "fit_on": "corpus", "corpus_size": 300},
    "train": {"batch_size": 16, "max_steps": 2, "eval_steps": 2},
}

REFUSED = [(a, pooler) for a in ARCHITECTURES for pooler in POOLERS if refused(a, pooler)]


@pytest.mark.parametrize("where", list(WHERE))
@pytest.mark.parametrize(("architecture", "pooler"), REFUSED)
def test_a_pair_certain_to_fail_is_refused_before_anything_is_encoded(
    tmp_path: Path,
    data_root: Path,
    stage_env: dict,
    models: dict[str, Path],
    encoded: list[int],
    architecture: str,
    pooler: str,
    where: str,
) -> None:
    model, param = models[architecture], WHERE[where][1]
    error = last_error(run(where, tmp_path, data_root, stage_env, model, pooler, **SMALL))
    start = "model.name_or_path: " if architecture == "t5" else f"{param}: {pooler!r} "
    assert error.startswith(f"error: {start}"), error
    assert f"model.name_or_path: {model}{expected(architecture, pooler, param)[1]}" in error
    assert encoded == []
    assert sorted(p.name for p in tmp_path.iterdir()) == ["params.yaml"]  # no lock either


@pytest.mark.parametrize(
    ("architecture", "pooler"),
    [("bert-no-pooler-weights", "cls"), ("bert-no-cls", "cls_before_pooler"), ("gpt2", "mean")],
)
def test_a_doubtful_pair_is_a_warning_and_is_scored(
    tmp_path: Path,
    data_root: Path,
    stage_env: dict,
    models: dict[str, Path],
    architecture: str,
    pooler: str,
) -> None:
    """`cls` over a pooler layer the checkpoint lacks and [CLS] pooling of a tokenizer that adds
    no [CLS] are warned about, and scored; a causal LM with mean pooling is scored."""
    model = models[architecture]
    done = run("evaluate", tmp_path, data_root, stage_env, model, pooler, **SMALL)
    assert done.returncode == 0, done.stderr[-3000:]
    warnings = [line for line in done.stderr.splitlines() if "WARNING sentemb.model_checks" in line]
    doubt = expected(architecture, pooler, "model.pooler")
    assert len(warnings) == int(doubt is not None)
    if doubt is not None:
        assert f"WARNING sentemb.model_checks: {doubt[1]}{model} " in warnings[0]
    assert (tmp_path / "out" / "sts.json").is_file()


# -- any other model whose vectors cannot be used: refused on a probe -------------------------

PROBED = {  # fault -> the error after the model's name, and the cause it names
    "constant": (
        f"the encoder gave the same vector for all {PROBE_SIZE} sentences of a probe",
        f"likely cause: weights of {{model}} that are all zero: {LAST_NORM}.weight",
    ),
    "nan": (
        f"the encoder gave non-finite vectors (NaN or inf) for {PROBE_SIZE} of {PROBE_SIZE} "
        "sentences of a probe",
        "likely cause: weights of {model} that are NaN or infinite: embeddings.LayerNorm.weight",
    ),
}


@pytest.mark.parametrize("where", ["evaluate", "refine", "analyze", "train"])
@pytest.mark.parametrize("fault", list(PROBED))
def test_unusable_vectors_are_refused_on_a_probe_naming_their_cause(
    tmp_path: Path,
    data_root: Path,
    stage_env: dict,
    models: dict[str, Path],
    encoded: list[int],
    fault: str,
    where: str,
) -> None:
    """A BERT whose vectors are all the same (a zeroed LayerNorm) or NaN: one error after
    encoding `PROBE_SIZE` sentences, not thousands, naming the weights; training takes no
    lock."""
    model = models[fault]
    error = last_error(
        run(where, tmp_path, data_root, stage_env, model, "cls_before_pooler", **SMALL)
    )
    problem, cause = PROBED[fault]
    assert error.startswith(f"error: {model}: {problem} (their tokens differ), before encoding")
    assert error.endswith(cause.format(model=model)), error
    assert encoded == [PROBE_SIZE]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["params.yaml"]


@pytest.mark.parametrize(
    ("where", "param"), [("evaluate", "model.max_length"), ("train", "train.max_length")]
)
def test_a_max_length_that_leaves_only_special_tokens_is_refused(
    tmp_path: Path,
    data_root: Path,
    stage_env: dict,
    tiny_model_dir: Path,
    encoded: list[int],
    where: str,
    param: str,
) -> None:
    """Truncated to 2 tokens, every sentence is [CLS] [SEP]: one vector for all."""
    section, key = param.split(".")
    sections = {**SMALL, section: {**SMALL.get(section, {}), key: 2}}
    error = last_error(
        run(where, tmp_path, data_root, stage_env, tiny_model_dir, "mean", **sections)
    )
    assert error == (
        f"error: {param}: must be in [3, 128] for {tiny_model_dir} (2 special token(s) plus a "
        "word; 128 positions), got 2"
    )
    assert encoded == []
    assert sorted(p.name for p in tmp_path.iterdir()) == ["params.yaml"]


def test_refused_vectors_name_the_doubts_and_fp16(models: dict[str, Path]) -> None:
    """Whatever the model shows that would explain refused vectors is in the error."""
    encoder = Encoder.from_pretrained(str(models["bert-no-pooler-weights"]), "cls")
    encoder.precision = "fp16"
    with pytest.raises(UnusableVectors) as refused:
        check_vectors(np.full((3, 2), np.nan, dtype=np.float32), encoder)
    message = str(refused.value)
    assert message.startswith("the encoder gave non-finite vectors (NaN or inf) for 3 of 3 ")
    assert "; likely causes: fp16 autocast (model.precision: fp16)" in message
    assert "; 'cls' passes [CLS] through the pooler layer, which the checkpoint of" in message
    with pytest.raises(UnusableVectors, match=r"sentences: it cannot tell sentences apart, so no "):
        check_vectors(np.ones((3, 2), dtype=np.float32), encoder)
