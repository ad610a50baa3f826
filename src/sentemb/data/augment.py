"""EDA text augmentation (Wei & Zou, EMNLP 2019), as PaSeR applies it to both copies (§3.1.3).

Operations on whitespace-separated words, each selectable (PaSeR Table 4): `synonym` replaces
n = max(1, round(ratio * L)) distinct non-stopword words by a random WordNet synonym; `deletion`
drops each word with probability `ratio` (at least one word stays); `swap` exchanges two random
words n times. Words in `protected` (the mask token) are never replaced, dropped or moved.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import lru_cache

from sentemb.config import ConfigError

EDA_OPERATIONS = ("synonym", "deletion", "swap")


@lru_cache(maxsize=65536)
def wordnet_synonyms(word: str) -> tuple[str, ...]:
    """WordNet lemma names of `word`'s synsets, other than the word itself, sorted."""
    from nltk.corpus import wordnet

    names = {
        lemma.name().replace("_", " ").lower()
        for synset in wordnet.synsets(word)
        for lemma in synset.lemmas()
    }
    names.discard(word.lower())
    return tuple(sorted(n for n in names if n.replace(" ", "").replace("-", "").isalpha()))


def require_wordnet() -> None:
    """Fail early, naming NLTK_DATA, when WordNet is missing (downloaded when online)."""
    import nltk

    try:
        nltk.data.find("corpora/wordnet")
    except LookupError:
        if not nltk.download("wordnet", quiet=True):
            raise ConfigError(
                "paser.augment: synonym replacement needs NLTK's WordNet; set NLTK_DATA to a "
                "folder with corpora/wordnet (offline: ../shared/nltk_data)"
            ) from None


@dataclass
class EDA:
    """The selected EDA operations, applied in the order synonym, deletion, swap."""

    operations: Sequence[str] = ("synonym",)
    ratio: float = 0.1
    stopwords: frozenset[str] = frozenset()
    protected: frozenset[str] = field(default_factory=frozenset)

    def __post_init__(self) -> None:
        if "synonym" in self.operations:
            require_wordnet()

    def count(self, words: Sequence[str]) -> int:
        return max(1, round(self.ratio * len(words)))

    def __call__(self, text: str, rng: random.Random) -> str:
        words = text.split()
        for operation in EDA_OPERATIONS:
            if operation in self.operations and words:
                words = getattr(self, operation)(words, rng)
        return " ".join(words)

    def movable(self, words: Sequence[str]) -> list[int]:
        return [i for i, w in enumerate(words) if w not in self.protected]

    def synonym(self, words: list[str], rng: random.Random) -> list[str]:
        candidates = [
            i
            for i in self.movable(words)
            if words[i].isalpha() and words[i].lower() not in self.stopwords
        ]
        rng.shuffle(candidates)
        words, replaced = list(words), 0
        for i in candidates:
            if replaced == self.count(words):
                break
            synonyms = wordnet_synonyms(words[i].lower())
            if synonyms:
                words[i] = rng.choice(synonyms)
                replaced += 1
        return words

    def deletion(self, words: list[str], rng: random.Random) -> list[str]:
        kept = [w for w in words if w in self.protected or rng.random() >= self.ratio]
        return kept or [rng.choice(words)]

    def swap(self, words: list[str], rng: random.Random) -> list[str]:
        words, movable = list(words), self.movable(words)
        if len(movable) < 2:
            return words
        for _ in range(self.count(words)):
            i, j = rng.sample(movable, 2)
            words[i], words[j] = words[j], words[i]
        return words
