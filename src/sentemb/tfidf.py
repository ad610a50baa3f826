"""A TF-IDF bag-of-words baseline encoder, scored by the same evaluators as the neural models.

English uses scikit-learn's word tokenizer; Chinese is segmented with jieba. The IDF table is
fitted on a general corpus when one is given (the training corpus for English), otherwise on the
sentences of each `encode` call (the evaluation sentences: no Chinese corpus ships offline).
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from types import ModuleType

import scipy.sparse as sp
from sklearn.feature_extraction.text import TfidfVectorizer

from sentemb.config import ConfigError, Count, UserError

WORD_PATTERN = r"(?u)\b\w+\b"  # words for English TF-IDF here and in the phrases stage


@dataclass
class TfidfConfig:
    """Params section `tfidf`."""

    max_features: Count | None = None
    sublinear_tf: bool = True
    min_df: Count = 1


@functools.cache
def quiet_jieba() -> ModuleType:
    """jieba, without its DEBUG lines on loading its dictionary (it prints them through its own
    handler and again through the stage's log). Quieted once: `setLogLevel` clears the cache of
    every logger, a quarter of the time of segmenting a sentence when done per call."""
    import jieba

    jieba.setLogLevel(logging.INFO)
    return jieba


def jieba_words(text: str) -> list[str]:
    """Chinese word segmentation with jieba (punctuation and spaces dropped)."""
    return [w for w in quiet_jieba().lcut(text) if w.strip() and any(ch.isalnum() for ch in w)]


class TfidfEncoder:
    """Sparse TF-IDF vectors; rows are L2-normalised, so cosine is a dot product."""

    def __init__(
        self,
        language: str = "en",
        config: TfidfConfig | None = None,
        corpus: Iterable[str] | None = None,
    ) -> None:
        config = config or TfidfConfig()
        self.vectorizer = TfidfVectorizer(
            tokenizer=jieba_words if language == "zh" else None,
            token_pattern=None if language == "zh" else WORD_PATTERN,
            lowercase=language != "zh",
            max_features=config.max_features,
            sublinear_tf=config.sublinear_tf,
            min_df=config.min_df,
        )
        self.fitted = corpus is not None
        if corpus is not None:
            self._fit(list(corpus))

    def _fit(self, sentences: Sequence[str]) -> sp.csr_matrix:
        """Fit the vocabulary and IDF on `sentences`, their rows returned; a `min_df` no word of
        them reaches is an error naming it, sentences without any word one saying so."""
        try:
            return self.vectorizer.fit_transform(sentences).tocsr()
        except ValueError as err:  # scikit-learn: no word left after min_df, or none at all
            min_df = self.vectorizer.min_df
            analyze = self.vectorizer.build_analyzer()
            if min_df > 1 and any(analyze(sentence) for sentence in sentences):
                raise ConfigError(
                    f"tfidf.min_df: {min_df} documents, and no word is in that many of the "
                    f"{len(sentences):,} sentences TF-IDF is fitted on ({err})"
                ) from None
            raise UserError(
                f"TF-IDF: {len(sentences):,} sentences without a word ({err})"
            ) from None

    def encode(self, sentences: Sequence[str], batch_size: int = 0) -> sp.csr_matrix:
        """TF-IDF rows for `sentences` (`batch_size` is accepted for the encoder protocol)."""
        if not self.fitted:
            return self._fit(sentences)
        return self.vectorizer.transform(sentences).tocsr()
