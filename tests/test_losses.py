"""Every method as a sentence-transformers loss, outside the pipeline: built from the model
alone with params.yaml's defaults, trained by the stock `SentenceTransformerTrainer` on a
one-column dataset of sentences (its own collator, which hands the loss token ids only)."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import torch

from sentemb.config import ConfigError
from sentemb.losses import OneMethodLoss, method_loss, method_losses
from sentemb.methods.base import SimCSEConfig
from sentemb.methods.sscl import SSCLConfig, SSCLLoss
from sentemb.registry import METHODS
from sentemb.trained_parts import TrainedParts

from support.training import SENTENCES

SPECS = [*METHODS, "iscse+dclr", "sscl+dclr"]


def train(model, loss, folder: Path, steps: int = 3) -> list[float]:
    """`steps` steps of the stock trainer on SENTENCES; the logged losses."""
    from datasets import Dataset
    from sentence_transformers import (
        SentenceTransformerTrainer,
        SentenceTransformerTrainingArguments,
    )

    args = SentenceTransformerTrainingArguments(
        output_dir=str(folder),
        per_device_train_batch_size=8,
        max_steps=steps,
        logging_steps=1,
        use_cpu=True,
        report_to="none",
        save_strategy="no",
        disable_tqdm=True,
        seed=0,
    )
    data = Dataset.from_dict({"text": SENTENCES})
    trainer = SentenceTransformerTrainer(model=model, args=args, train_dataset=data, loss=loss)
    trainer.train()
    return [row["loss"] for row in trainer.state.log_history if "loss" in row]


@pytest.mark.parametrize("spec", SPECS)
def test_each_method_trains_through_the_stock_trainer(
    tiny_model_dir: Path, tmp_path: Path, spec: str
) -> None:
    """The README's five lines: `method_loss(spec, model)` with params.yaml's defaults (IS-CSE's
    buffer shrunk to fit 3 steps of 8), trained by sentence-transformers' own trainer and
    collator: finite losses, the model's weights moved, and the loss's own gradients cleared
    after each step, with the model's (they are the model's: `TrainedParts`)."""
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(str(tiny_model_dir), device="cpu")
    loss = method_loss(
        spec, model, {"iscse": {"buffer_size": 16, "k": 2}, "paser": {"decoder_layers": 1}}
    )
    before = [p.detach().clone() for p in model.parameters()]
    losses = train(model, loss, tmp_path)
    assert len(losses) == 3 and all(math.isfinite(v) for v in losses)
    assert any(not torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))
    assert all(p.grad is None for p in loss.own_parameters())
    if spec in METHODS:
        assert type(loss) is method_losses()[spec]


def test_a_loss_class_takes_its_section_typed(tiny_st) -> None:
    """`SSCLLoss(model, SSCLConfig(layers=[-2]))` sets params of `sscl`; a value out of range is
    the params file's own error, since the config is checked as a section is."""
    config = SSCLConfig(layers=[-2], variant="self", average_with_simcse=False)
    assert SSCLLoss(tiny_st, config).parts["sscl"].config == config
    with pytest.raises(ConfigError, match=r"^sscl.layers\[0\]: must be <= -2, got -1"):
        SSCLLoss(tiny_st, SSCLConfig(layers=[-1]))
    with pytest.raises(ConfigError, match=r"^simcse.temperature: must be in \[0.001, 1\]"):
        SSCLLoss(tiny_st, simcse=SimCSEConfig(temperature=0.0))


@pytest.mark.parametrize("name", list(METHODS))
def test_every_method_has_its_loss_class_in_its_file(name: str) -> None:
    """A method is one file: its part, its params dataclass, and its loss class, whose typed
    argument is that dataclass, with the paper and a usage example in its docstring."""
    found = [cls for cls in OneMethodLoss.__subclasses__() if cls.method == name]
    assert len(found) == 1, f"{name}: {found}"
    cls = found[0]
    assert cls.__module__ == METHODS[name].cls.__module__
    assert cls.__orig_bases__[0].__args__ == (METHODS[name].config,)
    assert "Example::" in cls.__doc__ and f"{cls.__name__}(model" in cls.__doc__


def test_the_head_exists_only_for_contrastive_objectives(tiny_st, tmp_path: Path) -> None:
    from support.training import paser_params

    assert method_loss("simcse", tiny_st).own_parameters()
    paser = method_loss("paser", tiny_st, {"paser": paser_params(tmp_path)})
    assert not any(name.startswith("head.") for name, _ in paser.named_parameters())


def test_no_call_argument_gives_every_layer(tiny_st) -> None:
    """sentence-transformers hands the pooling modules every layer only where the backbone's
    config says so, whatever the call asks: the one reason `losses.every_layer` flips it for
    the call. Once a call's argument gives them, this fails and the switch can go."""
    features = tiny_st.tokenize(["a sentence", "another one"])
    out = tiny_st({**features, "output_hidden_states": True})
    assert "all_layer_embeddings" not in out
    assert tiny_st[0].auto_model.config.output_hidden_states is False


@pytest.mark.parametrize("before", [False, True])
@pytest.mark.parametrize("spec", ["simcse", "sscl", "sscl+paser"])
def test_a_forward_leaves_the_model_config_as_it_was(
    tiny_st, tmp_path: Path, spec: str, before: bool
) -> None:
    """The model's config is the same object every other user of the model reads (its
    evaluation, a save): a loss's forward, failed or not, leaves it as it was."""
    from support.training import paser_params

    config = tiny_st[0].auto_model.config
    config.output_hidden_states = before
    loss = method_loss(spec, tiny_st, {"paser": paser_params(tmp_path)})
    features = tiny_st.tokenize(SENTENCES[:4])
    seen = []
    forward = tiny_st[0].auto_model.forward

    def watch(*args, **kwargs):
        seen.append(config.output_hidden_states)
        return forward(*args, **kwargs)

    tiny_st[0].auto_model.forward = watch
    assert all(torch.isfinite(t) for t in loss([dict(features)]).values())
    assert config.output_hidden_states is before
    assert set(seen) == {before or "sscl" in spec}
    with pytest.raises(RuntimeError):
        loss([{**features, "input_ids": features["input_ids"][:, :0] - 1}])
    assert config.output_hidden_states is before


def test_the_loss_weights_are_the_models_last_module(tiny_model_dir: Path, tmp_path: Path) -> None:
    """The loss's own trainable weights are the model's last module (`TrainedParts`), under
    the loss's names: among the model's parameters (the trainer's zero_grad, clipping and DDP
    cover them), saved and loaded with the model (its checkpoints), not in the loss's `state`.
    A loss built later on the model replaces them; one without own weights removes them."""
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(str(tiny_model_dir), device="cpu")
    modules = len(model)
    loss = method_loss("simcse+paser", model, {"paser": {"decoder_layers": 1}})
    parts = model[-1]
    assert isinstance(parts, TrainedParts) and len(model) == modules + 1
    names = {name for name, _ in parts.named_parameters()}
    assert "head.dense.weight" in names
    assert any(name.startswith("parts.paser.decoder.") for name in names)
    theirs = {id(p) for p in model.parameters()}
    assert loss.own_parameters() and all(id(p) in theirs for p in loss.own_parameters())
    assert not any(key.startswith(("head.", "model.")) for key in loss.state())
    sentences = ["one sentence", "and another one"]
    model.save(str(tmp_path / "saved"))
    # a module outside sentence-transformers: ST asks to trust it (the trainer's resume does)
    loaded = SentenceTransformer(str(tmp_path / "saved"), device="cpu", trust_remote_code=True)
    assert isinstance(loaded[-1], TrainedParts)
    saved, back = parts.state_dict(), loaded[-1].state_dict()
    assert saved.keys() == back.keys() and all(torch.equal(saved[k], back[k]) for k in saved)
    assert np.array_equal(loaded.encode(sentences), model.encode(sentences))
    method_loss("simcse", model)
    assert len(model) == modules + 1 and model[-1] is not parts
    assert {name for name, _ in model[-1].named_parameters()} == {
        "head.dense.weight",
        "head.dense.bias",
    }
    method_loss("simcse", model, mlp_head=False)
    assert len(model) == modules and not isinstance(model[-1], TrainedParts)


def test_weight_decay_spares_the_own_modules_biases_and_layernorms(
    tiny_model_dir: Path, tmp_path: Path
) -> None:
    """The loss's own modules go into the model as the modules they are: the trainer's weight
    decay spares the LayerNorms of PaSeR's decoder and the head's bias, as it spares the
    model's, and decays the head's weight."""
    from datasets import Dataset
    from sentence_transformers import (
        SentenceTransformer,
        SentenceTransformerTrainer,
        SentenceTransformerTrainingArguments,
    )

    model = SentenceTransformer(str(tiny_model_dir), device="cpu")
    loss = method_loss("simcse+paser", model, {"paser": {"decoder_layers": 1}})
    args = SentenceTransformerTrainingArguments(
        output_dir=str(tmp_path), weight_decay=0.1, use_cpu=True, report_to="none"
    )
    data = Dataset.from_dict({"text": SENTENCES})
    trainer = SentenceTransformerTrainer(model=model, args=args, train_dataset=data, loss=loss)
    trainer.create_optimizer()
    groups = trainer.optimizer.param_groups
    decayed = {id(p) for group in groups if group["weight_decay"] > 0 for p in group["params"]}
    norms = [m for m in loss.parts["paser"].modules() if isinstance(m, torch.nn.LayerNorm)]
    assert norms and not any(id(m.weight) in decayed for m in norms)
    assert id(loss.head.dense.weight) in decayed and id(loss.head.dense.bias) not in decayed


def test_paser_without_mlm_has_no_mlm_head(tiny_st) -> None:
    """`mlm_weight: 0` builds no MLM head: a weight no step reaches would stall DDP."""
    loss = method_loss("paser", tiny_st, {"paser": {"decoder_layers": 1, "mlm_weight": 0.0}})
    assert loss.parts["paser"].mlm is None
    assert not any(name.startswith("parts.paser.mlm") for name, _ in tiny_st[-1].named_parameters())


class LooksForUnused(torch.nn.Module):
    """A stand-in for DDP built with `find_unused_parameters=True`."""

    find_unused_parameters = True


def test_a_ddp_model_that_looks_for_unused_weights_is_refused(tiny_st) -> None:
    """The loss's own weights are used outside the model's forward: DDP looking for unused
    parameters would fail with its own error at the second step; the loss names the fix."""
    loss = method_loss("simcse", tiny_st)
    loss.model = LooksForUnused()
    with pytest.raises(RuntimeError, match="ddp_find_unused_parameters=False"):
        loss([{"input_ids": torch.ones(2, 3, dtype=torch.long)}])
