"""PaSeR: masking alignment, eq. 2 and eq. 3 by hand, the method's terms, the saved decoder."""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest
import torch

from sentemb.config import ConfigError
from sentemb.encoder import Encoder
from sentemb.methods.base import CombinedMethod, MethodOutput, TrainState, Views
from sentemb.methods.paser import (
    MaskedCopy,
    decoder_targets,
    decoding_signal,
    generative_loss,
    mask_phrases,
)
from sentemb.phrases import PhrasesConfig, extract, phrase_span
from sentemb.reconstruct import reconstruct

from support.training import SENTENCES, make_trainer, paser_params

SENTENCE = "Do I need a transit visa for a stop in London?"


def test_masking_keeps_masks_and_targets_aligned(tiny_encoder: Encoder) -> None:
    tokenizer = tiny_encoder.tokenizer
    spans = [phrase_span(SENTENCE, p, chinese=False) for p in ("london", "transit visa")]
    copy = mask_phrases(tokenizer, SENTENCE, spans, k=2, max_tokens=30)
    assert copy.text == "Do I need a [MASK] [MASK] for a stop in [MASK] ?"
    original = tokenizer(SENTENCE, add_special_tokens=False)["input_ids"]
    masked = tokenizer(copy.text, add_special_tokens=False)["input_ids"]
    assert len(masked) == len(original)
    positions = [i for i, t in enumerate(masked) if t == tokenizer.mask_token_id]
    # targets in text order, each the original sub-words under its masks
    assert copy.targets == [[original[p] for p in positions[:2]], [original[positions[2]]]]
    assert tokenizer.decode(copy.targets[0]) == "transit visa"
    assert [t for i, t in enumerate(masked) if i not in positions] == [
        t for i, t in enumerate(original) if i not in positions
    ]
    # k = 1 masks only the best-ranked phrase; a span past the encoder's reach is skipped
    assert mask_phrases(tokenizer, SENTENCE, spans, 1, 30).text.endswith("in [MASK] ?")
    assert mask_phrases(tokenizer, SENTENCE, spans, 2, 8).targets == [copy.targets[0]]


def test_decoding_signal_eq2_by_hand() -> None:
    e_s, e_masked = torch.tensor([[1.0, 2.0]]), torch.tensor([[3.0, -1.0]])
    signal = decoding_signal(e_s, e_masked, m=10.0, n=0.5)
    expected = [[[1.0, 2.0], [3.0, -1.0], [20.0, 30.0], [1.5, 1.0]]]
    assert signal.tolist() == expected


def test_generative_loss_eq3_by_hand() -> None:
    pad = 1
    logits = torch.tensor(
        [
            [[0.0, 0.0, math.log(3)], [math.log(2), 0.0, 0.0], [5.0, 5.0, 5.0]],
            [[0.0, 0.0, 0.0], [9.0, 0.0, 0.0], [0.0, 9.0, 0.0]],
        ]
    )
    targets = torch.tensor([[2, 0, pad], [0, pad, pad]])
    keep = targets != pad
    rows = torch.tensor([[0, 0, 0], [1, 1, 1]])[keep]
    # sentence 1: -ln(3/5) - ln(2/4); sentence 2: -ln(1/3); eq. 3 sums tokens, batch mean
    expected = (-math.log(0.6) - math.log(0.5) + math.log(3)) / 2
    loss = generative_loss(logits[keep], targets[keep], rows, sentences=2)
    assert loss.item() == pytest.approx(expected, rel=1e-6)


def test_decoder_targets_shift_right_with_end_of_phrase() -> None:
    copies = [MaskedCopy("", [[7, 8], [9]]), MaskedCopy("", [[5]])]
    inputs, targets = decoder_targets(copies, bos=101, eos=102, pad=0, limit=32)
    assert targets.tolist() == [[7, 8, 102, 9, 102], [5, 102, 0, 0, 0]]
    assert inputs.tolist() == [[101, 7, 8, 102, 9], [101, 5, 0, 0, 0]]


def batch_views(encoder: Encoder, sentences: list[str]) -> Views:
    def tokenize(texts: list[str]) -> dict[str, torch.Tensor]:
        return dict(encoder.tokenize(texts, 32))

    def refuse(batch: dict[str, torch.Tensor]) -> torch.Tensor:
        raise AssertionError("a generative-only objective must not build the dropout views")

    return Views(
        sentences,
        tokenize(sentences),
        tokenize,
        lambda batch: encoder(**batch),
        refuse,
        lambda view, layer: view.pooled,
    )


def test_paser_terms_and_gradient_reach_encoder_and_decoder(
    tiny_encoder: Encoder, tmp_path: Path
) -> None:
    params = {"paser": paser_params(tmp_path)}
    method = CombinedMethod("paser", params, tiny_encoder)
    assert not method.contrastive
    state = TrainState(0, 10, torch.Generator().manual_seed(0))
    output = method(batch_views(tiny_encoder, SENTENCES[:4]), state)
    assert set(output.logs) == {"paser/generative", "paser/mlm", "paser/masked_share"}
    assert output.loss.item() == pytest.approx(
        output.logs["paser/generative"] + output.logs["paser/mlm"], rel=1e-5
    )
    output.loss.backward()
    embeddings = tiny_encoder.backbone.get_input_embeddings().weight
    assert embeddings.grad is not None and embeddings.grad.abs().sum() > 0
    assert all(p.grad is not None for p in method.parts["paser"].decoder.parameters())
    assert not any(p is embeddings for p in method.parameters())  # shared, not duplicated


def test_simcse_plus_paser_adds_the_contrastive_term(tiny_encoder: Encoder, tmp_path: Path) -> None:
    method = CombinedMethod("simcse+paser", {"paser": paser_params(tmp_path)}, tiny_encoder)
    assert method.contrastive


def test_saved_decoder_reconstructs_masked_phrases(tiny_model_dir: Path, tmp_path: Path) -> None:
    trainer = make_trainer(tiny_model_dir, "paser", tmp_path / "ck", max_steps=2, eval_steps=2)
    trainer.train(tmp_path / "out")
    assert (tmp_path / "out/paser_decoder/model.safetensors").is_file()
    rows = reconstruct(tmp_path / "out", [SENTENCE], "english")
    assert rows[0]["original"] == SENTENCE
    assert rows[0]["masked"].count("[MASK]") == 4  # transit visa (2), need, stop: ties by position
    assert rows[0]["generated"].count("[SEP]") <= 3  # one end-of-phrase token per phrase


SHORT = ["Thanks!", "Good idea."]


def short_paser(folder: Path, **config: object) -> dict:
    """PaSeR params over the RAKE phrases of the two SHORT sentences (5 maskable tokens)."""
    if not (folder / "rake.jsonl").is_file():
        extract(lambda: iter(SHORT), len(SHORT), PhrasesConfig(workers=1), folder)
    return {"phrases": str(folder / "rake.jsonl"), "decoder_layers": 1, **config}


def paser_output(encoder: Encoder, paser: dict, sentences: list[str]) -> MethodOutput:
    """One evaluation-mode objective (no dropout) with the EDA stream of seed 0."""
    method = CombinedMethod("paser", {"paser": paser}, encoder).eval()
    return method(
        batch_views(encoder, sentences), TrainState(0, 10, torch.Generator().manual_seed(0))
    )


def test_mlm_term_is_zero_when_masking_selects_no_token(
    tiny_encoder: Encoder, tmp_path: Path
) -> None:
    """Hand-built: a masking probability of 1e-9 selects none of the 5 tokens; the MLM term is 0
    (cross-entropy over no token is NaN) and the loss is the loss without MLM."""
    none_masked = paser_output(
        tiny_encoder, short_paser(tmp_path / "short", mlm_probability=1e-9), SHORT
    )
    without_mlm = paser_output(tiny_encoder, short_paser(tmp_path / "short", mlm_weight=0.0), SHORT)
    assert none_masked.logs["paser/mlm"] == 0.0
    assert "paser/mlm" not in without_mlm.logs
    assert none_masked.loss.item() == pytest.approx(without_mlm.loss.item(), rel=1e-5)
    assert none_masked.logs["paser/generative"] > 0
    none_masked.loss.backward()
    assert torch.isfinite(tiny_encoder.backbone.get_input_embeddings().weight.grad).all()


def test_mlm_of_one_or_two_short_sentences_is_always_finite(
    tiny_encoder: Encoder, tmp_path: Path
) -> None:
    """The default 15% masking of batches of 1-2 short sentences: often no token is picked
    (0.85^5 = 44% for both), and every loss is finite whether or not one is."""
    paser = short_paser(tmp_path / "short")
    skipped = scored = 0
    for seed in range(30):
        torch.manual_seed(seed)  # the MLM masking draws from the global generator
        output = paser_output(tiny_encoder, paser, SHORT[: 1 + seed % 2])
        assert math.isfinite(output.loss.item()), seed
        skipped += output.logs["paser/mlm"] == 0.0
        scored += output.logs["paser/mlm"] > 0
    assert skipped and scored


def test_phrases_of_another_corpus_are_refused(tiny_encoder: Encoder, tmp_path: Path) -> None:
    """The phrases file must hold exactly the training corpus's distinct sentences."""
    params = {"paser": paser_params(tmp_path / "phrases")}
    path = re.escape(params["paser"]["phrases"])
    method = CombinedMethod("simcse+paser", params, tiny_encoder)
    method.check_corpus([*reversed(SENTENCES), *SENTENCES[:3]])  # order and repeats: the same
    with pytest.raises(
        ConfigError,
        match=rf"^paser\.phrases: {path} was made from another corpus \(64 distinct sentences; "
        r"the training corpus has 2, and it has no row for the training sentence 'Thanks!'\)",
    ):
        method.check_corpus(SHORT)
    with pytest.raises(ConfigError, match=r"the training corpus has 10, and it has rows for sen"):
        method.check_corpus(SENTENCES[:10])
    with pytest.raises(ConfigError, match=r"the training corpus has 65, and it has no row for"):
        method.check_corpus([*SENTENCES, "one more sentence"])
    with pytest.raises(ConfigError, match=rf"^paser\.phrases: {path} has no row for the train"):
        method.parts["paser"].masked_copy("Thanks!", 30)


@pytest.mark.parametrize(
    ("content", "message"),
    [(None, r"nope\.jsonl: not found"), ("not json\n", r"nope\.jsonl:1: not a RAKE record")],
)
def test_missing_or_malformed_phrases_file_names_the_param(
    tiny_encoder: Encoder, tmp_path: Path, content: str | None, message: str
) -> None:
    path = tmp_path / "nope.jsonl"
    if content is not None:
        path.write_text(content)
    with pytest.raises(ConfigError, match=rf"^paser\.phrases: .*{message}"):
        CombinedMethod("paser", {"paser": {"phrases": str(path)}}, tiny_encoder)
