"""Copies of the tiny model folder with one fault (`broken_copy`) or edited weights
(`edited_copy`)."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

LAST_NORM = "encoder.layer.1.output.LayerNorm"


def broken_copy(source: Path, target: Path, fault: str) -> Path:
    """A copy of the tiny model folder with one fault."""
    shutil.copytree(source, target)
    config_file = target / "config.json"
    if fault == "no weights":
        (target / "model.safetensors").unlink()
    elif fault == "no config":
        config_file.unlink()
    elif fault == "remote code":  # its code would exit the test run if it were ever imported
        config = json.loads(config_file.read_text())
        config |= {"model_type": "custom-bert", "auto_map": {"AutoModel": "custom.Model"}}
        config_file.write_text(json.dumps(config))
        (target / "custom.py").write_text("raise SystemExit('remote code ran')\n")
    elif fault == "other tokenizer":  # an embedding of 1,000 rows under a 30,522-token tokenizer
        from transformers import BertConfig, BertModel

        BertModel(BertConfig.from_pretrained(target, vocab_size=1000)).save_pretrained(target)
    elif fault == "pickle weights":  # what save_pretrained wrote before safetensors
        from safetensors.torch import load_file

        torch.save(load_file(target / "model.safetensors"), target / "pytorch_model.bin")
        (target / "model.safetensors").unlink()
    elif fault == "config not JSON":
        config_file.write_text('{"model_type": "bert",')
    elif fault == "pooler file damaged":
        (target / "sentemb_pooler.json").write_text('{"pooler": "max"}')
    elif fault == "pooling config missing":  # modules.json names a folder that is not there
        modules = [{"idx": 1, "name": "1", "path": "1_Pooling", "type": "x.models.Pooling"}]
        (target / "modules.json").write_text(json.dumps(modules))
    elif fault == "damaged weights":  # cut short, as by a full disk or an interrupted copy
        weights = (target / "model.safetensors").read_bytes()
        (target / "model.safetensors").write_bytes(weights[: len(weights) // 2])
    return target


def edited_copy(
    source: Path, folder: Path, edit: Callable[[dict[str, torch.Tensor]], None]
) -> Path:
    """A copy of the model folder `source` whose weights went through `edit`."""
    shutil.copytree(source, folder)
    weights = load_file(folder / "model.safetensors")
    edit(weights)
    save_file(weights, folder / "model.safetensors", metadata={"format": "pt"})
    return folder


def set_weight(name: str, value: float) -> Callable[[dict[str, torch.Tensor]], None]:
    def edit(weights: dict[str, torch.Tensor]) -> None:
        weights[name] = torch.full_like(weights[name], value)

    return edit


def random_bert(folder: Path, tokenizer: str | Path, seed: int, **config: object) -> Path:
    """A random BERT (`config`: `BertConfig`'s fields beside the MiniLM vocabulary) drawn with
    `seed` and saved in `folder` with the tokenizer at `tokenizer`."""
    from transformers import AutoTokenizer, BertConfig, BertModel

    torch.manual_seed(seed)
    BertModel(BertConfig(vocab_size=30522, **config)).save_pretrained(folder)
    AutoTokenizer.from_pretrained(tokenizer).save_pretrained(folder)
    return folder
