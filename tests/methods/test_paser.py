"""PaSeR: masking alignment, eq. 2 and eq. 3 by hand, the method's terms, the saved decoder."""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest
import torch

from sentemb.config import ConfigError, section
from sentemb.encoder import Encoder
from sentemb.losses import method_loss
from sentemb.methods.paser import PaSeRConfig, PaSeRLoss, decoding_signal, summed_cross_entropy
from sentemb.methods.paser.inputs import MaskedCopy, decoder_targets, mask_phrases
from sentemb.phrases import PhrasesConfig, extract, phrase_span, read_phrase_spans
from sentemb.reconstruct import reconstruct

from support.training import SENTENCES, make_job, paser_params

SENTENCE = "Do I need a transit visa for a stop in London?"


def phrase_rows(params: dict, sentences: list[str]) -> dict:
    """PaSeR's pipeline data for `sentences` (its section's `sentence_data`): the spans."""
    return section(params, "paser", PaSeRConfig).sentence_data(params, sentences).rows


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


def test_summed_cross_entropy_eq3_by_hand() -> None:
    pad = 1
    logits = torch.tensor(
        [
            [[0.0, 0.0, math.log(3)], [math.log(2), 0.0, 0.0], [5.0, 5.0, 5.0]],
            [[0.0, 0.0, 0.0], [9.0, 0.0, 0.0], [0.0, 9.0, 0.0]],
        ]
    )
    targets = torch.tensor([[2, 0, pad], [0, pad, pad]])
    keep = targets != pad
    # sentence 1: -ln(3/5) - ln(2/4); sentence 2: -ln(1/3); eq. 3 sums tokens, batch mean
    expected = (-math.log(0.6) - math.log(0.5) + math.log(3)) / 2
    loss = summed_cross_entropy(logits[keep], targets[keep], count=2)
    assert loss.item() == pytest.approx(expected, rel=1e-6)


def test_decoder_targets_shift_right_with_end_of_phrase() -> None:
    copies = [MaskedCopy("", [[7, 8], [9]]), MaskedCopy("", [[5]])]
    inputs, targets = decoder_targets(copies, bos=101, eos=102, pad=0, limit=32)
    assert targets.tolist() == [[7, 8, 102, 9, 102], [5, 102, 0, 0, 0]]
    assert inputs.tolist() == [[101, 7, 8, 102, 9], [101, 5, 0, 0, 0]]


def prepared(loss: PaSeRLoss, sentences: list[str], phrases=None, seeds=None) -> list[dict]:
    """The features the pipeline's collator hands the loss: the sentences, PaSeR's inputs."""
    made = loss.batch_inputs()["paser"](sentences, phrases, seeds or list(range(len(sentences))))
    return [loss.model.tokenize(sentences), made]


def test_paser_terms_and_gradient_reach_encoder_and_decoder(tiny_st, tmp_path: Path) -> None:
    """Alone, PaSeR is eq. 4 (generative + MLM), never encodes the dropout views (one forward
    pass: s, s~ and the MLM rows), and trains the encoder and its decoder, whose embeddings are
    the encoder's (shared, not a copy)."""
    loss = method_loss("paser", tiny_st, {"paser": paser_params(tmp_path)})
    assert not loss.contrastive and isinstance(loss, PaSeRLoss)
    calls = []
    forward = tiny_st.forward
    tiny_st.forward = lambda features, **kw: calls.append(features) or forward(features, **kw)
    terms = loss(prepared(loss, SENTENCES[:4]))
    assert set(terms) == {"paser/generative", "paser/mlm"} and len(calls) == 1
    assert calls[0]["input_ids"].shape[0] == 3 * 4
    sum(terms.values()).backward()
    embeddings = tiny_st[0].auto_model.get_input_embeddings().weight
    assert embeddings.grad is not None and embeddings.grad.abs().sum() > 0
    assert all(p.grad is not None for p in loss.parts["paser"].decoder.parameters())
    assert not any(p is embeddings for p in loss.own_parameters())


def test_paser_finds_its_phrases_itself(tiny_st, tmp_path: Path) -> None:
    """With no phrases given (a one-column dataset), PaSeR runs RAKE on the batch: the same
    inputs as with the phrases stage's; given only token ids (a plain sentence-transformers
    collator), it reads them back as text and trains."""
    params = {"paser": paser_params(tmp_path)}
    loss = method_loss("paser", tiny_st, params)
    make = loss.batch_inputs()["paser"]
    spans = read_phrase_spans(Path(params["paser"]["phrases"]))
    texts = SENTENCES[:4]
    staged = make(texts, [spans[t] for t in texts], [0, 1, 2, 3])
    found = make(texts, None, [0, 1, 2, 3])
    assert staged.keys() == found.keys()
    assert all(torch.equal(staged[key], found[key]) for key in staged)
    terms = loss([tiny_st.tokenize(texts)])
    assert torch.isfinite(sum(terms.values()))


def test_inputs_of_a_sentence_do_not_depend_on_its_batch(tiny_st, tmp_path: Path) -> None:
    """EDA and MLM masking draw from each sentence's seed: a sentence's rows are the same in a
    batch of 4 as in a batch of 2 (as one process's share of a global batch)."""
    loss = method_loss("paser", tiny_st, {"paser": paser_params(tmp_path) | {"augment": ["swap"]}})
    make = loss.batch_inputs()["paser"]
    whole = make(SENTENCES[:4], None, [5, 6, 7, 8])
    half = make(SENTENCES[2:4], None, [7, 8])
    width = half["input_ids"].shape[1]
    for mine, theirs in ((0, 2), (1, 3), (2, 6), (3, 7)):  # s and s~ of sentences 2 and 3
        row = whole["input_ids"][theirs]
        assert torch.equal(
            row[:width][half["attention_mask"][mine] == 1],
            half["input_ids"][mine][half["attention_mask"][mine] == 1],
        )


def test_simcse_plus_paser_adds_the_contrastive_term(tiny_st, tmp_path: Path) -> None:
    loss = method_loss("simcse+paser", tiny_st, {"paser": paser_params(tmp_path)})
    assert loss.contrastive
    assert set(loss(prepared(loss, SENTENCES[:4]))) == {
        "contrastive_loss",
        "paser/generative",
        "paser/mlm",
    }


def test_saved_decoder_reconstructs_masked_phrases(tiny_model_dir: Path, tmp_path: Path) -> None:
    job = make_job(tiny_model_dir, "paser", tmp_path / "ck", max_steps=2, eval_steps=2)
    job.train(tmp_path / "out", tmp_path / "ck")
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


def paser_terms(model, paser: dict, sentences: list[str], seeds: list[int]) -> dict:
    """One evaluation-mode objective (no dropout) of `sentences` drawing from `seeds`."""
    loss = method_loss("paser", model, {"paser": paser}).eval()
    return loss(prepared(loss, sentences, seeds=seeds))


def test_mlm_term_is_zero_when_masking_selects_no_token(tiny_st, tmp_path: Path) -> None:
    """Hand-built: a masking probability of 1e-9 selects none of the 5 tokens; the MLM term is 0
    (cross-entropy over no token is NaN) and the loss is the loss without MLM."""
    folder = tmp_path / "short"
    none_masked = paser_terms(tiny_st, short_paser(folder, mlm_probability=1e-9), SHORT, [0, 1])
    without_mlm = paser_terms(tiny_st, short_paser(folder, mlm_weight=0.0), SHORT, [0, 1])
    assert none_masked["paser/mlm"].item() == 0.0
    assert "paser/mlm" not in without_mlm
    total = sum(none_masked.values())
    assert total.item() == pytest.approx(sum(without_mlm.values()).item(), rel=1e-5)
    assert none_masked["paser/generative"].item() > 0
    total.backward()
    assert torch.isfinite(tiny_st[0].auto_model.get_input_embeddings().weight.grad).all()


def test_mlm_of_one_or_two_short_sentences_is_always_finite(tiny_st, tmp_path: Path) -> None:
    """The default 15% masking of batches of 1-2 short sentences: often no token is picked
    (0.85^5 = 44% for both), and every loss is finite whether or not one is."""
    paser = short_paser(tmp_path / "short")
    skipped = scored = 0
    for seed in range(30):
        count = 1 + seed % 2
        terms = paser_terms(tiny_st, paser, SHORT[:count], [seed] * count)
        assert math.isfinite(sum(terms.values()).item()), seed
        skipped += terms["paser/mlm"].item() == 0.0
        scored += terms["paser/mlm"].item() > 0
    assert skipped and scored


def test_phrases_of_another_corpus_are_refused(tmp_path: Path) -> None:
    """The phrases file must hold exactly the training corpus's distinct sentences."""
    params = {"paser": paser_params(tmp_path / "phrases")}
    path = re.escape(params["paser"]["phrases"])
    phrase_rows(params, [*reversed(SENTENCES), *SENTENCES[:3]])  # order and repeats: the same
    with pytest.raises(
        ConfigError,
        match=rf"^paser\.phrases: {path} was made from another corpus \(64 distinct sentences; "
        r"the training corpus has 2, and it has no row for the training sentence 'Thanks!'\)",
    ):
        phrase_rows(params, SHORT)
    with pytest.raises(ConfigError, match=r"the training corpus has 10, and it has rows for sen"):
        phrase_rows(params, SENTENCES[:10])
    with pytest.raises(ConfigError, match=r"the training corpus has 65, and it has no row for"):
        phrase_rows(params, [*SENTENCES, "one more sentence"])


@pytest.mark.parametrize(
    ("content", "message"),
    [(None, r"nope\.jsonl: not found"), ("not json\n", r"nope\.jsonl:1: not a RAKE record")],
)
def test_missing_or_malformed_phrases_file_names_the_param(
    tmp_path: Path, content: str | None, message: str
) -> None:
    path = tmp_path / "nope.jsonl"
    if content is not None:
        path.write_text(content)
    with pytest.raises(ConfigError, match=rf"^paser\.phrases: .*{message}"):
        phrase_rows({"paser": {"phrases": str(path)}}, SENTENCES)
