"""One encoder wrapper for any Hugging Face backbone: a backbone, its tokenizer and a pooler of
`sentemb.pooling`, loaded from a folder or hub name that `sentemb.model_files` resolves and checks.

What it refuses or warns about (another model's tokenizer, a `max_length` or pooler that would
give unusable vectors) is `sentemb.model_checks`; the autocast it encodes under is
`sentemb.precision`. `Encoder.save` writes a folder that both `Encoder.from_pretrained` and
`SentenceTransformer(folder)` load, for every pooler sentence-transformers has.
"""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Collection, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from tqdm.auto import tqdm

from sentemb.config import ConfigError
from sentemb.model_checks import (
    ENCODER_DECODER,
    check_length,
    check_pooling,
    check_vocabulary,
    pad_tokenizer,
    suspects,
)
from sentemb.model_files import (
    POOLER_FILE,
    check_model_folder,
    loading_errors,
    resolve_model,
    saved_pooler,
)
from sentemb.pooling import POOLERS, check_pooler, pool
from sentemb.precision import autocast


@dataclass
class EncoderOutput:
    """What a forward pass gives a training method: the pooled vector and every layer."""

    pooled: torch.Tensor
    hidden_states: tuple[torch.Tensor, ...]
    attention_mask: torch.Tensor


class Encoder(torch.nn.Module):
    """A backbone, its tokenizer and a pooler; `encode` turns sentences into vectors."""

    def __init__(
        self,
        backbone,
        tokenizer,
        pooler: str,
        max_length: int | None = None,
        precision: str = "auto",
        pooler_param: str = "pooler",
        length_param: str = "model.max_length",
        *,
        name: str | None = None,
        param: str = "model",
        auto: bool = False,
        untrained: Collection[str] = (),
    ) -> None:
        """`name` and `param` name the model in errors (default: the backbone's path); `auto`
        says `pooler` was the model's own choice; `untrained` are the weights transformers
        initialised at random because the checkpoint lacks them."""
        super().__init__()
        self.backbone, self.tokenizer, self.precision = backbone, tokenizer, precision
        self.name = name or str(getattr(backbone, "name_or_path", type(backbone).__name__))
        self.label = f"{param}: {self.name} ({type(backbone).__name__})"  # in errors
        self.untrained = frozenset(untrained)
        if getattr(getattr(backbone, "config", None), "is_encoder_decoder", False):
            raise ConfigError(f"{self.label} {ENCODER_DECODER}")
        self.max_length = self.positions
        if max_length is not None:
            self.max_length = check_length(self, max_length, length_param)
        self.pooler = check_pooling(self, pooler, pooler_param, auto)

    @property
    def positions(self) -> int:
        """The most tokens one sentence may have: the model's position embeddings (512 where the
        config names none), less those RoBERTa-like models reserve below their first position
        (`padding_idx` + 1)."""
        config = getattr(self.backbone, "config", None)
        positions = getattr(config, "max_position_embeddings", None) or 512
        reserved = getattr(getattr(self.backbone, "embeddings", None), "padding_idx", None)
        return positions - (reserved + 1 if isinstance(reserved, int) else 0)

    @classmethod
    def from_pretrained(
        cls,
        name_or_path: str,
        pooler: str = "auto",
        max_length: int | None = None,
        trust_remote_code: bool = False,
        precision: str = "auto",
        param: str = "model.name_or_path",
        pooler_param: str = "pooler",
    ) -> Encoder:
        """Load any HF model name or local folder; `pooler='auto'` follows its ST config;
        `precision` is the autocast `encode` runs under; `param` and `pooler_param` name the
        settings of the model and the pooler in errors (the pooler's before the model is looked
        up)."""
        check_pooler(pooler, pooler_param, auto=True)
        path = resolve_model(name_or_path, param)
        from transformers import AutoModel, AutoTokenizer
        from transformers.utils import logging as transformers_logging

        if not sys.stderr.isatty():  # their bars (loading weights, downloads) garble a log file
            transformers_logging.disable_progress_bar()
        if Path(path).is_dir():
            check_model_folder(Path(path), trust_remote_code, param)
        auto = pooler == "auto"
        if auto:
            pooler = saved_pooler(path, param) or "cls_before_pooler"
        with loading_errors(param, name_or_path):
            tokenizer = AutoTokenizer.from_pretrained(path, trust_remote_code=trust_remote_code)
            backbone, loading = AutoModel.from_pretrained(
                path,
                trust_remote_code=trust_remote_code,
                use_safetensors=True,
                output_loading_info=True,
            )
        check_vocabulary(tokenizer, backbone, param, name_or_path)
        pad_tokenizer(tokenizer, param, name_or_path)
        return cls(
            backbone,
            tokenizer,
            pooler,
            max_length,
            precision,
            pooler_param,
            name=name_or_path,
            param=param,
            auto=auto,
            untrained=loading["missing_keys"],
        )

    def suspects(self, non_finite: bool) -> list[str]:
        """What would explain vectors of this encoder that are not finite (`non_finite`) or the
        same for every sentence (`model_checks.suspects`); evaluation asks through the
        structural `evaluation.base.Model`, so that it imports no torch."""
        return suspects(self, non_finite)

    def save(self, folder: Path) -> None:
        """`save_pretrained` weights and tokenizer, our pooler file and, where the pooler is one
        sentence-transformers has, its module config, so `SentenceTransformer(folder)` loads it.
        The config is written here, in the format `model_files.sentence_transformers_pooler`
        reads, not by `SentenceTransformer.save`: nothing in the folder depends on the installed
        library versions, so the same weights always give the same files."""
        folder.mkdir(parents=True, exist_ok=True)
        self.backbone.save_pretrained(folder)
        self.tokenizer.save_pretrained(folder)
        (folder / POOLER_FILE).write_text(json.dumps({"pooler": self.pooler}) + "\n")
        st_mode = POOLERS[self.pooler].st_mode
        if st_mode is None:
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
        modes = [spec.st_mode for spec in POOLERS.values() if spec.st_mode is not None]
        pooling |= {mode: mode == st_mode for mode in modes}
        (folder / "1_Pooling").mkdir(exist_ok=True)
        (folder / "1_Pooling" / "config.json").write_text(json.dumps(pooling, indent=1) + "\n")

    @property
    def device(self) -> torch.device:
        return next(self.backbone.parameters()).device

    def autocast(self) -> torch.autocast:
        """The autocast context of this encoder's `precision` on its device."""
        return autocast(self.precision, self.device)

    def tokenize(self, sentences: Sequence[str], max_length: int | None = None) -> dict:
        """Padded, truncated tensors."""
        return self.tokenizer(
            list(sentences),
            padding=True,
            truncation=True,
            max_length=max_length or self.max_length,
            return_tensors="pt",
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

    def pad(self, ids: Sequence[Sequence[int]]) -> dict[str, torch.Tensor]:
        """Token ids of several sentences as one batch on this encoder's device, padded on the
        right to the longest with the pad token and masked (what `tokenize` gives them)."""
        width = max(len(row) for row in ids)
        input_ids = torch.full((len(ids), width), self.tokenizer.pad_token_id, dtype=torch.long)
        attention_mask = torch.zeros((len(ids), width), dtype=torch.long)
        for i, row in enumerate(ids):
            input_ids[i, : len(row)] = torch.tensor(row, dtype=torch.long)
            attention_mask[i, : len(row)] = 1
        return {
            "input_ids": input_ids.to(self.device),
            "attention_mask": attention_mask.to(self.device),
        }

    def batches(
        self, sentences: Sequence[str], batch_size: int, special_tokens_mask: bool = False
    ) -> Iterator[tuple[list[int], dict[str, torch.Tensor]]]:
        """`sentences` tokenized once (truncated to `max_length`, unpadded) and batched by token
        count, longest first, each batch padded to its own longest (`pad`): little padding, and a
        sentence's vector does not depend on its batch beyond autocast rounding. Yields each
        batch's positions in `sentences` and its tensors; `special_tokens_mask` adds 1 at [CLS],
        [SEP] and padding, as `tokenize` gives it."""
        tokens: dict[str, list[list[int]]] = {"input_ids": []}
        if sentences:  # the tokenizer refuses an empty list
            tokens = self.tokenizer(
                list(sentences),
                truncation=True,
                max_length=self.max_length,
                return_special_tokens_mask=special_tokens_mask,
            )
        ids = tokens["input_ids"]
        order = sorted(range(len(ids)), key=lambda i: -len(ids[i]))
        for start in range(0, len(order), batch_size):
            index = order[start : start + batch_size]
            batch = self.pad([ids[i] for i in index])
            if special_tokens_mask:
                width = batch["input_ids"].shape[1]
                rows = [tokens["special_tokens_mask"][i] for i in index]
                special = [row + [1] * (width - len(row)) for row in rows]
                batch["special_tokens_mask"] = torch.tensor(special, device=self.device)
            yield index, batch

    def distinct_inputs(self, sentences: Sequence[str], count: int) -> list[str]:
        """The first `count` of `sentences` whose token ids, truncated as `batches` truncates
        them, differ (two sentences alike but for case, say, are one input), looked for among
        the first `64 * count`."""
        scanned = list(sentences[: 64 * count])
        if not scanned:
            return []
        ids = self.tokenizer(scanned, truncation=True, max_length=self.max_length)["input_ids"]
        inputs: dict[tuple[int, ...], str] = {}
        for row, sentence in zip(ids, scanned, strict=True):
            inputs.setdefault(tuple(row), sentence)
        return list(inputs.values())[:count]

    @torch.inference_mode()
    def encode(
        self, sentences: Sequence[str], batch_size: int = 128, show_progress: bool = True
    ) -> np.ndarray:
        """One float32 vector per sentence, in order, under this encoder's autocast, in the
        token-count batches of `batches`. Duplicates are encoded as often as they appear:
        `evaluation.base.CachedEncoder` encodes each once. The progress bar (`show_progress`) is
        drawn only when stderr is a terminal (tqdm's `disable=None`), so logs written to a file
        carry none.
        """
        vectors = np.zeros((len(sentences), self.backbone.config.hidden_size), dtype=np.float32)
        was_training = self.training
        self.eval()
        try:
            bar = tqdm(
                self.batches(sentences, batch_size),
                desc="encode",
                unit="batch",
                total=math.ceil(len(sentences) / batch_size),
                disable=None if show_progress else True,
            )
            for index, batch in bar:
                with self.autocast():
                    pooled = self(batch["input_ids"], batch["attention_mask"]).pooled
                vectors[index] = pooled.float().cpu().numpy()
        finally:
            self.train(was_training)
        return vectors
