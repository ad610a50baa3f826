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
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import torch
import torch.distributed as dist
import torch.nn.functional as F
from safetensors.torch import save_file
from torch import Tensor, nn

from sentemb.config import ConfigError, Count, NonNegative, Range, section
from sentemb.data.augment import EDA_OPERATIONS
from sentemb.data.readers import DataFormatError
from sentemb.losses import OneMethodLoss
from sentemb.methods.base import (
    Method,
    MethodConfig,
    Objective,
    RunShape,
    SentenceData,
    TrainState,
    Views,
)
from sentemb.methods.functional import in_fp32
from sentemb.methods.paser.decoder import (
    DECODER_DIR,
    DecoderConfig,
    MLMHead,
    PhraseDecoder,
)
from sentemb.methods.paser.inputs import PaSeRInputs
from sentemb.phrases import PhrasesConfig, read_phrase_spans
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

    def sentence_data(
        self, params: Mapping[str, Any], sentences: Sequence[str]
    ) -> SentenceData[list[tuple[int, int]]]:
        """Each training sentence's phrase spans, from the phrases stage's file (`phrases`);
        a file made from another corpus (a row per distinct sentence, no more), in another
        language than this section's (`phrases.language`) or with fewer phrases than it masks
        (`phrases.top_k`) is refused, naming the param."""
        stage = section(params, "phrases", PhrasesConfig)
        if self.language != stage.language:
            raise ConfigError(
                f"paser.language: {self.language!r}, but the phrases stage finds phrases in "
                f"phrases.language: {stage.language!r}; both are the corpus's language"
            )
        if self.mask_phrases > stage.top_k:
            raise ConfigError(
                f"paser.mask_phrases: {self.mask_phrases} is more than the {stage.top_k} "
                "phrases the phrases stage keeps per sentence (phrases.top_k): raise "
                "phrases.top_k or lower it"
            )
        try:
            spans = read_phrase_spans(Path(self.phrases))
        except DataFormatError as err:
            raise ConfigError(f"paser.phrases: {err}") from err
        missing = next((s for s in sentences if s not in spans), None)
        if missing is None and len(set(sentences)) == len(spans):
            return SentenceData(spans, [Path(self.phrases)])
        example = (
            f"it has no row for the training sentence {missing[:60]!r}"
            if missing is not None
            else "it has rows for sentences the training corpus does not hold"
        )
        raise ConfigError(
            f"paser.phrases: {self.phrases} was made from another corpus ({len(spans)} distinct "
            f"sentences; the training corpus has {len(set(sentences))}, and {example}); rerun "
            "the phrases stage on the training corpus (dvc repro phrases)"
        )


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
        self.mlm = (  # none when off: a weight no step reaches would stall DDP
            MLMHead(backbone.hidden_size, backbone.vocab_size, backbone.layer_norm_eps)
            if config.mlm_weight > 0
            else None
        )
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
