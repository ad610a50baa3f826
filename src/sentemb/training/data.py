"""The training data as the trainer reads it: the corpus tokenized once per run, and the collator
that pads each batch and makes the parts' inputs (PaSeR's copies) in the data loader's workers,
off the training step.

    data = training_dataset(sentences, tokenizer, 32, {"paser": paser_data})  # a Dataset
    collate = Collator(tokenizer.pad_token_id, None, loss.batch_inputs(), seed)

The original SimCSE tokenizes its corpus once before training too (`datasets.map`). A batch
holds the sentences as `text_input_ids`/`text_attention_mask` (the features sentence-transformers
hands the loss first), then each part's inputs under its name (`paser_input_ids`, ...). A
part's rows of pipeline data (`MethodConfig.sentence_data`: PaSeR's phrase spans) ride in the
dataset as a column of the part's name, to its `BatchInputs`.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch

from sentemb.methods.base import BatchInputs, SentenceData

if TYPE_CHECKING:
    from datasets import Dataset
    from transformers import PreTrainedTokenizerBase

TOKENIZE_BATCH = 10_000  # sentences per call of the fast tokenizer (datasets.map's batches)


def training_dataset(
    sentences: Sequence[str],
    tokenizer: PreTrainedTokenizerBase,
    max_length: int,
    data: Mapping[str, SentenceData[Any]] | None = None,
    keep_text: bool = False,
) -> Dataset:
    """`sentences` tokenized once (truncated at `max_length`, unpadded) as `input_ids`; with the
    texts (`keep_text`, for parts that make inputs from them) and each sentence's row of each
    part's pipeline data (`data`, by part name: PaSeR's phrase spans) as a column of that name."""
    from datasets import Dataset, disable_progress_bars

    disable_progress_bars()  # a bar per map garbles a log file; the stage logs its own lines

    def tokenize(batch: dict[str, list[str]]) -> dict[str, list[list[int]]]:
        ids = tokenizer(
            batch["text"],
            truncation=True,
            max_length=max_length,
            return_attention_mask=False,  # the collator makes it, for the padded batch
            return_token_type_ids=False,
        )["input_ids"]
        return {"input_ids": ids}

    dataset = Dataset.from_dict({"text": list(sentences)})
    dataset = dataset.map(tokenize, batched=True, batch_size=TOKENIZE_BATCH)
    for name, part in (data or {}).items():
        missing = next((s for s in sentences if s not in part.rows), None)
        if missing is not None:
            raise ValueError(f"{name}: its sentence data has no row for {missing[:60]!r}")
        dataset = dataset.add_column(name, [part.rows[s] for s in sentences])
    return dataset if keep_text or data else dataset.remove_columns("text")


def sentence_seed(seed: int, epoch: int, text: str) -> int:
    """The seed of a sentence's random draws (EDA, MLM masking) in an epoch: of the run's seed,
    the epoch and the sentence, so it draws the same whichever worker, batch or process makes
    its inputs, and after a resume."""
    digest = hashlib.blake2b(f"{seed}\n{epoch}\n{text}".encode(), digest_size=8)
    return int.from_bytes(digest.digest(), "little") >> 1


@dataclass
class Collator:
    """Pads a batch's token ids (to the longest, or to `pad_to` for static shapes) and makes
    each part's inputs (`inputs`, by part name) from its texts, seeded per sentence."""

    pad_id: int
    pad_to: int | None
    inputs: Mapping[str, BatchInputs]
    seed: int
    epoch: int = 0  # set by the trainer's callback before each epoch's workers start
    # sentence-transformers' data loader reads it; a column of labels is none of ours
    valid_label_columns: list[str] = field(default_factory=list)

    def __call__(self, rows: Sequence[Mapping[str, Any]]) -> dict[str, torch.Tensor]:
        ids = [row["input_ids"] for row in rows]
        width = self.pad_to or max(len(row) for row in ids)
        input_ids = torch.full((len(ids), width), self.pad_id, dtype=torch.long)
        attention = torch.zeros((len(ids), width), dtype=torch.long)
        for i, row in enumerate(ids):
            input_ids[i, : len(row)] = torch.tensor(row, dtype=torch.long)
            attention[i, : len(row)] = 1
        batch = {"text_input_ids": input_ids, "text_attention_mask": attention}
        if self.inputs:
            texts = [row["text"] for row in rows]
            seeds = [sentence_seed(self.seed, self.epoch, text) for text in texts]
            for name, make in self.inputs.items():
                made = make(texts, [row[name] for row in rows] if name in rows[0] else None, seeds)
                batch |= {f"{name}_{key}": value for key, value in made.items()}
        return batch
