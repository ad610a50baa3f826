"""Per-sentence phrases (RAKE) and keywords (TF-IDF) of the training corpus.

PaSeR (Wu & Zhao, 2022, §3.1.1) masks a sentence's most important RAKE phrases (Rose et al.,
2010): words are split at stopwords and punctuation into candidate phrases, a word scores
deg(w)/freq(w) and a phrase the sum of its words. Each sentence is its own document (the corpus
is one sentence per line, so no sentence splitter is used). Keywords are TF-IDF: for English the
IDF is fitted on the corpus in a first streaming pass (scikit-learn's analyzer and its smooth IDF,
ln((1 + n) / (1 + df)) + 1); for Chinese, jieba's TF-IDF with its own IDF table.

Output: `rake.jsonl` and `keywords.jsonl`, line i for sentence i. A RAKE record is the sentence
and its phrases, best first, each `[text, score, start, end]` with the character span in the
sentence; a keyword record is `[[word, score], ...]`. For English also `idf.json`, the corpus's
IDF table, with which RepAL (`sentemb.refine.repal`) picks the keywords of any other sentence.
"""

from __future__ import annotations

import itertools
import json
import math
import re
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from joblib import cpu_count
from tqdm.auto import tqdm

from sentemb.config import ConfigError, Count, NonNegativeInt
from sentemb.data.readers import DataFormatError, is_blank, iter_lines
from sentemb.io import atomic_path
from sentemb.tfidf import WORD_PATTERN, jieba_words, quiet_jieba

T = TypeVar("T")
R = TypeVar("R")
LATIN_CHAR = re.compile("[A-Za-z0-9]", flags=re.IGNORECASE)  # what a Latin phrase may not touch
IDF_FILE = "idf.json"


@dataclass(frozen=True)
class IdfTable:
    """A corpus's smooth IDF by word, ln((1 + n) / (1 + df)) + 1 (scikit-learn's), over its n
    `documents`. A word the corpus lacks (df = 0) is rarer than any in it and gets the formula's
    largest value, ln(1 + n) + 1 (scikit-learn's `transform` would drop it: never a keyword)."""

    idf: dict[str, float]
    documents: int

    def __getitem__(self, word: str) -> float:
        return self.idf.get(word, math.log(1 + self.documents) + 1)


@dataclass
class PhrasesConfig:
    """Params section `phrases`."""

    language: str = "english"  # NLTK stopword list; "chinese" also segments words with jieba
    top_k: Count = 5  # phrases kept per sentence (PaSeR masks `paser.mask_phrases` of them)
    min_length: Count = 1  # words per phrase
    max_length: Count = 4
    keywords: Count = 5  # TF-IDF keywords kept per sentence
    workers: NonNegativeInt = 0  # processes; 0 = every core, and never more than the cores
    chunk_size: Count = 1000  # sentences per task

    def validate(self) -> list[str]:
        if self.max_length < self.min_length:
            return [f"max_length: {self.max_length} is below min_length {self.min_length}"]
        return []

    @property
    def chinese(self) -> bool:
        return self.language == "chinese"


def nltk_stopwords(language: str, param: str = "phrases.language") -> set[str]:
    """NLTK's stopword list from `NLTK_DATA` (downloaded when missing and online); `language` is
    one of its lists' names (`english`), never a path (`../x`) or its README."""
    import nltk
    from nltk.corpus import stopwords

    try:
        nltk.data.find("corpora/stopwords")
    except LookupError:
        nltk.download("stopwords", quiet=True)
    try:
        names = set(stopwords.fileids())  # NLTK lists no README among them
    except (LookupError, OSError) as err:
        raise ConfigError(
            f"{param}: no NLTK stopword lists; set NLTK_DATA to a folder with "
            "corpora/stopwords (offline: ../shared/nltk_data)"
        ) from err
    if language not in names:
        raise ConfigError(
            f"{param}: {language!r} is not one of NLTK's stopword lists "
            f"({', '.join(sorted(names))})"
        )
    return set(stopwords.words(language))


def phrase_span(sentence: str, phrase: str, chinese: bool) -> tuple[int, int] | None:
    """Character span of a RAKE phrase (lower-cased words joined by spaces) in `sentence`.

    Words are matched case-insensitively with any whitespace between them, and, for Latin
    script, not inside a longer word; None when the phrase does not occur as such.

    The boundaries are checked here rather than as look-arounds in the pattern: with a
    case-insensitive `[A-Za-z0-9]` a pattern takes over ten times as long to compile, and every
    phrase is a new pattern (benchmarks/README.md).
    """
    words = [re.escape(w) for w in phrase.split()]
    body = re.compile((r"\s*" if chinese else r"\s+").join(words), flags=re.IGNORECASE)
    start = 0
    while start <= len(sentence) and (match := body.search(sentence, start)):
        start, end = match.span()
        inside_word = start > 0 and LATIN_CHAR.match(sentence, start - 1)
        if not inside_word and not LATIN_CHAR.match(sentence, end):
            return start, end
        start += 1
    return None


class Extractor:
    """RAKE phrases and TF-IDF keywords of single sentences (one per worker process)."""

    def __init__(self, config: PhrasesConfig, idf: IdfTable | None) -> None:
        from rake_nltk import Rake

        self.config, self.idf = config, idf
        self.stopwords = nltk_stopwords(config.language)
        self.rake = Rake(
            stopwords=self.stopwords,
            min_length=config.min_length,
            max_length=config.max_length,
            include_repeated_phrases=False,
            sentence_tokenizer=lambda text: [text],
            word_tokenizer=jieba_words if config.chinese else None,
        )
        self.scorer = KeywordScorer(config.chinese, idf, self.stopwords)

    def phrases(self, sentence: str) -> list[list[Any]]:
        """The `top_k` RAKE phrases found in the sentence, [text, score, start, end].

        Best first; ties go to the phrase that comes first in the sentence (rake-nltk's own
        order of ties follows a set, which differs between processes).
        """
        self.rake.extract_keywords_from_text(sentence)
        found = []
        for score, phrase in self.rake.get_ranked_phrases_with_scores():
            span = phrase_span(sentence, phrase, self.config.chinese)
            if span is not None:
                found.append([phrase, round(float(score), 4), *span])
        found.sort(key=lambda p: (-p[1], p[2]))
        return found[: self.config.top_k]

    def keywords(self, sentence: str) -> list[list[Any]]:
        """The `keywords` words of highest TF-IDF in the sentence: [word, score]."""
        return self.scorer(sentence, self.config.keywords)

    def records(self, sentences: list[str]) -> tuple[list[str], list[str], list[int]]:
        """Per sentence: its rake.jsonl and keywords.jsonl lines, and its number of phrases."""
        phrases = [self.phrases(s) for s in sentences]
        pairs = zip(sentences, phrases, strict=True)
        rake = [json.dumps([s, p], ensure_ascii=False) for s, p in pairs]
        keywords = [json.dumps(self.keywords(s), ensure_ascii=False) for s in sentences]
        return rake, keywords, [len(p) for p in phrases]


class KeywordScorer:
    """TF-IDF keywords of one sentence: count x IDF of its non-stopwords, best first.

    English uses scikit-learn's analyzer and a corpus IDF table (needed only when called; RAKE
    alone goes without); Chinese uses jieba's TF-IDF
    (`jieba.analyse.extract_tags`, its own IDF table and stopword rule).
    """

    def __init__(
        self, chinese: bool, idf: IdfTable | None, stopwords: set[str] | frozenset[str]
    ) -> None:
        self.chinese, self.idf, self.stopwords = chinese, idf, stopwords
        self.analyzer = None if chinese else english_analyzer()

    def __call__(self, sentence: str, top_k: int) -> list[list[Any]]:
        """The `top_k` words of highest TF-IDF, `[word, score]`; ties in alphabetical order."""
        if self.chinese:
            quiet_jieba()
            import jieba.analyse

            tags = jieba.analyse.extract_tags(sentence, topK=top_k, withWeight=True)
            return [[word, round(float(score), 4)] for word, score in tags]
        assert self.analyzer is not None and self.idf is not None
        counts = Counter(w for w in self.analyzer(sentence) if w not in self.stopwords)
        scored = sorted(
            ((count * self.idf[word], word) for word, count in counts.items()),
            key=lambda pair: (-pair[0], pair[1]),
        )
        return [[word, round(score, 4)] for score, word in scored[:top_k]]


def english_analyzer() -> Callable[[str], list[str]]:
    """scikit-learn's word analyzer, as the TF-IDF baseline uses it (lower-cased \\w+ tokens)."""
    from sklearn.feature_extraction.text import CountVectorizer

    return CountVectorizer(token_pattern=WORD_PATTERN).build_analyzer()


def document_frequencies(sentences: list[str]) -> tuple[int, Counter[str]]:
    """How many sentences, and in how many of them each word occurs."""
    analyzer = english_analyzer()
    return len(sentences), Counter(w for sentence in sentences for w in set(analyzer(sentence)))


_EXTRACTOR: Extractor | None = None


def _start_worker(config: PhrasesConfig, idf: IdfTable | None) -> None:
    global _EXTRACTOR
    _EXTRACTOR = Extractor(config, idf)


def _extract(sentences: list[str]) -> tuple[list[str], list[str], list[int]]:
    assert _EXTRACTOR is not None
    return _EXTRACTOR.records(sentences)


def ordered_map(
    pool: ProcessPoolExecutor, fn: Callable[[T], R], items: Iterable[T], inflight: int
) -> Iterator[R]:
    """`pool.map` that submits at most `inflight` tasks ahead, so memory stays flat."""
    pending: list[Future[R]] = []
    for item in items:
        pending.append(pool.submit(fn, item))
        if len(pending) >= inflight:
            yield pending.pop(0).result()
    for future in pending:
        yield future.result()


def chunks(sentences: Iterable[str], size: int) -> Iterator[list[str]]:
    iterator = iter(sentences)
    while chunk := list(itertools.islice(iterator, size)):
        yield chunk


def extract(
    corpus: Callable[[], Iterable[str]], total: int, config: PhrasesConfig, out: Path
) -> dict[str, float]:
    """Stream `corpus()` through every core and write `out/rake.jsonl`, `out/keywords.jsonl`.

    `corpus` is called once per pass (IDF, then extraction). Returns counts for the metrics.
    """
    nltk_stopwords(config.language)  # a missing list is one clear error here, not in a worker
    cores = cpu_count()  # the cores this process may use (affinity, quota), as joblib counts them
    workers = min(config.workers or cores, cores)  # more would only share the cores
    inflight = 2 * workers
    idf = None
    with ProcessPoolExecutor(workers) as pool:
        if not config.chinese:
            df: Counter[str] = Counter()
            bar = tqdm(total=total, desc="idf", unit="sent", disable=None)  # a terminal only
            for size, counts in ordered_map(
                pool, document_frequencies, chunks(corpus(), config.chunk_size), inflight
            ):
                df.update(counts)
                bar.update(size)
            bar.close()
            # to 1e-10: libm's log may differ in the last bit between CPUs (FMA or not)
            idf = IdfTable(
                {w: round(math.log((1 + total) / (1 + n)) + 1, 10) for w, n in df.items()}, total
            )
            del df
    stats = {"sentences": 0, "with_phrases": 0, "phrases": 0}
    with (
        ProcessPoolExecutor(workers, initializer=_start_worker, initargs=(config, idf)) as pool,
        atomic_path(out, folder=True) as tmp,
    ):
        tmp.mkdir()
        if idf is not None:
            write_idf(tmp, idf)
        with (
            (tmp / "rake.jsonl").open("w", encoding="utf-8") as rake_file,
            (tmp / "keywords.jsonl").open("w", encoding="utf-8") as keyword_file,
            tqdm(total=total, desc="phrases", unit="sent", disable=None) as bar,
        ):
            for rake, keywords, counts in ordered_map(
                pool, _extract, chunks(corpus(), config.chunk_size), inflight
            ):
                rake_file.writelines(line + "\n" for line in rake)
                keyword_file.writelines(line + "\n" for line in keywords)
                stats["sentences"] += len(rake)
                stats["with_phrases"] += sum(1 for c in counts if c)
                stats["phrases"] += sum(counts)
                bar.update(len(rake))
    return stats


def write_idf(folder: Path, table: IdfTable) -> None:
    """`idf.json` in `folder`: the documents the IDF table came from and the table by word."""
    record = {"documents": table.documents, "idf": dict(sorted(table.idf.items()))}
    (folder / IDF_FILE).write_text(json.dumps(record) + "\n", encoding="utf-8")


def read_idf(folder: Path) -> IdfTable:
    """The IDF table the phrases stage fitted on the training corpus (English only)."""
    path = folder / IDF_FILE
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
        return IdfTable(dict(record["idf"]), int(record["documents"]))
    except FileNotFoundError as err:
        raise DataFormatError(
            f"{path}: not found; run the phrases stage with phrases.language: english"
        ) from err
    except (ValueError, KeyError, TypeError) as err:
        raise DataFormatError(f"{path}: not an IDF table: {err}") from err


def read_phrase_spans(path: Path) -> dict[str, list[tuple[int, int]]]:
    """Sentence -> character spans of its ranked phrases, from a `rake.jsonl` (read as every data
    file is: `sentemb.data.readers`; blank lines are skipped, an empty file is an error)."""
    if not path.is_file():
        raise DataFormatError(f"{path}: not found; run the phrases stage first")
    spans: dict[str, list[tuple[int, int]]] = {}
    for lineno, line in enumerate(iter_lines(path), start=1):
        if is_blank(line):
            continue
        try:
            sentence, phrases = json.loads(line)
            spans[sentence] = [(int(p[2]), int(p[3])) for p in phrases]
        except (ValueError, TypeError, IndexError) as err:
            raise DataFormatError(f"{path}:{lineno}: not a RAKE record: {err}") from err
    if not spans:
        raise DataFormatError(f"{path}: file is empty")
    return spans
