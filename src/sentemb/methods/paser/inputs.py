"""PaSeR's inputs of a batch, made from its texts (Wu & Zhao, 2022, §3.1.2-3.1.3): each
sentence's masked copy (its top-k phrases masked, `mask_phrases`), EDA on both, BERT's MLM
masking, and the decoder's teacher-forcing rows (`decoder_targets`). `PaSeRInputs` runs in the
data collator's workers, off the training step."""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import torch
from torch import Tensor
from transformers import DataCollatorForLanguageModeling, PreTrainedTokenizerBase

from sentemb.data.augment import EDA
from sentemb.phrases import Extractor, PhrasesConfig, nltk_stopwords


class InputsConfig(Protocol):
    """What the inputs read of params section `paser` (`PaSeRConfig`)."""

    mask_phrases: int
    max_target_length: int
    mlm_weight: float
    mlm_probability: float
    augment: list[str]
    augment_ratio: float
    language: str


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
    encoding = tokenizer(  # every sub-word: past `max_tokens` is skipped below, not an error
        sentence, add_special_tokens=False, return_offsets_mapping=True, verbose=False
    )
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


class PaSeRInputs:
    """PaSeR's inputs of a batch, made from its texts (picklable: data loader workers run it).

    Rows of `input_ids`: the B sentences after EDA, their masked copies s~ after EDA, and (with
    MLM) the first B rows again with BERT's 80/10/10 masking. Positions are flat indices into
    the padded rows, so the loss gathers its targets without reading the device:
    `mlm_positions`/`mlm_targets` into the MLM rows, `decoder_positions`/`decoder_targets` into
    `decoder_inputs`, one row per sentence with a masked phrase (`phrase_rows`). Each sentence
    draws from its own seed, so its inputs do not depend on the batch it is in (one process with
    the global batch makes what several processes make of their shares).
    """

    def __init__(self, tokenizer: PreTrainedTokenizerBase, config: InputsConfig, max_length: int):
        self.tokenizer, self.config, self.max_length = tokenizer, config, max_length
        self.max_tokens = max_length - tokenizer.num_special_tokens_to_add(pair=False)
        self.eda = EDA(
            config.augment,
            config.augment_ratio,
            frozenset(nltk_stopwords(config.language, "paser.language")),
            frozenset({tokenizer.mask_token}),
            config.language,
        )
        self.masking = DataCollatorForLanguageModeling(
            tokenizer, mlm_probability=config.mlm_probability
        )
        self.special = {
            "bos": tokenizer.cls_token_id or tokenizer.bos_token_id,
            "eos": tokenizer.sep_token_id or tokenizer.eos_token_id,
            "pad": tokenizer.pad_token_id,
        }
        self._rake: Extractor | None = None

    def phrases_of(self, text: str) -> list[tuple[int, int]]:
        """RAKE's phrase spans of `text`, best first (where no phrases were given)."""
        if self._rake is None:
            config = PhrasesConfig(language=self.config.language, top_k=self.config.mask_phrases)
            self._rake = Extractor(config, None)
        return [(int(p[2]), int(p[3])) for p in self._rake.phrases(text)]

    def __call__(
        self,
        texts: Sequence[str],
        rows: Sequence[Sequence[Sequence[int]]] | None,
        seeds: Sequence[int],
    ) -> dict[str, Tensor]:
        """`rows`: each text's phrase spans from the phrases stage; None: RAKE's, found here."""
        spans = rows if rows is not None else [self.phrases_of(t) for t in texts]
        k = self.config.mask_phrases
        copies = [
            mask_phrases(self.tokenizer, text, [tuple(span) for span in found], k, self.max_tokens)
            for text, found in zip(texts, spans, strict=True)
        ]
        rngs = [random.Random(seed) for seed in seeds]
        augmented = [self.eda(t, rng) for t, rng in zip(texts, rngs, strict=True)]
        augmented += [self.eda(c.text, rng) for c, rng in zip(copies, rngs, strict=True)]
        rows = self.tokenizer(augmented, truncation=True, max_length=self.max_length)["input_ids"]
        size = len(texts)
        labels = []
        if self.config.mlm_weight > 0:  # MLM rows (masked s) ride in the same forward pass
            for row, seed in zip(rows[:size], seeds, strict=True):
                masked, label = self.mlm_row(row, torch.Generator().manual_seed(seed))
                rows.append(masked)
                labels.append(label)
        width = max(len(row) for row in rows)
        ids = torch.full((len(rows), width), self.special["pad"], dtype=torch.long)
        attention = torch.zeros((len(rows), width), dtype=torch.long)
        for i, row in enumerate(rows):
            ids[i, : len(row)], attention[i, : len(row)] = torch.tensor(row), 1
        inputs = {"input_ids": ids, "attention_mask": attention}
        if labels:
            grid = torch.full((size, width), -100, dtype=torch.long)
            for i, label in enumerate(labels):
                grid[i, : len(label)] = label
            positions = (grid.flatten() != -100).nonzero().flatten()
            inputs |= {"mlm_positions": positions, "mlm_targets": grid.flatten()[positions]}
        have = [i for i, c in enumerate(copies) if c.targets]
        decoder_in, targets = decoder_targets(
            [copies[i] for i in have], **self.special, limit=self.config.max_target_length
        )
        positions = (targets.flatten() != self.special["pad"]).nonzero().flatten()
        return inputs | {
            "phrase_rows": torch.tensor(have, dtype=torch.long),
            "decoder_inputs": decoder_in,
            "decoder_positions": positions,
            "decoder_targets": targets.flatten()[positions],
        }

    def mlm_row(self, row: list[int], generator: torch.Generator) -> tuple[list[int], Tensor]:
        """BERT's 80/10/10 masking of one sentence's ids (special tokens never masked), and its
        MLM labels (-100 where not masked)."""
        ids = torch.tensor([row])
        special = torch.isin(ids, torch.tensor(self.tokenizer.all_special_ids))
        self.masking.generator = generator
        masked, labels = self.masking.torch_mask_tokens(ids, special)
        return masked[0].tolist(), labels[0]


def decoder_targets(
    copies: Sequence[MaskedCopy], bos: int, eos: int, pad: int, limit: int
) -> tuple[Tensor, Tensor]:
    """Teacher-forcing inputs ([BOS] t_1 ... ) and targets (t_1 ... [EOS]), padded with `pad`."""
    rows = [[t for phrase in c.targets for t in (*phrase, eos)][:limit] for c in copies]
    width = max((len(r) for r in rows), default=0)
    inputs = torch.full((len(rows), width), pad)
    targets = torch.full((len(rows), width), pad)
    for i, row in enumerate(rows):
        inputs[i, : len(row)] = torch.tensor([bos, *row[:-1]])
        targets[i, : len(row)] = torch.tensor(row)
    return inputs, targets
