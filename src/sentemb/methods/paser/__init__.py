"""PaSeR: phrase reconstruction as the objective (Wu & Zhao, 2022), eq. 1-5.

Each sentence s is duplicated as s~ with its top-k RAKE phrases (the pipeline's phrases stage's,
or RAKE's on the batch when none are given) replaced by one mask token per sub-word (§3.1.2,
Table 5); EDA augments both copies (§3.1.3, Table 4). These inputs are made from the texts by
`PaSeRInputs`, in the data collator's workers, off the training step.
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
from typing import TYPE_CHECKING, Annotated

import torch
import torch.distributed as dist
import torch.nn.functional as F
from safetensors.torch import save_file
from torch import Tensor, nn
from transformers import DataCollatorForLanguageModeling, PreTrainedTokenizerBase

from sentemb.config import ConfigError, Count, NonNegative, Range
from sentemb.data.augment import EDA, EDA_OPERATIONS
from sentemb.losses import OneMethodLoss
from sentemb.methods.base import Method, MethodConfig, Objective, RunShape, TrainState, Views
from sentemb.methods.functional import in_fp32
from sentemb.methods.paser.decoder import (
    DECODER_DIR,
    DecoderConfig,
    MLMHead,
    PhraseDecoder,
)
from sentemb.phrases import Extractor, PhrasesConfig, nltk_stopwords
from sentemb.registry import register_method

if TYPE_CHECKING:
    from sentence_transformers import SentenceTransformer


@dataclass
class PaSeRConfig(MethodConfig):
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
    language: str = "english"  # an NLTK stopword list: EDA's stopwords and wordnet, RAKE's

    def validate(self) -> list[str]:
        unknown = sorted(set(self.augment) - set(EDA_OPERATIONS))
        if unknown:
            return [f"augment: unknown {unknown}; choose from {list(EDA_OPERATIONS)}"]
        return []

    def run_problems(self, run: RunShape) -> list[str]:
        """MLM (unless `mlm_weight` is 0, off) must expect at least one masked token in a
        sentence of `train.max_length` tokens (none masked is no loss to learn from)."""
        expected = self.mlm_probability * run.max_length
        if self.mlm_weight and expected < 1:
            return [
                f"mlm_probability: {self.mlm_probability} x train.max_length {run.max_length} "
                f"is {expected:.3g} masked tokens a sentence; it must be >= 1, so "
                f"mlm_probability >= {1 / run.max_length:.3g} (mlm_weight: 0 turns MLM off)"
            ]
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


def decoding_signal(e_s: Tensor, e_masked: Tensor, m: float, n: float) -> Tensor:
    """Eq. 2: [E_s, E_s~, m|E_s - E_s~|, n|E_s * E_s~|] as a (batch, 4, dim) decoder memory."""
    return torch.stack(
        [e_s, e_masked, m * (e_s - e_masked).abs(), n * (e_s * e_masked).abs()], dim=1
    )


@in_fp32
def summed_cross_entropy(logits: Tensor, targets: Tensor, count: int | Tensor) -> Tensor:
    """The tokens' cross-entropies summed and divided by `count`, in fp32 at least.

    Eq. 3 with `count` the sentences: -sum_i log P(t_i | t_<i, signal) per sentence, averaged
    over them; eq. 4's MLM term with `count` the masked tokens. `logits` (N, vocab) and
    `targets` (N,) are the N scored tokens of the batch (no padding).
    """
    return F.cross_entropy(logits, targets, reduction="sum") / count


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

    def __init__(self, tokenizer: PreTrainedTokenizerBase, config: PaSeRConfig, max_length: int):
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
        phrases: Sequence[Sequence[Sequence[int]]] | None,
        seeds: Sequence[int],
    ) -> dict[str, Tensor]:
        spans = phrases if phrases is not None else [self.phrases_of(t) for t in texts]
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


@register_method("paser", config=PaSeRConfig)
class PaSeR(Method):
    """Phrase reconstruction (PaSeR eq. 2-4) with MLM; generative, so not contrastive."""

    contrastive = False

    def __init__(self, config: PaSeRConfig, model: SentenceTransformer) -> None:
        super().__init__(config, model)
        transformer = model[0]
        tokenizer = transformer.tokenizer
        self._embeddings = [transformer.auto_model.get_input_embeddings()]  # shared, no submodule
        backbone = transformer.auto_model.config
        special = {
            "mask": tokenizer.mask_token_id,
            "bos": tokenizer.cls_token_id or tokenizer.bos_token_id,
            "eos": tokenizer.sep_token_id or tokenizer.eos_token_id,
            "pad": tokenizer.pad_token_id,
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
        self.inputs = PaSeRInputs(tokenizer, config, transformer.max_seq_length)

    def unstable_params(self) -> tuple[str, ...]:
        return ("m", "n", "generative_weight", "mlm_weight")

    def batch_inputs(self) -> PaSeRInputs:
        return self.inputs

    @property
    def embeddings(self) -> nn.Embedding:
        return self._embeddings[0]

    def in_step_inputs(self, views: Views, state: TrainState) -> dict[str, Tensor]:
        """The batch's inputs made here, from its token ids read back as text, where the data
        collator made none (a plain sentence-transformers collator): host work on the step."""
        ids = views.batch["input_ids"]
        texts = self.inputs.tokenizer.batch_decode(ids, skip_special_tokens=True)
        draws = torch.randint(2**62, (len(texts),), generator=state.generator, device=ids.device)
        made = self.inputs(texts, None, draws.tolist())
        return {key: value.to(ids.device, non_blocking=True) for key, value in made.items()}

    def contribute(self, objective: Objective, views: Views, state: TrainState) -> None:
        inputs = views.inputs.get(self.name) or self.in_step_inputs(views, state)
        mlm = self.config.mlm_weight > 0
        size = inputs["input_ids"].shape[0] // (3 if mlm else 2)
        output = views.encode(
            {"input_ids": inputs["input_ids"], "attention_mask": inputs["attention_mask"]}
        )
        e_s, e_masked = output.pooled[:size], output.pooled[size : 2 * size]
        phrases = inputs["phrase_rows"].shape[0]
        sentences, scale = global_count(phrases, e_s.device)  # every process joins the sum
        # no sentence with a phrase: a term of 0 that still reaches the decoder, whose gradient
        # is then 0, as it is in the processes whose shares have phrases
        generative = (
            output.pooled.sum() * 0.0 + sum(p.sum() for p in self.decoder.parameters()) * 0.0
        )
        if phrases:
            signal = decoding_signal(e_s, e_masked, self.config.m, self.config.n)
            signal = signal.index_select(0, inputs["phrase_rows"])
            hidden = self.decoder(signal, inputs["decoder_inputs"], self.embeddings)
            chosen = hidden.flatten(0, 1).index_select(0, inputs["decoder_positions"])
            logits = self.decoder.logits(chosen, self.embeddings)
            generative = scale * summed_cross_entropy(logits, inputs["decoder_targets"], sentences)
        objective.terms["paser/generative"] = self.config.generative_weight * generative
        objective.logs["paser/masked_share"] = phrases / size
        if mlm:
            tokens = output.hidden_states[-1][2 * size :].flatten(0, 1)
            chosen = tokens.index_select(0, inputs["mlm_positions"])
            logits = self.mlm(chosen, self.embeddings)
            masked, scale = global_count(chosen.shape[0], logits.device)
            if chosen.shape[0]:  # only masked positions are scored: no vocab-wide logits
                targets = inputs["mlm_targets"]
                loss = scale * summed_cross_entropy(logits, targets, masked)
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


def global_count(count: int, device: torch.device) -> tuple[Tensor | int, int]:
    """`count` summed over the processes (a device sum, no wait), and the number of processes:
    a term that is a mean over items (phrases, masked tokens) divides its process's sum by the
    global count and is scaled by the processes, so that the average the processes' gradients
    get is the gradient of the global batch's mean, whatever each process holds."""
    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return count, 1
    total = torch.full((), float(count), device=device)  # filled there: no copy to wait on
    dist.all_reduce(total)
    return total, dist.get_world_size()


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


class PaSeRLoss(OneMethodLoss[PaSeRConfig]):
    """PaSeR (Wu & Zhao, 2022) as a sentence-transformers loss.

    Eq. 2-4: a decoder rebuilds a sentence's masked RAKE phrases from the signal of its vector
    and its masked copy's (eq. 2-3), plus masked language modelling (eq. 4); no InfoNCE.

    Example::

        from sentence_transformers import SentenceTransformer, SentenceTransformerTrainer
        from sentemb.methods.paser import PaSeRConfig, PaSeRLoss

        model = SentenceTransformer("bert-base-uncased")
        loss = PaSeRLoss(model, PaSeRConfig(mask_phrases=3))
        SentenceTransformerTrainer(model=model, train_dataset=sentences, loss=loss).train()
    """

    method = "paser"
