"""One encoder wrapper for any Hugging Face backbone: a backbone, its tokenizer and a pooler of
`sentemb.pooling`, loaded from a folder or hub name that `sentemb.model_files` resolves and checks.

A tokenizer of another model is refused. A tokenizer without a pad token pads with its
end-of-sequence token (or [SEP], or its unknown token): the attention mask hides padding, so the
vectors do not depend on the choice; padding is always on the right, where the poolers expect it.

A model and pooler certain to give unusable vectors are refused when the pooler is chosen, before
anything is encoded (`Encoder.check_pooling`): an encoder-decoder model, a `max_length` that
leaves only special tokens, `cls` without a pooler layer, and a pooler of the first token on a
model that attends causally (a decoder-only LM: its first token sees only itself, so every
sentence gets one vector). Doubtful ones are warnings, and are named again, with weights that
are not finite or all zero, when vectors are refused (`Encoder.suspects`).
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import logging
import math
import platform
import sys
from collections.abc import Collection, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from tqdm.auto import tqdm

from sentemb.config import ConfigError
from sentemb.model_files import (
    POOLER_FILE,
    check_model_folder,
    remote_code_refused,
    resolve_model,
    saved_pooler,
)
from sentemb.pooling import POOLERS, check_pooler, cls_vector, pool

log = logging.getLogger(__name__)
ENCODER_DECODER = (
    "is an encoder-decoder model: its forward pass needs decoder inputs, and the pipeline pools "
    "the token vectors of one encoder; use an encoder-only model (BERT-like), or a decoder-only "
    "one with mean pooling"
)


@functools.cache
def native_bf16() -> bool:
    """Whether this CPU runs bf16 matrix products natively: not an x86 CPU, or one with bf16
    instructions (AVX512-BF16, AMX), by torch's own probes (where a torch lacks them, assumed).
    An x86 CPU without them emulates bf16: on a 2-core AMD EPYC with AVX2 only a training step
    took 26x fp32's time, encoding 2.7x (benchmarks/precision_avx2.json)."""
    if platform.machine().lower() not in ("x86_64", "amd64"):
        return True  # no other CPU was measured: bf16 as before
    probes = ("_is_avx512_bf16_supported", "_is_amx_tile_supported")
    return any(getattr(torch.cpu, probe, lambda: True)() for probe in probes)


def autocast_dtype(precision: str, device: torch.device) -> torch.dtype | None:
    """The autocast dtype of `precision` on `device`, None for fp32. `auto` is bf16 on CUDA
    (fp16 on a GPU without bf16) and on a CPU with bf16 instructions (`native_bf16`), where it
    ran MiniLM's encoding 1.9-2.7x and training steps 1.7-2.2x faster than fp32
    (benchmarks/precision.py); fp32 on a CPU without them."""
    if precision == "auto":
        if device.type == "cuda":
            return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
        return torch.bfloat16 if native_bf16() else None
    return {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}[precision]


def precision_used(precision: str, device: torch.device) -> str:
    """What `precision` runs as on `device`: `fp32`, `bf16` or `fp16` (`auto` resolved)."""
    return {None: "fp32", torch.bfloat16: "bf16", torch.float16: "fp16"}[
        autocast_dtype(precision, device)
    ]


def autocast(precision: str, device: torch.device) -> torch.autocast:
    """The autocast context of `precision` on `device` (disabled for fp32)."""
    dtype = autocast_dtype(precision, device)
    return torch.autocast(device.type, dtype or torch.float32, enabled=dtype is not None)


@contextlib.contextmanager
def loading_errors(param: str, name_or_path: str) -> Iterator[None]:
    """Loading a model as one `ConfigError` naming `param`: transformers' refusal of custom code
    on a hub model, damaged files, a hub model without safetensors."""
    from safetensors import SafetensorError

    try:
        yield
    except ValueError as err:
        if "trust_remote_code" not in str(err):
            raise
        raise ConfigError(remote_code_refused(param, name_or_path)) from err
    except (OSError, SafetensorError) as err:
        reason = " ".join(str(err).split())[:500]
        raise ConfigError(f"{param}: {name_or_path}: cannot be loaded: {reason}") from err


def check_vocabulary(tokenizer, backbone, param: str, name_or_path: str) -> None:
    """Refuse a tokenizer with more tokens than the model's embedding has rows: they belong to
    different models."""
    vocabulary = getattr(backbone.config, "vocab_size", None)
    if vocabulary is not None and len(tokenizer) > vocabulary:
        raise ConfigError(
            f"{param}: the tokenizer of {name_or_path} has {len(tokenizer)} "
            f"tokens but the model's embedding has {vocabulary} rows: they belong to "
            "different models"
        )


def pad_tokenizer(tokenizer, param: str, name_or_path: str) -> None:
    """Pad on the right, where the poolers expect it; a tokenizer without a pad token pads with
    its end-of-sequence token, else [SEP], else its unknown token (the attention mask hides
    padding, so the vectors do not depend on which), and one with none of them is refused."""
    tokenizer.padding_side = "right"
    if tokenizer.pad_token is not None:
        return
    fallback = tokenizer.eos_token or tokenizer.sep_token or tokenizer.unk_token
    if fallback is None:
        raise ConfigError(
            f"{param}: the tokenizer of {name_or_path} has no pad token, nor an end-of-sequence, "
            "[SEP] or unknown token to pad with; add one to its tokenizer_config.json"
        )
    log.warning(
        "%s: the tokenizer of %s has no pad token; padding with %r (masked out by the "
        "attention mask, so the vectors do not depend on it)",
        param,
        name_or_path,
        fallback,
    )
    tokenizer.pad_token = fallback


@dataclass
class EncoderOutput:
    """What a forward pass gives a training method: the pooled vector and every layer."""

    pooled: torch.Tensor
    hidden_states: tuple[torch.Tensor, ...]
    attention_mask: torch.Tensor


def listing(names: Sequence[str], shown: int = 3) -> str:
    """The first `shown` of `names`, and how many more."""
    more = f" and {len(names) - shown} more" if len(names) > shown else ""
    return ", ".join(names[:shown]) + more


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
        self._causal: bool | None = None  # `attends_causally`, found once
        if getattr(getattr(backbone, "config", None), "is_encoder_decoder", False):
            raise ConfigError(f"{self.label} {ENCODER_DECODER}")
        self.max_length = self.positions
        if max_length is not None:
            self.max_length = self.check_length(max_length, length_param)
        self.pooler = self.check_pooling(pooler, pooler_param, auto)

    @property
    def positions(self) -> int:
        """The most tokens one sentence may have: the model's position embeddings (512 where the
        config names none), less those RoBERTa-like models reserve below their first position
        (`padding_idx` + 1)."""
        config = getattr(self.backbone, "config", None)
        positions = getattr(config, "max_position_embeddings", None) or 512
        reserved = getattr(getattr(self.backbone, "embeddings", None), "padding_idx", None)
        return positions - (reserved + 1 if isinstance(reserved, int) else 0)

    def check_length(self, max_length: int, param: str) -> int:
        """`max_length` when a sentence cut to it keeps a word beside the tokenizer's special
        tokens and fits the model's positions; else a `ConfigError` naming `param` and the limit
        (too long fails at the first long batch; too short makes every sentence the same input,
        [CLS] [SEP], with the same vector)."""
        special = self.tokenizer.num_special_tokens_to_add(pair=False)
        if not special + 1 <= max_length <= self.positions:
            raise ConfigError(
                f"{param}: must be in [{special + 1}, {self.positions}] for {self.name} "
                f"({special} special token(s) plus a word; {self.positions} positions), "
                f"got {max_length}"
            )
        return max_length

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

    def check_pooling(self, pooler: str, param: str, auto: bool = False) -> str:
        """`pooler` when this model can pool with it. Certain to give unusable vectors, and so a
        `ConfigError` naming `param` (`auto`: chosen by the model), the model and the fix: `cls`
        on a backbone without a pooler layer, and a pooler of the first token on a model that
        attends causally (the first token sees only itself). Doubtful (`pooling_doubts`), and
        so logged as warnings: the first token being a word, a pooler layer not in the
        checkpoint."""
        check_pooler(pooler, param)
        shown = f"{param}: 'auto' (here {pooler!r})" if auto else f"{param}: {pooler!r}"
        spec = POOLERS[pooler]
        if spec.dense and getattr(self.backbone, "pooler", None) is None:
            raise ConfigError(
                f"{shown} needs a backbone with a pooler layer; {self.label} has none; "
                f"cls_before_pooler reads [CLS] without one, mean averages every token"
            )
        if spec.vector is cls_vector and self.attends_causally():
            first = self.first_token()
            sees = (
                f"the first token ({first}) sees only itself, so every sentence would get the "
                "same vector"
                if first
                else "the first token, a sentence's first word, sees only itself, so a "
                "sentence's vector would be that of its first word alone"
            )
            raise ConfigError(
                f"{shown} reads the first token, but {self.label} attends causally (each token "
                f"sees only those before it): {sees}; use mean ({param}: mean)"
            )
        for doubt in self.pooling_doubts(pooler):
            log.warning("%s: %s", param, doubt)
        return pooler

    def pooling_doubts(self, pooler: str) -> list[str]:
        """Why `pooler` may give this model's vectors little meaning, though not certainly."""
        spec, doubts = POOLERS[pooler], []
        if spec.vector is cls_vector and self.first_token() is None:
            doubts.append(
                f"{pooler!r} reads the first token, but the tokenizer of {self.name} puts no "
                "[CLS] or BOS token before a sentence: the first token is the sentence's first "
                "word; mean averages every token"
            )
        layer = getattr(self.backbone, "pooler", None)
        if spec.dense and layer is not None:
            names = sorted({f"pooler.{n}" for n, _ in layer.named_parameters()} & self.untrained)
            if names:
                doubts.append(
                    f"{pooler!r} passes [CLS] through the pooler layer, which the checkpoint of "
                    f"{self.name} lacks ({listing(names)}): transformers initialised it at "
                    "random, so the vectors change from load to load until it is trained; "
                    "cls_before_pooler reads [CLS] without it"
                )
        return doubts

    def suspects(self, non_finite: bool) -> list[str]:
        """What this encoder shows, as it is now, that would explain vectors that are not finite
        (`non_finite`) or the same for every sentence, likeliest first: weights that are not
        finite or all zero, (non-finite) fp16 autocast, its pooler's doubts."""
        found: list[str] = []
        weights = dict(self.backbone.named_parameters())
        broken = [n for n, w in weights.items() if not torch.isfinite(w).all()]
        if broken:
            found.append(f"weights of {self.name} that are NaN or infinite: {listing(broken)}")
        zero = [n for n, w in weights.items() if n.endswith("weight") and w.numel() > 1]
        zero = [n for n in zero if not weights[n].any()]
        if zero:
            found.append(f"weights of {self.name} that are all zero: {listing(zero)}")
        if non_finite and autocast_dtype(self.precision, self.device) == torch.float16:
            found.append(
                f"fp16 autocast (model.precision: {self.precision}), whose range (65504) "
                "activations can exceed; try fp32 or bf16"
            )
        return found + self.pooling_doubts(self.pooler)

    def first_token(self) -> str | None:
        """The token the tokenizer puts before every sentence ([CLS], BOS), or None when a
        sentence's first token is its first word."""
        firsts = {self.tokenizer(text)["input_ids"][0] for text in ("a cat", "the dog")}
        first = firsts.pop() if len(firsts) == 1 else None
        special = set(self.tokenizer.all_special_ids) - {self.tokenizer.unk_token_id}
        return self.tokenizer.convert_ids_to_tokens(first) if first in special else None

    @torch.inference_mode()
    def attends_causally(self) -> bool:
        """Whether the last layer's first token ignores the tokens after it while the last token
        does not (causal attention, as in GPT-style decoders): of two inputs of the same length
        that differ in every later token, the first vectors are the same and the last differ
        (a model whose every vector is the same is not causal, only broken). Found once, in
        fp32 with dropout off."""
        if self._causal is None:
            text = "whether the first token sees the tokens after it"
            ids = self.tokenizer(text, truncation=True, max_length=self.max_length)["input_ids"]
            vocabulary = min(len(self.tokenizer), self.backbone.config.vocab_size)
            first = torch.tensor([ids], device=self.device)
            other = first.clone()
            other[0, 1:] = (other[0, 1:] + 1) % vocabulary
            modes = [(module, module.training) for module in self.modules()]
            self.eval()
            try:
                a, b = (
                    self.backbone(
                        input_ids=x, attention_mask=torch.ones_like(x), output_hidden_states=True
                    )
                    .hidden_states[-1][0]
                    .float()
                    for x in (first, other)
                )
            finally:  # each module as it was (a loaded backbone is in eval mode, the Encoder not)
                for module, mode in modes:
                    module.training = mode
            # a causal first position computes the same numbers whatever follows it: equal to
            # rounding (a small random bidirectional model moves it by ~1e-3 of its scale)
            tolerance = 1e-6 * max(float(a.abs().max()), 1.0)
            alike = (a - b).abs().amax(dim=-1) <= tolerance  # per position
            self._causal = len(ids) > 1 and bool(alike[0]) and not bool(alike[-1])
        return self._causal

    def save(self, folder: Path) -> None:
        """`save_pretrained` weights and tokenizer, our pooler file and, where the pooler is one
        sentence-transformers has, its module config, so `SentenceTransformer(folder)` loads it.
        """
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


@dataclass(frozen=True)
class ModelIdentity:
    """Which encoder this is: the model as named, a sha256 of its weights, its pooler and the
    width of its vectors (a refinement records the one it was fitted on; a training run's key
    records the weights). Two encoders are the same when all but the name agree."""

    model: str
    sha256: str
    pooler: str
    dim: int

    def same_vectors(self, other: ModelIdentity) -> bool:
        return (self.sha256, self.pooler, self.dim) == (other.sha256, other.pooler, other.dim)

    def __str__(self) -> str:
        return (
            f"{self.model} (weights sha256 {self.sha256[:12]}, pooler {self.pooler}, "
            f"{self.dim}-dim vectors)"
        )


def model_identity(name: str, encoder: Encoder) -> ModelIdentity:
    """`encoder`'s identity: the sha256 runs over every tensor of the backbone's state dict, by
    name, shape, dtype and bytes, so it holds whatever file format or folder the weights came
    from."""
    digest = hashlib.sha256()
    for key, tensor in sorted(encoder.backbone.state_dict().items()):
        digest.update(f"{key}:{tuple(tensor.shape)}:{tensor.dtype}".encode())
        digest.update(tensor.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy())
    width = encoder.backbone.config.hidden_size
    return ModelIdentity(name, digest.hexdigest(), encoder.pooler, width)
