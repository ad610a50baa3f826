"""RAKE phrases and TF-IDF keywords: a fixed sentence by hand, spans, streaming output."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from sentemb import phrases
from sentemb.config import ConfigError
from sentemb.phrases import (
    Extractor,
    PhrasesConfig,
    extract,
    nltk_stopwords,
    phrase_span,
    read_idf,
    read_phrase_spans,
)

SENTENCE = "At least 89 dead in China earthquakes, officials said on Monday."


def test_rake_on_a_fixed_sentence() -> None:
    # candidates split at stopwords/punctuation: "least 89 dead" (3 words, each deg 3, freq 1:
    # 3 + 3 + 3 = 9), "china earthquakes" and "officials said" (2 + 2 = 4), "monday" (1)
    phrases = Extractor(PhrasesConfig(), idf=None).phrases(SENTENCE)
    assert phrases == [
        ["least 89 dead", 9.0, 3, 16],
        ["china earthquakes", 4.0, 20, 37],
        ["officials said", 4.0, 39, 53],
        ["monday", 1.0, 57, 63],
    ]
    assert [SENTENCE[a:b].lower() for _, _, a, b in phrases] == [p[0] for p in phrases]


def test_phrase_length_and_count_params() -> None:
    config = PhrasesConfig(top_k=2, min_length=2, max_length=2)
    assert [p[0] for p in Extractor(config, idf=None).phrases(SENTENCE)] == [
        "china earthquakes",
        "officials said",
    ]


@pytest.mark.parametrize("param", ["phrases.language", "paser.language"])
@pytest.mark.parametrize(
    "language", ["../x", "../stopwords/english", "README", "", "English", "english ", "klingon"]
)
def test_a_stopword_list_is_one_of_nltk_s_names_never_a_path(param: str, language: str) -> None:
    """A name NLTK has no list for (a path out of its folder, its README, a typo) is one error
    naming the param; before, `../x` was read as a file beside the lists."""
    with pytest.raises(ConfigError, match=rf"^{param}: .* not one of NLTK's stopword lists"):
        nltk_stopwords(language, param)
    assert "the" in nltk_stopwords("english", param)


def test_phrase_span_is_case_insensitive_and_whole_words() -> None:
    assert phrase_span("The Art of starting", "art", chinese=False) == (4, 7)
    assert phrase_span("Restart it", "art", chinese=False) is None
    assert phrase_span("New  York city", "new york", chinese=False) == (0, 9)
    assert phrase_span("我想申请信用卡", "申请 信用卡", chinese=True) == (2, 7)


def test_extract_streams_aligned_files_with_corpus_idf(tmp_path: Path) -> None:
    sentences = ["the cat sat on the mat", "a dog sat", "the cat ran home"]
    config = PhrasesConfig(workers=2, chunk_size=2, keywords=2)
    stats = extract(lambda: iter(sentences), len(sentences), config, tmp_path / "out")
    rake = [json.loads(line) for line in (tmp_path / "out/rake.jsonl").read_text().splitlines()]
    keywords = (tmp_path / "out/keywords.jsonl").read_text().splitlines()
    assert [r[0] for r in rake] == sentences and len(keywords) == 3
    assert stats == {"sentences": 3, "with_phrases": 3, "phrases": sum(len(r[1]) for r in rake)}
    # smooth IDF over n = 3 sentences: idf(w) = ln(4 / (1 + df)) + 1; stopwords dropped
    idf = {"cat": math.log(4 / 3) + 1, "mat": math.log(2) + 1, "sat": math.log(4 / 3) + 1}
    first = json.loads(keywords[0])
    assert first[0] == ["mat", pytest.approx(idf["mat"], abs=1e-4)]
    assert first[1] == ["cat", pytest.approx(idf["cat"], abs=1e-4)]
    table = read_idf(tmp_path / "out")  # the same table, kept for RepAL's keywords
    assert table["mat"] == pytest.approx(idf["mat"])
    assert table["the"] == pytest.approx(math.log(4 / 3) + 1)
    assert table.documents == 3 and table["unseen"] == pytest.approx(math.log(4) + 1)
    spans = read_phrase_spans(tmp_path / "out/rake.jsonl")
    assert spans["a dog sat"] == [(2, 9)]  # "a" is a stopword


@pytest.mark.parametrize(("asked", "used"), [(0, 2), (1, 1), (1000, 2)])
def test_workers_are_at_most_the_cores(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, asked: int, used: int
) -> None:
    """`phrases.workers: 1000` on 2 cores starts 2 processes, not 1000 (a helper's probe)."""
    started = []
    real = phrases.ProcessPoolExecutor

    def pool(workers: int, **kwargs: object) -> object:
        started.append(workers)
        return real(workers, **kwargs)

    monkeypatch.setattr(phrases, "cpu_count", lambda: 2)
    monkeypatch.setattr(phrases, "ProcessPoolExecutor", pool)
    extract(lambda: iter(["a cat sat"]), 1, PhrasesConfig(workers=asked), tmp_path / "out")
    assert started and set(started) == {used}


def test_jieba_loads_without_its_debug_lines() -> None:
    """jieba logs its dictionary loading at DEBUG through its own handler and the stage's: twice
    in a log file. A fresh process, since jieba loads its dictionary once."""
    code = (
        "import logging; logging.basicConfig(level=logging.DEBUG); "
        "from sentemb.tfidf import jieba_words; print(jieba_words('我想申请信用卡'))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    assert "信用卡" in result.stdout and "jieba" not in result.stderr


def test_chinese_uses_jieba_for_words_and_keywords() -> None:
    sentence = "我想知道如何申请信用卡的额度提升"
    extractor = Extractor(PhrasesConfig(language="chinese"), idf=None)
    phrases = extractor.phrases(sentence)
    assert phrases and all(sentence[a:b] == p.replace(" ", "") for p, _, a, b in phrases)
    assert [w for w, _ in extractor.keywords(sentence)][:2] == ["信用卡", "额度"]
