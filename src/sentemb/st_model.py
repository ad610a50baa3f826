"""The pipeline's encoders as sentence-transformers models, for training with its trainer.

`st_model(path, pooler, ...)` is a `SentenceTransformer` of sentence-transformers' Transformer
module and `Pool`, which pools with the pipeline's own poolers (`sentemb.pooling.POOLERS`): the
model the losses of `sentemb.losses` train, so every pooler, a new one too, pools in training
as it does at evaluation. The folder is checked as `Encoder.from_pretrained` checks it, and a
pooler certain to give unusable vectors of the model is refused with the same error.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from sentence_transformers.base.modules import Module
from torch import nn

from sentemb.config import ConfigError
from sentemb.model_files import check_model_folder, loading_errors, resolve_model
from sentemb.pooling import POOLERS, check_pooler, pool

if TYPE_CHECKING:
    from sentence_transformers import SentenceTransformer


class Pool(Module):
    """A pooler of `POOLERS` as a sentence-transformers module: the sentence vector from the
    token vectors (every layer's, for a pooler that averages layers) and, for `cls`, the
    backbone's pooler layer (`layer`, held but not saved: it is the backbone's)."""

    config_keys: ClassVar[list[str]] = ["pooler", "dim"]

    def __init__(self, pooler: str, dim: int, layer: nn.Module | None = None) -> None:
        super().__init__()
        self.pooler, self.dim, self._layer = pooler, dim, [layer]

    @property
    def hidden_states(self) -> bool:
        """Whether it pools more than the last layer (the model must give every layer)."""
        return POOLERS[self.pooler].layers != (-1,)

    def forward(self, features: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        hidden = features.get("all_layer_embeddings") or (features["token_embeddings"],)
        mask = features["attention_mask"]
        features["sentence_embedding"] = pool(self.pooler, hidden, mask, self._layer[0])
        return features

    def get_sentence_embedding_dimension(self) -> int:
        return self.dim

    def save(
        self, output_path: str, *args: Any, safe_serialization: bool = True, **kw: Any
    ) -> None:
        self.save_config(output_path)


def st_model(
    name_or_path: str,
    pooler: str,
    max_length: int,
    *,
    param: str = "model.name_or_path",
    pooler_param: str = "train.pooler",
    trust_remote_code: bool = False,
    attention: str | None = None,
    device: str | None = None,
) -> SentenceTransformer:
    """A `SentenceTransformer` of the model `name_or_path` (a folder, or a hub name, resolved
    and checked as `Encoder.from_pretrained` does), pooling with `pooler`, cutting sentences at
    `max_length` tokens, with `attention` (transformers' `attn_implementation`; None: its
    default). Its tokenizer pads on the right, with `pad_tokenizer`'s fallback pad token."""
    from sentence_transformers.base.modules import Transformer
    from transformers import AutoConfig
    from transformers.utils import logging as transformers_logging

    from sentemb.model_checks import ENCODER_DECODER, check_vocabulary, pad_tokenizer

    if not sys.stderr.isatty():  # their bars (loading weights, writing them) garble a log file
        transformers_logging.disable_progress_bar()
    check_pooler(pooler, pooler_param)
    path = resolve_model(name_or_path, param)
    if Path(path).is_dir():
        check_model_folder(Path(path), trust_remote_code, param)
    model_kwargs = {"trust_remote_code": trust_remote_code, "use_safetensors": True}
    if attention is not None:
        model_kwargs["attn_implementation"] = attention
    with loading_errors(param, name_or_path):
        config = AutoConfig.from_pretrained(path, trust_remote_code=trust_remote_code)
        if getattr(config, "is_encoder_decoder", False):  # before its encoder alone loads
            kind = (config.architectures or [config.model_type])[0]
            raise ConfigError(f"{param}: {name_or_path} ({kind}) {ENCODER_DECODER}")
        transformer = Transformer(
            path,
            max_seq_length=max_length,
            model_kwargs=model_kwargs,
            processor_kwargs={"trust_remote_code": trust_remote_code},
            config_kwargs={"trust_remote_code": trust_remote_code},
            unpad_inputs=False,
        )
    check_vocabulary(transformer.tokenizer, transformer.auto_model, param, name_or_path)
    pad_tokenizer(transformer.tokenizer, param, name_or_path)
    return pooled(transformer, pooler, pooler_param, name_or_path, param, device)


def pooled(
    transformer: nn.Module,
    pooler: str,
    pooler_param: str,
    name: str,
    param: str,
    device: str | None = None,
) -> SentenceTransformer:
    """A `SentenceTransformer` of `transformer` (sentence-transformers' Transformer module)
    pooling with `pooler`; a pooler certain to give unusable vectors of its model (the first
    token of a model that attends causally, `cls` without a pooler layer) is refused as the
    pipeline's encoder refuses it, naming `pooler_param` and the model (`param`: `name`)."""
    from sentence_transformers import SentenceTransformer

    from sentemb.encoder import Encoder

    backbone = transformer.auto_model
    Encoder(
        backbone, transformer.tokenizer, pooler, pooler_param=pooler_param, name=name, param=param
    )
    layer = getattr(backbone, "pooler", None) if POOLERS[pooler].dense else None
    pooling = Pool(pooler, transformer.get_embedding_dimension(), layer)
    return SentenceTransformer(modules=[transformer, pooling], device=device)
