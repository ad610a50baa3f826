"""PaSeR: phrase reconstruction as the objective (Wu & Zhao, 2022), eq. 1-5.

Each sentence s is duplicated as s~ with its top-k RAKE phrases (from the phrases stage) replaced
by one mask token per sub-word (§3.1.2, Table 5); EDA augments both copies (§3.1.3, Table 4).
The decoding signal is [E_s, E_s~, m|E_s - E_s~|, n|E_s * E_s~|] (eq. 2), fed as a memory of
four vectors to a randomly initialised Transformer decoder whose word embeddings are the
encoder's; it reconstructs the masked phrases with teacher forcing (eq. 3) and is not part of the
saved encoder. MLM on s keeps token representations (eq. 4): L = w_mlm L_MLM + w_gen L_gen; a
batch in which the 15% masking picks no token (one or two short sentences) has no MLM target, so
its MLM term is 0.
Alone (`method: paser`) the objective is generative only; `simcse+paser` adds SimCSE's InfoNCE,
the form of eq. 5 (L_contrastive + α L_generative, α = `generative_weight`).
"""

from __future__ import annotations

import json
import random
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Annotated

import torch
import torch.nn.functional as F
from safetensors.torch import load_file, save_file
from torch import Tensor, nn
from transformers import DataCollatorForLanguageModeling, PreTrainedTokenizerBase

from sentemb.config import ConfigError, Count, NonNegative, Range
from sentemb.data.augment import EDA, EDA_OPERATIONS
from sentemb.data.readers import DataFormatError
from sentemb.encoder import Encoder
from sentemb.methods.base import Method, Objective, TrainState, Views
from sentemb.phrases import nltk_stopwords, read_phrase_spans
from sentemb.registry import register_method

DECODER_DIR = "paser_decoder"


@dataclass
class PaSeRConfig:
    """Params section `paser` (the paper's unsupervised defaults)."""

    phrases: str = "data/phrases/rake.jsonl"  # the phrases stage's output
    mask_phrases: Count = 3  # top-k RAKE phrases masked (Table 5: 1-5)
    m: NonNegative = 10.0  # eq. 2 scale of |E_s - E_s~| (App. A)
    n: NonNegative = 10.0  # eq. 2 scale of |E_s * E_s~|
    decoder_layers: Count = 6  # §4.5.1
    max_target_length: Count = 32  # decoder tokens: masked phrases, each ended by [SEP]
    generative_weight: NonNegative = 1.0  # eq. 4 (and α of eq. 5)
    mlm_weight: NonNegative = 1.0  # eq. 4; 0 turns MLM off
    mlm_probability: Annotated[float, Range(0, 1, open_low=True, open_high=True)] = 0.15
    augment: list[str] = field(default_factory=lambda: ["synonym"])  # Table 4: best is SR alone
    augment_ratio: Annotated[float, Range(0, 1, open_high=True)] = 0.1
    stopwords: str = "english"

    def validate(self) -> list[str]:
        unknown = sorted(set(self.augment) - set(EDA_OPERATIONS))
        if unknown:
            return [f"augment: unknown {unknown}; choose from {list(EDA_OPERATIONS)}"]
        return []


@dataclass
class MaskedCopy:
    """s~ as text (one mask token per masked sub-word) and the target ids of each phrase."""

    text: str
    targets: list[list[int]]


def mask_phrases(
    tokenizer: PreTrainedTokenizerBase,
    sentence: str,
    spans: Sequence[tuple[int, int]],
    k: int,
    max_tokens: int,
) -> MaskedCopy:
    """Duplicate-and-mask (§3.1.2): replace the first `k` phrase spans by mask tokens.

    A phrase's targets are the sub-words whose characters fall in its span, so masks and
    targets stay aligned whatever the tokenizer; spans that overlap a kept one, or reach past
    the `max_tokens` the encoder sees, are skipped. Masked phrases are listed in text order.
    """
    encoding = tokenizer(sentence, add_special_tokens=False, return_offsets_mapping=True)
    ids, offsets = encoding["input_ids"], encoding["offset_mapping"]
    chosen: list[tuple[int, int, list[int]]] = []
    for start, end in spans[:k]:
        tokens = [i for i, (a, b) in enumerate(offsets) if a < end and b > start and b > a]
        if not tokens or tokens[-1] >= max_tokens:
            continue
        if any(start < e and end > s for s, e, _ in chosen):
            continue
        chosen.append((start, end, tokens))
    chosen.sort()
    pieces, targets, cursor = [], [], 0
    for start, end, tokens in chosen:
        pieces += [sentence[cursor:start], " ".join([tokenizer.mask_token] * len(tokens))]
        targets.append([ids[i] for i in tokens])
        cursor = end
    pieces.append(sentence[cursor:])
    return MaskedCopy(" ".join(p.strip() for p in pieces if p.strip()), targets)


def decoding_signal(e_s: Tensor, e_masked: Tensor, m: float, n: float) -> Tensor:
    """Eq. 2: [E_s, E_s~, m|E_s - E_s~|, n|E_s * E_s~|] as a (batch, 4, dim) decoder memory."""
    return torch.stack(
        [e_s, e_masked, m * (e_s - e_masked).abs(), n * (e_s * e_masked).abs()], dim=1
    )


def generative_loss(logits: Tensor, targets: Tensor, rows: Tensor, sentences: int) -> Tensor:
    """Eq. 3: -sum_i log P(t_i | t_<i, signal) per sentence, averaged over the sentences.

    `logits` (N, vocab) and `targets` (N,) are the N target tokens of the batch (no padding);
    `rows` says which of the `sentences` each token belongs to.
    """
    nll = F.cross_entropy(logits, targets, reduction="none")
    return nll.new_zeros(sentences).index_add(0, rows, nll).mean()


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


def decoder_targets(
    copies: Sequence[MaskedCopy], bos: int, eos: int, pad: int, limit: int
) -> tuple[Tensor, Tensor]:
    """Teacher-forcing inputs ([BOS] t_1 ... ) and targets (t_1 ... [EOS]), padded with `pad`."""
    rows = [[t for phrase in c.targets for t in (*phrase, eos)][:limit] for c in copies]
    width = max(len(r) for r in rows)
    inputs = torch.full((len(rows), width), pad)
    targets = torch.full((len(rows), width), pad)
    for i, row in enumerate(rows):
        inputs[i, : len(row)] = torch.tensor([bos, *row[:-1]])
        targets[i, : len(row)] = torch.tensor(row)
    return inputs, targets


@register_method("paser", config=PaSeRConfig)
class PaSeR(Method):
    """Phrase reconstruction (PaSeR eq. 2-4) with MLM; generative, so not contrastive."""

    contrastive = False

    def __init__(self, config: PaSeRConfig, encoder: Encoder) -> None:
        super().__init__(config, encoder)
        self.tokenizer = encoder.tokenizer
        self._embeddings = [encoder.backbone.get_input_embeddings()]  # shared, not a submodule
        backbone = encoder.backbone.config
        special = {
            "mask": self.tokenizer.mask_token_id,
            "bos": self.tokenizer.cls_token_id or self.tokenizer.bos_token_id,
            "eos": self.tokenizer.sep_token_id or self.tokenizer.eos_token_id,
            "pad": self.tokenizer.pad_token_id,
        }
        if None in special.values() or len(set(special.values())) < len(special):
            raise ConfigError(
                f"model.name_or_path: paser needs distinct mask, start ([CLS]/BOS), end "
                f"([SEP]/EOS) and pad tokens; the tokenizer of {backbone.name_or_path} has "
                f"{special} (ids)"
            )
        del special["mask"]
        self.decoder = PhraseDecoder(
            DecoderConfig(
                dim=backbone.hidden_size,
                heads=backbone.num_attention_heads,
                feedforward=backbone.intermediate_size,
                layers=config.decoder_layers,
                dropout=backbone.hidden_dropout_prob,
                max_positions=config.max_target_length + 1,
                vocab=backbone.vocab_size,
                m=config.m,
                n=config.n,
                **special,
            )
        )
        self.mlm = MLMHead(backbone.hidden_size, backbone.vocab_size, backbone.layer_norm_eps)
        self.collator = DataCollatorForLanguageModeling(
            self.tokenizer, mlm_probability=config.mlm_probability
        )
        try:
            self.spans = read_phrase_spans(Path(config.phrases))
        except DataFormatError as err:
            raise ConfigError(f"paser.phrases: {err}") from err
        self.eda = EDA(
            config.augment,
            config.augment_ratio,
            frozenset(nltk_stopwords(config.stopwords, "paser.stopwords")),
            frozenset({self.tokenizer.mask_token}),
        )

    def unstable_params(self) -> tuple[str, ...]:
        return ("m", "n", "generative_weight", "mlm_weight")

    @property
    def embeddings(self) -> nn.Embedding:
        return self._embeddings[0]

    def check_corpus(self, sentences: Sequence[str]) -> None:
        """Refuse a phrases file made from another corpus: its sentences must be exactly the
        distinct sentences of the training corpus (the phrases stage writes one row for each)."""
        corpus = set(sentences)
        missing = next((s for s in sentences if s not in self.spans), None)
        if missing is None and len(corpus) == len(self.spans):
            return
        example = (
            f"it has no row for the training sentence {missing[:60]!r}"
            if missing is not None
            else "it has rows for sentences the training corpus does not hold"
        )
        raise ConfigError(
            f"paser.phrases: {self.config.phrases} was made from another corpus "
            f"({len(self.spans)} distinct sentences; the training corpus has {len(corpus)}, and "
            f"{example}); rerun the phrases stage on the training corpus (dvc repro phrases)"
        )

    def masked_copy(self, sentence: str, max_tokens: int) -> MaskedCopy:
        if sentence not in self.spans:
            raise ConfigError(
                f"paser.phrases: {self.config.phrases} has no row for the training sentence "
                f"{sentence[:60]!r}; rerun the phrases stage on the training corpus"
            )
        spans = self.spans[sentence]
        return mask_phrases(self.tokenizer, sentence, spans, self.config.mask_phrases, max_tokens)

    def mlm_rows(self, ids: Tensor) -> tuple[Tensor, Tensor]:
        """BERT's 80/10/10 masking of `ids` (special tokens never masked), and MLM labels."""
        special = torch.isin(ids, torch.tensor(self.tokenizer.all_special_ids, device=ids.device))
        masked, labels = self.collator.torch_mask_tokens(ids.cpu().clone(), special.cpu())
        return masked.to(ids.device), labels.to(ids.device)

    def contribute(self, objective: Objective, views: Views, state: TrainState) -> None:
        size = len(views.sentences)
        max_tokens = views.batch["input_ids"].shape[1] - 2
        copies = [self.masked_copy(s, max_tokens) for s in views.sentences]
        seed = torch.randint(2**62, (1,), generator=state.generator, device=state.generator.device)
        rng = random.Random(int(seed))
        texts = [self.eda(s, rng) for s in views.sentences]
        texts += [self.eda(c.text, rng) for c in copies]
        batch = views.tokenize(texts)
        ids, attention = batch["input_ids"], batch["attention_mask"]
        mlm = self.config.mlm_weight > 0
        if mlm:  # MLM rows (masked s) ride in the same forward pass as s and s~
            masked, labels = self.mlm_rows(ids[:size])
            ids, attention = torch.cat([ids, masked]), torch.cat([attention, attention[:size]])
        output = views.encode({"input_ids": ids, "attention_mask": attention})
        e_s, e_masked = output.pooled[:size], output.pooled[size : 2 * size]
        has_phrase = [i for i, c in enumerate(copies) if c.targets]
        generative = output.pooled.sum() * 0.0  # keeps the graph when no sentence has a phrase
        if has_phrase:
            signal = decoding_signal(e_s, e_masked, self.config.m, self.config.n)[has_phrase]
            config = self.decoder.config
            inputs, targets = decoder_targets(
                [copies[i] for i in has_phrase],
                config.bos,
                config.eos,
                config.pad,
                self.config.max_target_length,
            )
            hidden = self.decoder(signal, inputs.to(ids.device), self.embeddings)
            targets = targets.to(ids.device)
            keep = targets != config.pad
            sentence_of = torch.arange(len(has_phrase), device=ids.device)[:, None]
            logits = self.decoder.logits(hidden[keep], self.embeddings)
            generative = generative_loss(
                logits.float(),
                targets[keep],
                sentence_of.expand_as(targets)[keep],
                len(has_phrase),
            )
        objective.terms["paser/generative"] = self.config.generative_weight * generative
        objective.logs["paser/masked_share"] = len(has_phrase) / size
        if mlm:
            chosen = labels != -100  # only masked positions are scored: no vocab-wide logits
            logits = self.mlm(output.hidden_states[-1][2 * size :][chosen], self.embeddings)
            if chosen.any():
                loss = F.cross_entropy(logits.float(), labels[chosen])
            else:  # no token masked: no target, the term is 0 (the head stays in the graph)
                loss = logits.sum() * 0.0
            objective.terms["paser/mlm"] = self.config.mlm_weight * loss

    def save(self, folder: Path) -> None:
        """The decoder, so `python -m sentemb.reconstruct` can inspect it (Table 7)."""
        target = folder / DECODER_DIR
        target.mkdir(parents=True, exist_ok=True)
        state = {k: v.detach().contiguous().cpu() for k, v in self.decoder.state_dict().items()}
        save_file(state, target / "model.safetensors")
        config = {**asdict(self.decoder.config), "mask_phrases": self.config.mask_phrases}
        (target / "config.json").write_text(json.dumps(config, indent=1))


def load_decoder(folder: Path) -> tuple[PhraseDecoder, int]:
    """The decoder saved with a PaSeR-trained model, and its number of masked phrases."""
    config = json.loads((folder / DECODER_DIR / "config.json").read_text())
    mask_phrases = config.pop("mask_phrases")
    decoder = PhraseDecoder(DecoderConfig(**config))
    decoder.load_state_dict(load_file(folder / DECODER_DIR / "model.safetensors"))
    return decoder.eval(), mask_phrases
