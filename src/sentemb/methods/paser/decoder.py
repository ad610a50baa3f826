"""PaSeR's phrase decoder (Wu & Zhao, 2022, §3.1.1, eq. 2-3): a randomly initialised Transformer
decoder over the four-vector decoding signal, whose word embeddings are the encoder's, and the
MLM head of eq. 4; neither is part of the saved encoder (`DECODER_DIR` beside it).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from safetensors.torch import load_file
from torch import Tensor, nn

DECODER_DIR = "paser_decoder"


@dataclass
class DecoderConfig:
    """The shape of the phrase decoder, saved beside the model for inspection."""

    dim: int
    heads: int
    feedforward: int
    layers: int
    dropout: float
    max_positions: int
    vocab: int
    m: float
    n: float
    bos: int
    eos: int
    pad: int


class PhraseDecoder(nn.Module):
    """A randomly initialised Transformer decoder over the signal of eq. 2 (§3.2.3).

    Token embeddings and the output projection are the encoder's word embeddings (passed in at
    call time, so they are trained and saved once, with the encoder); positions are its own.
    """

    def __init__(self, config: DecoderConfig) -> None:
        super().__init__()
        self.config = config
        self.positions = nn.Embedding(config.max_positions, config.dim)
        self.norm = nn.LayerNorm(config.dim)
        layer = nn.TransformerDecoderLayer(
            config.dim,
            config.heads,
            config.feedforward,
            config.dropout,
            activation="gelu",
            batch_first=True,
        )
        self.layers = nn.TransformerDecoder(layer, config.layers)
        self.bias = nn.Parameter(torch.zeros(config.vocab))

    def forward(self, signal: Tensor, inputs: Tensor, embeddings: nn.Embedding) -> Tensor:
        """Hidden states for every position of `inputs` (teacher forcing); see `logits`."""
        length = inputs.shape[1]
        positions = torch.arange(length, device=inputs.device)
        x = self.norm(embeddings(inputs) + self.positions(positions))
        causal = torch.ones(length, length, dtype=torch.bool, device=inputs.device).triu(1)
        hidden = self.layers(
            x,
            signal.to(x.dtype),
            tgt_mask=causal,
            tgt_key_padding_mask=inputs == self.config.pad,
            tgt_is_causal=True,
        )
        return hidden

    def logits(self, hidden: Tensor, embeddings: nn.Embedding) -> Tensor:
        """Next-token logits via the tied embeddings; callers pass only the real target tokens."""
        return F.linear(hidden, embeddings.weight, self.bias)

    @torch.inference_mode()
    def generate(self, signal: Tensor, embeddings: nn.Embedding, phrases: int) -> list[int]:
        """Greedy decoding of one sentence's `phrases` masked phrases (no teacher forcing)."""
        tokens = [self.config.bos]
        while len(tokens) < self.config.max_positions:
            hidden = self(signal[None], torch.tensor([tokens], device=signal.device), embeddings)
            tokens.append(int(self.logits(hidden[0, -1], embeddings).argmax()))
            if tokens.count(self.config.eos) == phrases:
                break
        return tokens[1:]


class MLMHead(nn.Module):
    """BERT's MLM prediction head (dense, GELU, LayerNorm, tied output), freshly initialised."""

    def __init__(self, dim: int, vocab: int, eps: float) -> None:
        super().__init__()
        self.dense = nn.Linear(dim, dim)
        self.norm = nn.LayerNorm(dim, eps=eps)
        self.bias = nn.Parameter(torch.zeros(vocab))

    def forward(self, hidden: Tensor, embeddings: nn.Embedding) -> Tensor:
        return F.linear(self.norm(F.gelu(self.dense(hidden))), embeddings.weight, self.bias)


def load_decoder(folder: Path) -> tuple[PhraseDecoder, int]:
    """The decoder saved with a PaSeR-trained model, and its number of masked phrases."""
    config = json.loads((folder / DECODER_DIR / "config.json").read_text())
    mask_phrases = config.pop("mask_phrases")
    decoder = PhraseDecoder(DecoderConfig(**config))
    decoder.load_state_dict(load_file(folder / DECODER_DIR / "model.safetensors"))
    return decoder.eval(), mask_phrases
