"""Readers on the real mirror files (row counts from ../shared/datasets/README.md) and bad input."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest

from sentemb.data import queries, readers
from sentemb.data.sources import SENTEVAL_DIR, STS_SUBSETS

STS_PAIRS = {"STS12": 3108, "STS13": 1500, "STS14": 3750, "STS15": 3000, "STS16": 1186}


@pytest.mark.parametrize(("year", "pairs"), STS_PAIRS.items())
def test_sts_years_skip_empty_gold_lines(mirror: Path, year: str, pairs: int) -> None:
    subsets = readers.read_sts_year(mirror, year)
    assert list(subsets) == list(STS_SUBSETS[year])
    assert sum(len(p) for p in subsets.values()) == pairs


def test_stsb_and_sick_counts(mirror: Path) -> None:
    assert [len(readers.read_stsb(mirror, s)) for s in ("train", "dev", "test")] == [
        5749,
        1500,
        1379,
    ]
    sick = [len(readers.read_sick(mirror, s)) for s in ("train", "trial", "test_annotated")]
    assert sick == [4500, 500, 4927]


def test_stsb_keeps_quote_characters_inside_sentences(mirror: Path) -> None:
    test = readers.read_stsb(mirror, "test")
    quoted = [s for s in test.first + test.second if '"' in s]
    assert quoted, "STS-B test has sentences with quotes; a CSV reader would merge lines"
    assert len(test) == 1379


@pytest.mark.parametrize(
    ("task", "positives", "negatives"),
    [("MR", 5331, 5331), ("CR", 2407, 1368), ("SUBJ", 5000, 5000), ("MPQA", 3312, 7294)],
)
def test_binary_transfer_counts(mirror: Path, task: str, positives: int, negatives: int) -> None:
    data = readers.read_binary(mirror, task)
    assert sum(data.labels) == positives
    assert len(data) - sum(data.labels) == negatives


def test_mr_is_latin1_and_0x85_is_not_a_line_break(mirror: Path) -> None:
    raw = (mirror / SENTEVAL_DIR / "MR" / "rt-polarity.pos").read_bytes()
    assert b"\x85" in raw
    data = readers.read_binary(mirror, "MR")
    assert any("\x85" in s for s in data.sentences)


def test_sst_trec_mrpc_counts(mirror: Path) -> None:
    assert [len(readers.read_sst2(mirror, s)) for s in ("train", "dev", "test")] == [
        6920,
        872,
        1821,
    ]
    assert [len(readers.read_trec(mirror, s)) for s in ("train", "test")] == [5452, 500]
    assert [len(readers.read_mrpc(mirror, s)[0]) for s in ("train", "test")] == [4076, 1725]
    assert sorted(set(readers.read_trec(mirror, "test").labels)) == list(range(6))


@pytest.mark.parametrize(
    ("name", "rows"),
    [("ATEC", 20000), ("BQ", 10000), ("LCQMC", 12500), ("PAWSX", 2000), ("STS-B", 1361)],
)
def test_chinese_test_counts(mirror: Path, name: str, rows: int) -> None:
    pairs = readers.read_chinese(mirror, name, "test")
    assert len(pairs) == rows
    assert any("\u4e00" <= ch <= "\u9fff" for ch in pairs.first[0])
    if name != "STS-B":
        assert set(pairs.scores) <= {0.0, 1.0}


def test_corpus_head(mirror: Path) -> None:
    # `wc -l` says 11,914: the last of the 11,915 sentences has no trailing newline.
    sentences = list(readers.read_corpus(mirror / "corpus" / "wiki1m_for_simcse.head.txt"))
    assert len(sentences) == 11915
    assert (
        len(list(readers.read_corpus(mirror / "corpus" / "wiki1m_for_simcse.head.txt", 100))) == 100
    )


def _write(root: Path, rel: str, text: str | bytes) -> Path:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text, encoding="utf-8")
    return path


STSB_TEST = f"{SENTEVAL_DIR}/STS/STSBenchmark/sts-test.csv"


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("", "file is empty"),
        ("g\tf\t2012\t1\t2.5\tonly one sentence\n", "expected at least 7 tab-separated columns"),
        ("g\tf\t2012\t1\tfive\ta\tb\n", "score 'five' is not a number"),
        ("g\tf\t2012\t1\tnan\ta\tb\n", r"outside \[0.0, 5.0\]"),
        (b"g\tf\t2012\t1\t2.0\t\xff\tb\n", "not valid utf-8"),
    ],
)
def test_bad_stsb_lines_name_file_and_line(tmp_path: Path, content: str, message: str) -> None:
    path = _write(tmp_path, STSB_TEST, content)
    with pytest.raises(readers.DataFormatError, match=message) as err:
        readers.read_stsb(tmp_path, "test")
    assert str(path) in str(err.value)
    if content:
        assert f"{path}:1:" in str(err.value)


def test_missing_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(readers.DataFormatError, match="file not found") as err:
        readers.read_sick(tmp_path, "test_annotated")
    assert "SICK_test_annotated.txt" in str(err.value)


def test_sts_gold_and_input_line_counts_must_agree(tmp_path: Path) -> None:
    folder = f"{SENTEVAL_DIR}/STS/STS13-en-test"
    _write(tmp_path, f"{folder}/STS.input.FNWN.txt", "a\tb\nc\td\n")
    _write(tmp_path, f"{folder}/STS.gs.FNWN.txt", "1.0\n")
    with pytest.raises(readers.DataFormatError, match="1 lines but"):
        readers.read_sts_subset(tmp_path, "STS13", "FNWN")


def test_sts_empty_gold_line_skips_pair(tmp_path: Path) -> None:
    folder = f"{SENTEVAL_DIR}/STS/STS13-en-test"
    _write(tmp_path, f"{folder}/STS.input.FNWN.txt", "a\tb\nc\td\ne\tf\n")
    _write(tmp_path, f"{folder}/STS.gs.FNWN.txt", "1.0\n\n4.5\n")
    pairs = readers.read_sts_subset(tmp_path, "STS13", "FNWN")
    assert pairs.first == ["a", "e"] and pairs.scores == [1.0, 4.5]


def test_sick_requires_header(tmp_path: Path) -> None:
    _write(tmp_path, f"{SENTEVAL_DIR}/SICK/SICK_trial.txt", "1\ta\tb\t3.0\tNEUTRAL\n")
    with pytest.raises(readers.DataFormatError, match=":1: expected the header row"):
        readers.read_sick(tmp_path, "trial")


def test_chinese_max_pairs_is_one_fixed_sample_in_file_order(mirror: Path) -> None:
    full = readers.read_chinese(mirror, "BQ", "test")
    sample = readers.read_chinese(mirror, "BQ", "test", 100)
    assert len(sample) == 100 and sample == readers.read_chinese(mirror, "BQ", "test", 100)
    rows = iter(zip(full.first, full.second, full.scores, strict=True))
    kept = list(zip(sample.first, sample.second, sample.scores, strict=True))
    assert all(row in rows for row in kept)  # a subsequence: the file's order
    assert sample.first != full.first[:100]  # a sample, not the head
    assert readers.read_chinese(mirror, "PAWSX", "test", 10**6) == readers.read_chinese(
        mirror, "PAWSX", "test"
    )


def test_chinese_wrong_column_count(tmp_path: Path) -> None:
    _write(tmp_path, "senteval_cn/BQ/BQ.test.data", "一\t二\t1\n三\t四\n")
    with pytest.raises(readers.DataFormatError, match=r"BQ\.test\.data:2: expected 3"):
        readers.read_chinese(tmp_path, "BQ", "test")


def test_sts_training_corpus_is_every_sts_sentence_once(mirror: Path) -> None:
    sentences = readers.sts_sentences(mirror)
    assert len(sentences) == len(set(sentences)) == 29469
    sick = readers.read_sick(mirror, "test_annotated")
    stsb = readers.read_stsb(mirror, "train")
    assert {*sick.first, *stsb.second} <= set(sentences)


def test_corpus_bad_byte_is_named_at_its_line_past_the_first_block(tmp_path: Path) -> None:
    """A text-mode reader decodes 8 KiB blocks, so it would blame a line of the first block."""
    path = _write(tmp_path, "corpus/train.txt", b"a good line\n" * 1000 + b"bad \xff line\n")
    with pytest.raises(readers.DataFormatError, match="not valid utf-8") as err:
        list(readers.read_corpus(path))
    assert str(err.value).startswith(f"{path}:1001: ")


def test_corpus_lines_are_those_of_read_lines(tmp_path: Path) -> None:
    """BOM dropped; \\n, \\r\\n and a lone \\r each end a line; NEL and U+2028 do not."""
    path = _write(
        tmp_path,
        "corpus/train.txt",
        "\ufeffFirst.\nSecond\rpart.\r\n\n third \r\nfour\x85th\u2028line\n".encode(),
    )
    expected = [line.strip() for line in readers.read_lines(path) if line.strip()]
    assert expected == ["First.", "Second", "part.", "third", "four\x85th\u2028line"]
    assert list(readers.read_corpus(path)) == expected


# The three examples of issue 33; their classes are covered in test_readers_fuzz.py.


@pytest.mark.parametrize(
    ("files", "read", "where"),
    [
        (
            {"senteval_cn/STS-B/STS-B.test.data": "一个\t两个\t1\n   \t   \t4.4\n"},
            lambda root: readers.read_chinese(root, "STS-B", "test"),
            "senteval_cn/STS-B/STS-B.test.data:2: sentence 1 is blank",
        ),
        (
            {
                f"{SENTEVAL_DIR}/STS/STS13-en-test/STS.input.FNWN.txt": "a\tb\n \u200b\t\u2060\n",
                f"{SENTEVAL_DIR}/STS/STS13-en-test/STS.gs.FNWN.txt": "1.0\n4.4\n",
            },
            lambda root: readers.read_sts_subset(root, "STS13", "FNWN"),
            "STS.input.FNWN.txt:2: sentence 1 of a scored pair is blank",
        ),
    ],
)
def test_blank_sentence_with_a_gold_score_is_an_error(
    tmp_path: Path, files: dict[str, str], read, where: str
) -> None:
    for rel, text in files.items():
        _write(tmp_path, rel, text)
    with pytest.raises(readers.DataFormatError) as err:
        read(tmp_path)
    assert str(err.value).endswith(where)


def test_utf8_bom_is_dropped_from_a_latin1_file(tmp_path: Path) -> None:
    _write(tmp_path, f"{SENTEVAL_DIR}/MR/rt-polarity.pos", b"\xef\xbb\xbfa fine film\n")
    _write(tmp_path, f"{SENTEVAL_DIR}/MR/rt-polarity.neg", b"\xef\xbb\xbfa dull\x85 film\n")
    assert readers.read_binary(tmp_path, "MR").sentences == ["a fine film", "a dull\x85 film"]


def test_zero_width_only_lines_are_not_corpus_sentences(tmp_path: Path) -> None:
    text = "\u200b\n\u200c\u200d\nA\u200bsentence.\n\ufeff \u2060\n\u00ad\u3000\n"
    path = _write(tmp_path, "corpus/train.txt", text)
    assert list(readers.read_corpus(path)) == ["A\u200bsentence."]
    blank = _write(tmp_path, "corpus/blank.txt", "\u200b\n \u2060 \n")
    with pytest.raises(readers.DataFormatError, match=r"blank\.txt: file is empty"):
        list(readers.read_corpus(blank))


def test_utf16_without_a_bom_is_a_nul_error(tmp_path: Path) -> None:
    path = _write(tmp_path, "corpus/train.txt", "A sentence.\n".encode("utf-16-le"))
    with pytest.raises(readers.DataFormatError) as err:
        list(readers.read_corpus(path))
    assert str(err.value) == f"{path}:1: NUL character in a text file"


def test_the_mirror_keeps_its_zero_width_characters(mirror: Path) -> None:
    """The real files hold format characters inside sentences (BQ: U+200D, ATEC and LCQMC: a
    U+FEFF starting a sentence, the wiki corpus: U+200C, U+2060): kept as they are."""
    assert sum(s.count("\u200d") for s in readers.read_chinese(mirror, "BQ", "test").first) > 0
    atec = readers.read_chinese(mirror, "ATEC", "test")
    assert sum(s.startswith("\ufeff") for s in atec.first) == 2
    corpus = list(readers.read_corpus(mirror / "corpus" / "wiki1m_for_simcse.head.txt"))
    assert sum("\u200c" in s for s in corpus) == 1 and sum("\u2060" in s for s in corpus) == 2


def _askubuntu(root: Path, titles: bytes) -> None:
    _write(root, "askubuntu/text_tokenized.txt.gz", gzip.compress(titles))
    _write(root, "askubuntu/test.txt", "1\t2\t1 2\t0 0\n")


def test_askubuntu_blank_title_is_no_title(tmp_path: Path) -> None:
    _askubuntu(tmp_path, "1\ta title\tbody\n2\t\u200b \tbody\n3\t \n2\tlater\n".encode())
    assert queries.read_askubuntu(tmp_path).titles == {"1": "a title", "2": "later"}
    _askubuntu(tmp_path, "1\ta title\n2\t\u200b \tbody\n".encode())
    with pytest.raises(readers.DataFormatError, match=r"test\.txt:1: question id '2' has no title"):
        queries.read_askubuntu(tmp_path)


@pytest.mark.parametrize(
    "damage",
    [
        lambda data: data[: len(data) // 2],  # cut short: EOFError inside gzip
        lambda data: data[:20] + bytes(len(data) - 20),  # its deflate stream zeroed: zlib.error
        lambda data: b"plain text, not gzip\n",  # BadGzipFile, an OSError
    ],
)
def test_damaged_gzip_is_one_error_naming_the_file(tmp_path: Path, damage) -> None:
    path = tmp_path / "corpus.txt.gz"
    path.write_bytes(damage(gzip.compress(b"".join(b"line %d\n" % i for i in range(2000)))))
    with pytest.raises(readers.DataFormatError, match=rf"^{path}: not gzip, or its data"):
        list(readers.iter_lines(path))
