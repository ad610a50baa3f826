"""EDA (Wei & Zou, 2019): each operation changes what its ratio says and never a mask token."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from sentemb.config import ConfigError
from sentemb.data.augment import EDA, WORDNET_CODES, wordnet_synonyms

from support import REPO

STOPWORD_LISTS = [  # the offline mirror's NLTK stopword lists
    p.name for p in (REPO / "../shared/nltk_data/corpora/stopwords").iterdir() if p.name != "README"
]

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


@pytest.mark.parametrize("language", sorted(set(STOPWORD_LISTS) - set(WORDNET_CODES)))
def test_synonyms_in_a_language_no_wordnet_covers_are_refused(language: str) -> None:
    with pytest.raises(ConfigError, match=rf"^paser\.augment: .*a wordnet of {language}"):
        EDA(["synonym"], language=language)
    EDA(["deletion", "swap"], language=language)  # these need no wordnet


@pytest.mark.parametrize("language", sorted(set(WORDNET_CODES) - {"english"}))
def test_a_language_of_the_open_multilingual_wordnet_needs_omw(
    language: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Offline, without NLTK's omw-1.4: one error saying what to download (a stub stands in for
    the download, which cannot reach the network here either)."""
    import nltk

    found = nltk.data.find

    def find(name: str, *args: object, **kwargs: object) -> object:
        if "omw" in name:
            raise LookupError(name)
        return found(name, *args, **kwargs)

    monkeypatch.setattr(nltk.data, "find", find)
    monkeypatch.setattr(nltk, "download", lambda *args, **kwargs: False)
    with pytest.raises(
        ConfigError, match=rf"in {language} needs NLTK's omw-1.4; .* wordnet omw-1.4"
    ):
        EDA(["synonym"], language=language)


def test_every_wordnet_language_is_a_stopword_list() -> None:
    assert set(WORDNET_CODES) - set(STOPWORD_LISTS) <= {"albanian"}  # newer NLTK lists have it


def test_chinese_words_are_segmented_around_the_mask() -> None:
    eda = EDA(["swap"], ratio=0.5, protected=frozenset({MASK}), language="chinese")
    assert eda.words(f"我想申请{MASK}信用卡") == ["我", "想", "申请", MASK, "信用卡"]
    out = eda(f"我想申请{MASK}信用卡", random.Random(0))
    assert (
        MASK in out and " " not in out and sorted(out.replace(MASK, "")) == sorted("我想申请信用卡")
    )
