"""Checks that refuse, or warn about, a model, its tokenizer or a pooler of it, before anything
is encoded or trained; `sentemb.encoder.Encoder` and `sentemb.st_model` run them where they load.

A tokenizer of another model is refused. A tokenizer without a pad token pads with its
end-of-sequence token (or [SEP], or its unknown token): the attention mask hides padding, so the
vectors do not depend on the choice; padding is always on the right, where the poolers expect it.

A model and pooler certain to give unusable vectors are refused when the pooler is chosen
(`check_pooling`): an encoder-decoder model, a `max_length` that leaves only special tokens
(`check_length`), `cls` without a pooler layer, and a pooler of the first token on a model that
attends causally (a decoder-only LM: its first token sees only itself, so every sentence gets one
vector). Doubtful ones are warnings, and are named again, with weights that are not finite or all
zero, when vectors are refused (`suspects`).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from typing import Any, Protocol

import torch
from torch import nn

from sentemb.config import ConfigError
from sentemb.pooling import POOLERS, check_pooler, cls_vector
from sentemb.precision import autocast_dtype


class Encoder(Protocol):
    """What the checks read of a loaded model: `sentemb.encoder.Encoder` is one."""

    backbone: nn.Module
    tokenizer: Any
    name: str  # the model's name or folder
    label: str  # the param and model, for errors
    untrained: frozenset[str]  # weights the checkpoint lacks
    precision: str
    pooler: str
    max_length: int

    @property
    def positions(self) -> int: ...

    @property
    def device(self) -> torch.device: ...

    def modules(self) -> Iterator[nn.Module]: ...

    def eval(self) -> Any: ...


log = logging.getLogger(__name__)
ENCODER_DECODER = (
    "is an encoder-decoder model: its forward pass needs decoder inputs, and the pipeline pools "
    "the token vectors of one encoder; use an encoder-only model (BERT-like), or a decoder-only "
    "one with mean pooling"
)


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


def listing(names: Sequence[str], shown: int = 3) -> str:
    """The first `shown` of `names`, and how many more."""
    more = f" and {len(names) - shown} more" if len(names) > shown else ""
    return ", ".join(names[:shown]) + more


def check_length(encoder: Encoder, max_length: int, param: str) -> int:
    """`max_length` when a sentence cut to it keeps a word beside the tokenizer's special
    tokens and fits the model's positions; else a `ConfigError` naming `param` and the limit
    (too long fails at the first long batch; too short makes every sentence the same input,
    [CLS] [SEP], with the same vector)."""
    special = encoder.tokenizer.num_special_tokens_to_add(pair=False)
    if not special + 1 <= max_length <= encoder.positions:
        raise ConfigError(
            f"{param}: must be in [{special + 1}, {encoder.positions}] for {encoder.name} "
            f"({special} special token(s) plus a word; {encoder.positions} positions), "
            f"got {max_length}"
        )
    return max_length


def check_pooling(encoder: Encoder, pooler: str, param: str, auto: bool = False) -> str:
    """`pooler` when the model of `encoder` can pool with it. Certain to give unusable vectors,
    and so a `ConfigError` naming `param` (`auto`: chosen by the model), the model and the fix:
    `cls` on a backbone without a pooler layer, and a pooler of the first token on a model that
    attends causally (the first token sees only itself). Doubtful (`pooling_doubts`), and so
    logged as warnings: the first token being a word, a pooler layer not in the checkpoint."""
    check_pooler(pooler, param)
    shown = f"{param}: 'auto' (here {pooler!r})" if auto else f"{param}: {pooler!r}"
    spec = POOLERS[pooler]
    if spec.dense and getattr(encoder.backbone, "pooler", None) is None:
        raise ConfigError(
            f"{shown} needs a backbone with a pooler layer; {encoder.label} has none; "
            f"cls_before_pooler reads [CLS] without one, mean averages every token"
        )
    if spec.vector is cls_vector and attends_causally(encoder):
        first = first_token(encoder.tokenizer)
        sees = (
            f"the first token ({first}) sees only itself, so every sentence would get the "
            "same vector"
            if first
            else "the first token, a sentence's first word, sees only itself, so a "
            "sentence's vector would be that of its first word alone"
        )
        raise ConfigError(
            f"{shown} reads the first token, but {encoder.label} attends causally (each token "
            f"sees only those before it): {sees}; use mean ({param}: mean)"
        )
    for doubt in pooling_doubts(encoder, pooler):
        log.warning("%s: %s", param, doubt)
    return pooler


def pooling_doubts(encoder: Encoder, pooler: str) -> list[str]:
    """Why `pooler` may give the vectors of `encoder` little meaning, though not certainly."""
    spec, doubts = POOLERS[pooler], []
    if spec.vector is cls_vector and first_token(encoder.tokenizer) is None:
        doubts.append(
            f"{pooler!r} reads the first token, but the tokenizer of {encoder.name} puts no "
            "[CLS] or BOS token before a sentence: the first token is the sentence's first "
            "word; mean averages every token"
        )
    layer = getattr(encoder.backbone, "pooler", None)
    if spec.dense and layer is not None:
        names = sorted({f"pooler.{n}" for n, _ in layer.named_parameters()} & encoder.untrained)
        if names:
            doubts.append(
                f"{pooler!r} passes [CLS] through the pooler layer, which the checkpoint of "
                f"{encoder.name} lacks ({listing(names)}): transformers initialised it at "
                "random, so the vectors change from load to load until it is trained; "
                "cls_before_pooler reads [CLS] without it"
            )
    return doubts


def suspects(encoder: Encoder, non_finite: bool) -> list[str]:
    """What `encoder` shows, as it is now, that would explain vectors that are not finite
    (`non_finite`) or the same for every sentence, likeliest first: weights that are not
    finite or all zero, (non-finite) fp16 autocast, its pooler's doubts."""
    found: list[str] = []
    weights = dict(encoder.backbone.named_parameters())
    broken = [n for n, w in weights.items() if not torch.isfinite(w).all()]
    if broken:
        found.append(f"weights of {encoder.name} that are NaN or infinite: {listing(broken)}")
    zero = [n for n, w in weights.items() if n.endswith("weight") and w.numel() > 1]
    zero = [n for n in zero if not weights[n].any()]
    if zero:
        found.append(f"weights of {encoder.name} that are all zero: {listing(zero)}")
    if non_finite and autocast_dtype(encoder.precision, encoder.device) == torch.float16:
        found.append(
            f"fp16 autocast (model.precision: {encoder.precision}), whose range (65504) "
            "activations can exceed; try fp32 or bf16"
        )
    return found + pooling_doubts(encoder, encoder.pooler)


def first_token(tokenizer) -> str | None:
    """The token `tokenizer` puts before every sentence ([CLS], BOS), or None when a
    sentence's first token is its first word."""
    firsts = {tokenizer(text)["input_ids"][0] for text in ("a cat", "the dog")}
    first = firsts.pop() if len(firsts) == 1 else None
    special = set(tokenizer.all_special_ids) - {tokenizer.unk_token_id}
    return tokenizer.convert_ids_to_tokens(first) if first in special else None


@torch.inference_mode()
def attends_causally(encoder: Encoder) -> bool:
    """Whether the last layer's first token ignores the tokens after it while the last token
    does not (causal attention, as in GPT-style decoders): of two inputs of the same length
    that differ in every later token, the first vectors are the same and the last differ
    (a model whose every vector is the same is not causal, only broken). In fp32 with dropout
    off; each module's mode is restored."""
    text = "whether the first token sees the tokens after it"
    ids = encoder.tokenizer(text, truncation=True, max_length=encoder.max_length)["input_ids"]
    vocabulary = min(len(encoder.tokenizer), encoder.backbone.config.vocab_size)
    first = torch.tensor([ids], device=encoder.device)
    other = first.clone()
    other[0, 1:] = (other[0, 1:] + 1) % vocabulary
    modes = [(module, module.training) for module in encoder.modules()]
    encoder.eval()
    try:
        a, b = (
            encoder.backbone(
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
    return len(ids) > 1 and bool(alike[0]) and not bool(alike[-1])
