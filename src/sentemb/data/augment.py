"""EDA text augmentation (Wei & Zou, EMNLP 2019), as PaSeR applies it to both copies (§3.1.3).

Operations on words (split at whitespace; Chinese: segmented by jieba), each selectable (PaSeR
Table 4): `synonym` replaces n = max(1, round(ratio * L)) distinct non-stopword words by a random
synonym from the language's wordnet (WordNet for English, else the Open Multilingual WordNet);
`deletion` drops each word with probability `ratio` (at least one word stays); `swap` exchanges two
random words n times. Words in `protected` (the mask token) are never replaced, dropped or moved.
"""

from __future__ import annotations

import random
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import lru_cache

from sentemb.config import ConfigError
from sentemb.tfidf import quiet_jieba

EDA_OPERATIONS = ("synonym", "deletion", "swap")


# The languages of NLTK's stopword lists that one of NLTK's wordnets covers, by the code it
# reads them with: English's own WordNet (`wordnet`) and the Open Multilingual WordNet 1.4
# (`omw-1.4`, ISO 639-3 codes). German, Russian, Turkish, Hungarian, ... have none.
WORDNET_CODES = {
    "english": "eng",
    "albanian": "als",
    "arabic": "arb",
    "basque": "eus",
    "catalan": "cat",
    "chinese": "cmn",
    "danish": "dan",
    "dutch": "nld",
    "finnish": "fin",
    "french": "fra",
    "greek": "ell",
    "hebrew": "heb",
    "indonesian": "ind",
    "italian": "ita",
    "norwegian": "nob",
    "portuguese": "por",
    "romanian": "ron",
    "slovene": "slv",
    "spanish": "spa",
    "swedish": "swe",
}


@lru_cache(maxsize=65536)
def wordnet_synonyms(word: str, code: str = "eng") -> tuple[str, ...]:
    """The wordnet lemma names in language `code` of `word`'s synsets, other than the word
    itself, sorted."""
    from nltk.corpus import wordnet

    names = {
        name.replace("_", " ").lower()
        for synset in wordnet.synsets(word, lang=code)
        for name in synset.lemma_names(lang=code)
    }
    names.discard(word.lower())
    return tuple(sorted(n for n in names if n.replace(" ", "").replace("-", "").isalpha()))


def require_wordnet(language: str) -> str:
    """The wordnet code of `language` (an NLTK stopword list's name) once its data is found
    (downloaded when online); else one `ConfigError` naming `paser.augment` and what to get."""
    import nltk

    code = WORDNET_CODES.get(language)
    if code is None:
        raise ConfigError(
            f"paser.augment: synonym replacement needs a wordnet of {language}, and NLTK has "
            "none (WordNet is English; the Open Multilingual WordNet 1.4 does not cover it): "
            "drop synonym from paser.augment (deletion and swap work in any language)"
        )
    packages = ["wordnet"] if code == "eng" else ["wordnet", "omw-1.4"]
    for package in packages:
        try:
            nltk.data.find(f"corpora/{package}")
        except LookupError:
            if not nltk.download(package, quiet=True):
                raise ConfigError(
                    f"paser.augment: synonym replacement in {language} needs NLTK's {package}; "
                    f"get it into a folder of NLTK_DATA or data.nltk_data (python -m "
                    f"nltk.downloader -d <folder> {' '.join(packages)}; the offline mirror "
                    "../shared/nltk_data holds wordnet only)"
                ) from None
    return code


@dataclass
class EDA:
    """The selected EDA operations, applied in the order synonym, deletion, swap."""

    operations: Sequence[str] = ("synonym",)
    ratio: float = 0.1
    stopwords: frozenset[str] = frozenset()
    protected: frozenset[str] = field(default_factory=frozenset)
    language: str = "english"  # an NLTK stopword list's name

    def __post_init__(self) -> None:
        self.code = require_wordnet(self.language) if "synonym" in self.operations else ""

    def words(self, text: str) -> list[str]:
        """`text` as words: split at whitespace, or (Chinese) segmented by jieba around the
        protected tokens."""
        if self.language != "chinese":
            return text.split()
        if not self.protected:
            return [w for w in quiet_jieba().lcut(text) if w.strip()]
        pattern = "|".join(re.escape(token) for token in sorted(self.protected, key=len)[::-1])
        words = []
        for piece in re.split(f"({pattern})", text):
            if piece in self.protected:
                words.append(piece)
            else:
                words += [w for w in quiet_jieba().lcut(piece) if w.strip()]
        return words

    def count(self, words: Sequence[str]) -> int:
        return max(1, round(self.ratio * len(words)))

    def __call__(self, text: str, rng: random.Random) -> str:
        words = self.words(text)
        for operation in EDA_OPERATIONS:
            if operation in self.operations and words:
                words = getattr(self, operation)(words, rng)
        return ("" if self.language == "chinese" else " ").join(words)

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
            synonyms = wordnet_synonyms(words[i].lower(), self.code)
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
