"""The one encode path (`evaluation.base.CachedEncoder`): each distinct sentence encoded once for
the life of the object, every call's vectors checked, sparse TF-IDF rows never cached, and
training's dev evaluation encoding every dev sentence again after each weight update."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from sentemb.encoder import Encoder
from sentemb.evaluation.base import PROBE_SIZE, CachedEncoder, UnusableVectors, embed
from sentemb.evaluation.sts import STSEvaluator
from sentemb.tfidf import TfidfEncoder
from sentemb.training.selection import selection_of

from support.encoders import CountingEncoder
from support.training import make_job, write_stsb

SICK = "senteval/data/downstream/SICK"


def test_each_distinct_sentence_is_encoded_once_for_the_life_of_the_object() -> None:
    inner = CountingEncoder()
    cached = CachedEncoder(inner)
    first = cached.encode(["a", "bb", "a"])
    second = cached.encode(["ccc", "bb", "ccc", "a"])
    assert inner.calls == [["a", "bb"], ["ccc"]]
    np.testing.assert_array_equal(first, inner.encode(["a", "bb", "a"]))
    np.testing.assert_array_equal(second, inner.encode(["ccc", "bb", "ccc", "a"]))
    assert second.dtype == np.float32
    assert cached.encode([]).shape == (0, 2)


def test_every_call_is_checked_cached_rows_included() -> None:
    same = {"a": np.array([1.0, 2.0]), "b": np.array([1.0, 2.0])}
    cached = CachedEncoder(CountingEncoder(same))
    cached.encode(["a"])  # one sentence: nothing to tell apart
    cached.encode(["b"])
    with pytest.raises(UnusableVectors, match="the same vector for all 2 sentences"):
        cached.encode(["a", "b", "a"])  # both from the cache
    broken = CachedEncoder(CountingEncoder({"x": np.array([np.nan, 1.0])}))
    with pytest.raises(UnusableVectors, match=r"non-finite vectors \(NaN or inf\) for 1 of 2"):
        broken.encode(["x", "y", "x"])


def test_sparse_tfidf_rows_are_never_cached() -> None:
    """Without a corpus TF-IDF fits its IDF on each call: a cached row would be another call's."""
    tfidf = TfidfEncoder()
    cached = CachedEncoder(tfidf)
    first = ["the cat sat", "a dog ran", "the cat sat"]
    second = ["the cat sat", "birds fly high", "the sun"]
    for sentences in (first, second):
        unique = list(dict.fromkeys(sentences))
        expected = tfidf.encode(unique)[[unique.index(s) for s in sentences]]
        assert (cached.encode(sentences) != expected).nnz == 0
    assert cached.sparse and not cached.cache


def test_mask_token_is_the_wrapped_tokenizers(tiny_encoder: Encoder) -> None:
    assert CachedEncoder(tiny_encoder).mask_token == tiny_encoder.tokenizer.mask_token == "[MASK]"
    assert CachedEncoder(TfidfEncoder()).mask_token is None


def test_embed_uses_a_given_cache_and_wraps_any_other_encoder_per_call() -> None:
    inner = CountingEncoder()
    cached = CachedEncoder(inner)
    for _ in range(2):
        vectors, row = embed(cached, ["a", "bb", "a"], batch_size=2)
    assert inner.calls == [["a", "bb"]] and row == {"a": 0, "bb": 1} and vectors.shape == (2, 2)
    plain = CountingEncoder()
    for _ in range(2):
        embed(plain, ["a", "bb", "a"], batch_size=2)
    assert plain.calls == [["a", "bb"], ["a", "bb"]]


def test_training_dev_evaluation_encodes_every_sentence_after_each_update(
    tiny_model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The train stage scores STS-B dev with `STSEvaluator(split="dev")`: each dev score
    encodes all its distinct sentences with the weights of that step, none from a cache."""
    lines = [f"g\tf\t2012\t{i}\t{i % 5}.0\tsentence {i}\tother {i * 7 % 11}" for i in range(12)]
    write_stsb(tmp_path / "data", lines)
    dev = STSEvaluator(tmp_path / "data", 4, split="dev")
    encoded: list[list[str]] = []
    original = Encoder.encode

    def counting(self: Encoder, sentences: Sequence[str], *args, **kwargs) -> np.ndarray:
        encoded.append(list(sentences))
        return original(self, sentences, *args, **kwargs)

    monkeypatch.setattr(Encoder, "encode", counting)
    predicted: list[np.ndarray] = []

    def evaluate(model: Encoder) -> float:
        score = dev(model)["STSBenchmark/dev"]
        predicted.append(dev.pairs["STSBenchmark"][0])
        return score

    job = make_job(tiny_model_dir, "simcse", tmp_path / "ckpt", evaluate=evaluate)
    job.train(tmp_path / "out", tmp_path / "ckpt")
    distinct = {s for line in lines for s in line.split("\t")[5:]}
    probes, full = encoded[::2], encoded[1::2]  # each dev score probes the model first
    assert len(full) == 3  # untrained, step 3, step 6
    assert all(sorted(call) == sorted(distinct) for call in full)
    assert all(len(call) == PROBE_SIZE and set(call) <= distinct for call in probes)
    assert not np.array_equal(predicted[0], predicted[1])
    assert not np.array_equal(predicted[1], predicted[2])


@pytest.mark.parametrize(
    ("selection", "keys"),
    [("stsb", ["STSBenchmark/dev"]), ("stsb+sick", ["STSBenchmark/dev", "SICKRelatedness/dev"])],
)
def test_model_selection_encodes_only_the_dev_sets_it_averages(
    tmp_path: Path, selection: str, keys: list[str]
) -> None:
    """`train.selection: stsb` scores STS-B dev alone (SimCSE §3); SICK trial's sentences are
    encoded only when the selection averages it (DCLR's stsb+sick)."""
    data = tmp_path / "data"
    write_stsb(data, [f"g\tf\t2012\t{i}\t{i}.0\tsts {i}\tsts pair {i * 3 % 5}" for i in range(5)])
    sick = [f"{i}\tsick {i}\tsick pair {i * 2 % 5}\t{1 + i * 0.5}\tNEUTRAL" for i in range(5)]
    header = "pair_ID\tsentence_A\tsentence_B\trelatedness_score\tentailment_judgment\n"
    (data / SICK).mkdir(parents=True)
    for split in ("train", "trial", "test_annotated"):  # every file, as for STS-B
        (data / SICK / f"SICK_{split}.txt").write_text(header + "".join(f"{s}\n" for s in sick))
    encoder = CountingEncoder()
    dev = selection_of({"train": {"selection": selection}}, data, 4)
    metrics = dev.scorer(encoder)
    expected = {f"{name} {i}" for name in ("sts", "sts pair") for i in range(5)}
    if selection == "stsb+sick":
        expected |= {f"{name} {i}" for name in ("sick", "sick pair") for i in range(5)}
    assert {s for call in encoder.calls for s in call} == expected
    assert dev.keys == keys
    assert set(keys) <= set(metrics)
    assert ("SICKRelatedness/dev" in metrics) == (selection == "stsb+sick")


@pytest.fixture(scope="module")
def model(tiny_model_dir: Path) -> Encoder:
    """The tiny BERT, loaded once for every example `hypothesis` draws."""
    return Encoder.from_pretrained(str(tiny_model_dir), "cls_before_pooler")


WORDS = ["dogs", "bark", "Dogs", "a", "cat", "sat", "on", "the", "mat", "stocks", "fell", "."]


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(st.lists(st.sampled_from(WORDS), min_size=1, max_size=8).map(" ".join), max_size=40),
    st.integers(1, 16),
)
@example(["dogs", "Dogs"], 1)  # two sentences, one input: CI drew it once
def test_a_model_is_probed_once_and_its_vectors_do_not_change(
    model: Encoder, sentences: list[str], batch_size: int
) -> None:
    """Before more than `PROBE_SIZE` new sentences, a model encodes up to `PROBE_SIZE` of them
    whose tokens differ ("Dogs" and "dogs" are one input to an uncased tokenizer); then every
    distinct sentence in the batches it would have without the probe: the vectors are byte for
    byte those of `Encoder.encode`, whatever the sentences and the batch size. Distinct
    sentences that are all one input give one vector: refused, as any such rows are."""
    unique = list(dict.fromkeys(sentences))
    if len(unique) > 1 and len({tuple(model.tokenizer(s)["input_ids"]) for s in unique}) == 1:
        with pytest.raises(UnusableVectors, match="the same vector for all"):
            CachedEncoder(model).encode(sentences, batch_size)
        return
    calls: list[list[str]] = []
    model.batches = lambda s, *a, **k: calls.append(list(s)) or Encoder.batches(model, s, *a, **k)
    try:
        cached = CachedEncoder(model)
        vectors = cached.encode(sentences, batch_size)
        cached.encode(sentences, batch_size)  # all cached: no probe, no encoding
    finally:
        del model.batches
    plain = model.encode(unique, batch_size, show_progress=False)
    assert vectors.tobytes() == plain[[unique.index(s) for s in sentences]].tobytes()
    encoded = [call for call in calls if call]  # an empty list asks for an empty array
    inputs = {tuple(model.tokenizer(s)["input_ids"]) for s in unique}
    if len(unique) > PROBE_SIZE and len(inputs) > 1:  # else there is nothing to tell apart
        probe, full = encoded
        assert len(probe) == min(len(inputs), PROBE_SIZE) and set(probe) <= set(unique)
        assert len({tuple(model.tokenizer(s)["input_ids"]) for s in probe}) == len(probe)
        assert full == unique
    else:
        assert encoded == ([unique] if unique else [])


def test_only_a_model_is_probed() -> None:
    """A refinement or TF-IDF may fit on each call's sentences: a few would not stand for all."""
    inner = CountingEncoder()
    sentences = [f"sentence {i}" for i in range(3 * PROBE_SIZE)]
    CachedEncoder(inner).encode(sentences)
    assert inner.calls == [sentences]
