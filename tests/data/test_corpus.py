"""A corpus of any format read, cleaned and carded as the corpus stage does it, and its errors."""

from __future__ import annotations

import csv
import gzip
import io
import json
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sentemb.config import ConfigError, section
from sentemb.data import corpus as corpus_module
from sentemb.data.corpus import (
    Card,
    CorpusRules,
    CorpusStats,
    check_corpus_path,
    clean,
    corpus_format,
    kept_sentences,
    read_texts,
)
from sentemb.data.readers import DataFormatError
from sentemb.training.config import BUILT_IN, TrainConfig


def _txt(texts: list[str | None]) -> bytes:
    return "".join(f"{t or ''}\n" for t in texts).encode()


def _csv(texts: list[str | None]) -> bytes:
    out = io.StringIO()
    writer = csv.writer(out)  # RFC 4180: CRLF line ends, so a field with a lone CR is quoted
    writer.writerow(["id", "text"])
    writer.writerows([i, t or ""] for i, t in enumerate(texts))
    return out.getvalue().encode()


def _tsv(texts: list[str | None]) -> bytes:  # no quoting: a field holds no tab nor line break
    return "".join(f"{i}\t{t or ''}\n" for i, t in enumerate(["text", *texts])).encode()


def _jsonl(texts: list[str | None]) -> bytes:
    return "".join(json.dumps({"id": i, "text": t}) + "\n" for i, t in enumerate(texts)).encode()


def _parquet(texts: list[str | None]) -> bytes:
    out = io.BytesIO()
    pq.write_table(pa.table({"text": pa.array(texts, pa.string())}), out)
    return out.getvalue()


WRITERS: dict[str, Callable[[list[str | None]], bytes]] = {
    "corpus.txt": _txt,
    "corpus.txt.gz": lambda texts: gzip.compress(_txt(texts)),
    "corpus.csv": _csv,
    "corpus.csv.gz": lambda texts: gzip.compress(_csv(texts)),
    "corpus.tsv": _tsv,
    "corpus.jsonl": _jsonl,
    "corpus.jsonl.gz": lambda texts: gzip.compress(_jsonl(texts)),
    "corpus.parquet": _parquet,
}
# what a text may hold in each format: a line of .txt has no break, a TSV field no tab either
FIELD_TEXT = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\0"))
LINE_TEXT = st.text(
    st.characters(blacklist_categories=("Cs",), blacklist_characters="\0\r\n\t"), min_size=1
)


def write(folder: Path, name: str, texts: list[str | None]) -> Path:
    path = folder / name
    path.write_bytes(WRITERS[name](texts))
    return path


def sentences(path: Path, **rules: object) -> tuple[list[str], CorpusStats]:
    stats = CorpusStats()
    return list(kept_sentences(path, CorpusRules(**rules), stats)), stats  # type: ignore[arg-type]


@pytest.mark.parametrize("name", sorted(WRITERS))
@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(texts=st.lists(st.one_of(LINE_TEXT, st.just(" ")), min_size=1, max_size=8))
def test_every_format_keeps_the_same_sentences(tmp_path: Path, name: str, texts: list[str]) -> None:
    """One corpus, eight files: the same sentences kept, in order, and the same counts."""
    texts = [t for t in texts if "\t" not in t or not name.endswith(".tsv")]
    path = write(tmp_path, name, texts)
    expected = [clean(t) for t in texts if clean(t)]
    if not expected:
        with pytest.raises(DataFormatError, match="no usable sentence"):
            sentences(path)
        return
    kept, stats = sentences(path)
    assert kept == expected
    assert (stats.read, stats.kept, stats.dropped["blank"]) == (
        len(texts),
        len(expected),
        len(texts) - len(expected),
    )


@pytest.mark.parametrize("name", ["corpus.csv", "corpus.jsonl", "corpus.parquet"])
@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(texts=st.lists(FIELD_TEXT, min_size=1, max_size=6))
def test_a_field_is_one_line_whatever_it_holds(tmp_path: Path, name: str, texts: list[str]) -> None:
    """Line breaks inside a field become spaces: `data/corpus.txt` keeps a sentence a line."""
    path = write(tmp_path, name, texts)
    for _, text in read_texts(path):
        line = clean(text)
        assert "\n" not in line and "\r" not in line and line == line.strip()


def test_repeats_blanks_and_the_cap_are_counted_by_reason(tmp_path: Path) -> None:
    path = write(tmp_path, "corpus.txt", ["a", "b", " ", "a", "c", "b", "d"])
    kept, stats = sentences(path)
    assert kept == ["a", "b", "a", "c", "b", "d"]
    assert stats.duplicates == 2 and stats.dropped == {
        "blank": 1,
        "duplicate": 0,
        "beyond_corpus_size": 0,
    }
    kept, stats = sentences(path, drop_duplicates=True, size=3)
    assert kept == ["a", "b", "c"]
    assert (stats.read, stats.kept, stats.duplicates) == (7, 3, 2)
    assert stats.dropped == {"blank": 1, "duplicate": 2, "beyond_corpus_size": 1}


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    texts=st.lists(st.sampled_from(["a", "b", "c", "d", " ", "e f"]), max_size=40),
    spill=st.integers(1, 7),
)
def test_repeats_are_found_across_spills_and_buckets(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, texts: list[str], spill: int
) -> None:
    """The first pass spills hashes every `SPILL` texts: the kept sentences and the counts are
    those of keeping every text seen so far in memory."""
    monkeypatch.setattr(corpus_module, "SPILL", spill)
    path = write(tmp_path, "corpus.txt", ["x", *texts])
    lines = [clean(t) for t in ["x", *texts] if clean(t)]
    first = [line for n, line in enumerate(lines) if line not in lines[:n]]
    kept, stats = sentences(path, drop_duplicates=True)
    assert kept == first
    assert stats.duplicates == stats.dropped["duplicate"] == len(lines) - len(first)
    assert sentences(path)[0] == lines


def test_bom_crlf_and_cr_are_line_ends_not_text(tmp_path: Path) -> None:
    path = tmp_path / "corpus.txt"
    path.write_bytes(b"\xef\xbb\xbfone\r\ntwo\rthree\n")
    assert sentences(path)[0] == ["one", "two", "three"]
    path = tmp_path / "corpus.csv"
    path.write_bytes(b'\xef\xbb\xbftext\r\n"a\r\nb"\rc\r\n')
    assert sentences(path)[0] == ["a b", "c"]


@pytest.mark.parametrize("name", ["corpus.txt", "corpus.csv", "corpus.tsv", "corpus.jsonl"])
def test_not_utf8_is_named_at_its_line(tmp_path: Path, name: str) -> None:
    path = write(tmp_path, name, ["fine", "also fine"])
    path.write_bytes(path.read_bytes() + b'bad \xff"\n')
    with pytest.raises(DataFormatError, match=rf"{name}:\d+: not valid utf-8"):
        sentences(path)


@pytest.mark.parametrize(
    ("name", "data", "message"),
    [
        (
            "c.csv",
            b"id,body\n1,a\n",
            r"c\.csv:1: column 'text' \(train\.text_column\) is not among",
        ),
        ("c.tsv", b"id\ttext\n1\ta\n2\n", r"c\.tsv:3: 1 fields, no 'text'"),
        ("c.csv", b'text\n"a\n', r"c\.csv:\d+: not valid csv"),
        ("c.jsonl", b'{"text": "a"}\n{"body": "b"}\n', r"c\.jsonl:2: no key 'text'"),
        ("c.jsonl", b'{"text": "a"}\n{"text": 3}\n', r"c\.jsonl:2: .* holds a int, not a string"),
        ("c.jsonl", b'{"text": "a"}\n["a"]\n', r"c\.jsonl:2: a JSON list, not an object"),
        ("c.jsonl", b'{"text": "a"}\n{"text": \n', r"c\.jsonl:2: not JSON"),
        ("c.parquet", b"PAR1 not parquet", r"c\.parquet: not a Parquet file"),
        # an unquoted comma (or a tab in a TSV field) would cut the text short
        ("c.csv", b"text\nHello, world\n", r"c\.csv:2: 2 fields, the header has 1 .*quote a field"),
        ("c.tsv", b"id\ttext\n1\thello\tworld\n", r"c\.tsv:2: 3 fields, the header has 2"),
        ("c.tsv", b"text\nhello world\t\n", r"c\.tsv:2: 2 fields, .* at a line's end too"),
    ],
)
def test_a_bad_row_is_one_error_naming_file_and_line(
    tmp_path: Path, name: str, data: bytes, message: str
) -> None:
    path = tmp_path / name
    path.write_bytes(data)
    with pytest.raises(DataFormatError, match=message):
        sentences(path)


def test_a_parquet_column_must_exist_and_hold_strings(tmp_path: Path) -> None:
    path = tmp_path / "c.parquet"
    pq.write_table(pa.table({"text": ["a", "b"], "n": [1, 2]}), path)
    with pytest.raises(DataFormatError, match=r"column 'body' \(train\.text_column\) is not among"):
        sentences(path, text_column="body")
    with pytest.raises(DataFormatError, match=r"'n' \(train\.text_column\) holds a int"):
        sentences(path, text_column="n")
    assert sentences(path)[0] == ["a", "b"]


def test_fewer_sentences_than_a_batch_names_the_file_and_param(tmp_path: Path) -> None:
    path = write(tmp_path, "corpus.jsonl", ["a", "b", None, ""])
    with pytest.raises(DataFormatError, match=r"corpus\.jsonl: 2 sentences kept, .*batch_size: 3"):
        sentences(path, batch_size=3)


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("missing.txt", r"train\.corpus: missing\.txt: no such file"),
        (".", r"train\.corpus: \.: a folder, not a file"),
        ("c.json", r"train\.corpus: .*c\.json: not a known format"),
        ("c.gz", r"train\.corpus: .*c\.gz: not a known format"),
        ("c.parquet.gz", r"train\.corpus: .*c\.parquet\.gz: not a known format"),
    ],
)
def test_a_bad_corpus_path_names_the_param(tmp_path: Path, value: str, message: str) -> None:
    for name in ("c.json", "c.gz", "c.parquet.gz"):
        (tmp_path / name).write_text("a\n")
    with pytest.raises(ConfigError, match=message):
        check_corpus_path(value, tmp_path)


@pytest.mark.parametrize(
    ("name", "kind"),
    [("a.TXT", "txt"), ("a.b.csv", "csv"), ("a.tsv.gz", "tsv"), ("x/a.jsonl", "jsonl")],
)
def test_the_format_is_the_suffix(name: str, kind: str) -> None:
    assert corpus_format(Path(name)) == kind


@pytest.mark.parametrize(("value", "problem"), [*BUILT_IN.items(), ("", "a path"), (" ", "a path")])
def test_a_corpus_name_of_old_or_nothing_is_refused(value: str, problem: str) -> None:
    with pytest.raises(ConfigError, match=rf"train\.corpus: .*{problem}"):
        section({"train": {"corpus": value}}, "train", TrainConfig)


class WordTokenizer:
    """Words as tokens, `?` the unknown one, [CLS] and [SEP] added to each sentence."""

    unk_token_id = 0

    def num_special_tokens_to_add(self, pair: bool = False) -> int:
        return 2

    def __call__(self, texts: list[str], add_special_tokens: bool) -> dict[str, list[list[int]]]:
        return {"input_ids": [[0 if w == "?" else 1 for w in t.split()] for t in texts]}


def test_card_by_hand() -> None:
    """Lengths with [CLS] and [SEP]: 3, 4, 5, 6, 12 tokens. Nearest rank: p50 is the 3rd of 5
    (5), p90, p95 and p99 the 5th (12). Over max_length 5: 6 and 12, 2 of 5. Unknown: 2 of
    1+2+3+4+10 = 20 tokens."""
    card = Card(WordTokenizer(), 5, {"b b"}.__contains__, batch=2)
    for sentence in ["a", "b b", "? c c", "d d d d", "? e e e e e e e e e"]:
        card.add(sentence)
    assert card.numbers() == {
        "tokens": {
            "p50": 5,
            "p90": 12,
            "p95": 12,
            "p99": 12,
            "max": 12,
            "cut_share": 0.4,
            "unknown_rate": 0.1,
        },
        "test_overlap": {"sentences": 1, "sample": ["b b"]},
    }


@pytest.mark.parametrize(
    ("name", "data", "message"),
    [
        ("c.jsonl", b'{"text": "a\\u0000b"}\n', r"c\.jsonl:1: NUL character in column 'text'"),
        (
            "c.jsonl",
            b'{"text": "a\\ud800b"}\n',
            r"c\.jsonl:1: column 'text' \(train\.text_column\) is not Unicode text",
        ),
        ("c.jsonl", b"[" * 100_000 + b"\n", r"c\.jsonl:1: not JSON"),
        ("c.csv", b"text,text\na,b\n", r"c\.csv:1: column 'text' .* is twice among"),
        (
            "c.txt.GZ",
            b"a\n",
            r"train\.corpus: .*c\.txt\.GZ: not a known format",
        ),
    ],
)
def test_a_text_no_text_file_may_hold_is_refused_where_it_is(
    tmp_path: Path, name: str, data: bytes, message: str
) -> None:
    """What `data/corpus.txt` could not hold, or would hold wrongly, is refused naming the
    user's file, not a later stage's."""
    path = tmp_path / name
    path.write_bytes(data)
    with pytest.raises((DataFormatError, ConfigError), match=message):
        check_corpus_path(name, tmp_path)
        sentences(path)


def test_parquet_nul_repeated_column_and_damage_are_named(tmp_path: Path) -> None:
    path = tmp_path / "c.parquet"
    pq.write_table(pa.table({"text": ["a", "b\0c"]}), path)
    with pytest.raises(DataFormatError, match=r"c\.parquet: row 2: NUL character"):
        sentences(path)
    table = pa.Table.from_arrays([pa.array(["a"]), pa.array(["b"])], names=["text", "text"])
    pq.write_table(table, path)
    with pytest.raises(DataFormatError, match=r"column 'text' \(train\.text_column\) is twice"):
        sentences(path)
    pq.write_table(pa.table({"text": [f"sentence {i}" for i in range(5000)]}), path)
    data = bytearray(path.read_bytes())
    data[100:4000] = bytes(3900)  # the first data page zeroed; footer intact
    path.write_bytes(bytes(data))
    with pytest.raises(DataFormatError, match=r"c\.parquet: rows from 1: damaged"):
        sentences(path)


@pytest.mark.parametrize("change", ["a\nb\n", "a\nB\nc\n", "a\nb\nc\nd\n"])
def test_a_file_changed_between_the_passes_is_refused(
    tmp_path: Path, change: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Shorter, as long but other, or longer when the second pass reads it."""
    path = write(tmp_path, "corpus.txt", ["a", "b", "c"])
    first_pass = corpus_module.repeats

    def then_changed(*args: object) -> object:
        found = first_pass(*args)
        path.write_text(change)
        return found

    monkeypatch.setattr(corpus_module, "repeats", then_changed)
    with pytest.raises(DataFormatError, match=r"corpus\.txt: it changed while it was read"):
        sentences(path)


def test_a_long_csv_field_and_a_header_over_two_lines(tmp_path: Path) -> None:
    path = tmp_path / "c.csv"
    long = "word " * 40_000  # 200,000 characters: past csv's default field limit
    path.write_text(f'"te\nxt",id\n"{long}",1\n"a",\n')
    with pytest.raises(DataFormatError, match=r"c\.csv:1: column 'text'"):
        sentences(path)  # the header's column is "te\nxt"
    path.write_text(f'text,"i\nd"\n"{long}",1\n,2\n3\n')
    with pytest.raises(DataFormatError, match=r"c\.csv:5: 1 fields|c\.csv:5: .*"):
        sentences(path, text_column="i\nd")
    assert sentences(path)[0] == [long.strip(), "3"]


def test_a_tilde_is_no_home_folder(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"train\.corpus: ~/corpus\.txt: no such file"):
        check_corpus_path("~/corpus.txt", tmp_path)


def test_the_tfidf_baseline_fits_its_english_idf_on_the_corpus_file(tmp_path: Path) -> None:
    from sentemb.evaluation.encoders import load_encoder

    corpus = write(tmp_path, "corpus.txt", ["a b", "b c"])
    assert load_encoder("tfidf", "en", {}, corpus).fitted
    assert not load_encoder("tfidf", "zh", {}, corpus).fitted  # Chinese: what it encodes
    assert not load_encoder("tfidf", "en", {}).fitted
    with pytest.raises(DataFormatError, match=r"none\.txt: file not found"):
        load_encoder("tfidf", "en", {}, tmp_path / "none.txt")
