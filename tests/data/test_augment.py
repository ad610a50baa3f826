"""EDA (Wei & Zou, 2019): each operation changes what its ratio says and never a mask token."""

from __future__ import annotations

import random
from collections import Counter

from sentemb.data.augment import EDA, wordnet_synonyms

MASK = "[MASK]"


def test_synonym_replacement_changes_round_ratio_times_length_words() -> None:
    words = ["car", "house", "dog", "big", "quick", "child", "road", "city", "ship", "tree"]
    eda = EDA(["synonym"], ratio=0.3)
    for seed in range(20):
        # one list item per original word (a multi-word synonym stays one item)
        out = eda.synonym(words, random.Random(seed))
        assert len(out) == len(words)
        assert sum(a != b for a, b in zip(words, out, strict=True)) == 3, (seed, out)


def test_synonyms_come_from_wordnet_and_skip_stopwords_and_masks() -> None:
    assert "automobile" in wordnet_synonyms("car")
    eda = EDA(["synonym"], ratio=0.9, stopwords=frozenset({"the"}), protected=frozenset({MASK}))
    out = eda(f"the {MASK} {MASK} car", random.Random(0)).split(" ")
    assert out[:3] == ["the", MASK, MASK] and out[3:] != ["car"]


def test_deletion_drops_each_word_with_probability_ratio() -> None:
    words = [f"w{i}" for i in range(20000)] + [MASK] * 50
    out = EDA(["deletion"], ratio=0.1, protected=frozenset({MASK}))(
        " ".join(words), random.Random(1)
    ).split(" ")
    assert out.count(MASK) == 50
    assert abs((20000 - (len(out) - 50)) / 20000 - 0.1) < 0.01
    assert EDA(["deletion"], ratio=0.99)("one two", random.Random(0)) in {"one", "two"}


def test_swap_moves_round_ratio_times_length_pairs_and_never_masks() -> None:
    words = ["a", "b", MASK, "c", "d", "e", "f", "g", "h", "i", "j"]
    eda = EDA(["swap"], ratio=0.2, protected=frozenset({MASK}))
    assert eda.count(words) == 2
    for seed in range(20):
        out = eda(" ".join(words), random.Random(seed)).split(" ")
        assert Counter(out) == Counter(words) and out[2] == MASK
        assert sum(a != b for a, b in zip(words, out, strict=True)) <= 4
