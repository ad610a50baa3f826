"""Every loader fed malformed input: lines from `hypothesis`, a missing file, an empty file, and
each class of the readers' text policy (`sentemb.data.readers`' docstring): line endings, BOMs,
NUL, zero-width and other format characters, blank lines and blank fields.

A loader either reads what it is given or raises one `DataFormatError` that names the file (and
the line, where a line is to blame); nothing else escapes.
"""

from __future__ import annotations

import codecs
import dataclasses
import gzip
import re
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sentemb.data import queries, readers
from sentemb.data.corpus import CorpusRules, CorpusStats, kept_sentences
from sentemb.data.sources import SENTEVAL_DIR
from sentemb.phrases import read_phrase_spans

STS12 = f"{SENTEVAL_DIR}/STS/STS12-en-test"
STS12_INPUT, STS12_GOLD = f"{STS12}/STS.input.MSRpar.txt", f"{STS12}/STS.gs.MSRpar.txt"
WIKI = "corpus/wiki1m_for_simcse.txt"


@dataclass(frozen=True)
class Loader:
    """The file a loader reads (fuzzed) in its encoding, a valid first line, the call, and valid
    companion files (a function of the fuzzed file's bytes, as the STS gold file must match its
    line count; a `.gz` file is written compressed).

    `row` is a valid data line with ``{s}`` for its sentence and ``{y}`` for its other field (a
    score, label or ids; valid value `y`). `blank` says, for a blank "line", "s" or "y", what the
    policy does: "skip", "error" (naming the file and line) or "example" (the example "").
    """

    path: str
    first: str
    load: Callable[[Path], object]
    row: str
    blank: dict[str, str]
    y: str = ""
    encoding: str = "utf-8"
    missing: str = "file not found"
    empty: str = "file is empty"  # what a file of blank lines is
    companions: Callable[[bytes], dict[str, bytes]] = field(default=lambda data: {})

    def line(self, s: str = "A man.", y: str | None = None) -> str:
        return self.row.format(s=s, y=self.y if y is None else y)


def line_count(data: bytes) -> int:
    """The lines of `data` under the policy: ``\\n``, ``\\r\\n`` and a lone ``\\r`` each end one."""
    pieces = re.split(rb"\r\n|\r|\n", data)
    return len(pieces) - (pieces[-1] == b"")


def sts_gold(data: bytes) -> dict[str, bytes]:
    return {STS12_GOLD: b"4.0\n" * line_count(data)}


def sts_inputs(data: bytes) -> dict[str, bytes]:
    return {STS12_INPUT: b"A man.\tA man.\n" * line_count(data)}


def cleaned(root: Path) -> list[str]:
    return list(kept_sentences(root / WIKI, CorpusRules(size=100), CorpusStats()))


ASKUBUNTU_TITLES = {"askubuntu/text_tokenized.txt.gz": b"1\ta title\n2\tanother\n"}
STSB_ROW = "main-captions\tMSRvid\t2012test\t0001\t{y}\t{s}\tA man."
SKIPPED = {"line": "skip"}

LOADERS: dict[str, Loader] = {
    "sts12": Loader(
        STS12_INPUT,
        "A man.\tA man.",
        lambda root: readers.read_sts_subset(root, "STS12", "MSRpar"),
        "{s}\tA man.",
        {"line": "error", "s": "error"},
        companions=sts_gold,
    ),
    "sts12-gold": Loader(
        STS12_GOLD,
        "4.0",
        lambda root: readers.read_sts_subset(root, "STS12", "MSRpar"),
        "{y}",
        {"line": "skip", "y": "skip"},
        y="4.0",
        companions=sts_inputs,
    ),
    "stsb": Loader(
        f"{SENTEVAL_DIR}/STS/STSBenchmark/sts-test.csv",
        STSB_ROW.format(s="A man.", y="5.000"),
        lambda root: readers.read_stsb(root, "test"),
        STSB_ROW,
        {"line": "skip", "s": "error", "y": "error"},
        y="5.000",
    ),
    "sick": Loader(
        f"{SENTEVAL_DIR}/SICK/SICK_trial.txt",
        "pair_ID\tsentence_A\tsentence_B\trelatedness_score\tentailment_judgment",
        lambda root: readers.read_sick(root, "trial"),
        "1\t{s}\tA man.\t{y}\tNEUTRAL",
        {"line": "skip", "s": "error", "y": "error"},
        y="3.0",
    ),
    "mr": Loader(
        f"{SENTEVAL_DIR}/MR/rt-polarity.pos",
        "a fine film",
        lambda root: readers.read_binary(root, "MR"),
        "{s}",
        {"line": "example"},
        encoding="latin-1",
        companions=lambda data: {f"{SENTEVAL_DIR}/MR/rt-polarity.neg": b"a dull film\n"},
    ),
    "sst2": Loader(
        f"{SENTEVAL_DIR}/SST/binary/sentiment-test",
        "a fine film\t1",
        lambda root: readers.read_sst2(root, "test"),
        "{s}\t{y}",
        {"line": "skip", "s": "error", "y": "error"},
        y="1",
    ),
    "trec": Loader(
        f"{SENTEVAL_DIR}/TREC/TREC_10.label",
        "NUM:date When was it ?",
        lambda root: readers.read_trec(root, "test"),
        "{y} {s}",
        {"line": "skip", "s": "error", "y": "error"},
        y="HUM:ind",
        encoding="latin-1",
    ),
    "mrpc": Loader(
        f"{SENTEVAL_DIR}/MRPC/msr_paraphrase_test.txt",
        "Quality\t#1 ID\t#2 ID\t#1 String\t#2 String",
        lambda root: readers.read_mrpc(root, "test"),
        "{y}\t1\t2\t{s}\tA man.",
        {"line": "skip", "s": "error", "y": "error"},
        y="1",
    ),
    "chinese": Loader(
        "senteval_cn/BQ/BQ.test.data",
        "一个\t两个\t1",
        lambda root: readers.read_chinese(root, "BQ", "test"),
        "{s}\t两个\t{y}",
        {"line": "skip", "s": "error", "y": "error"},
        y="1",
    ),
    "qqp": Loader(
        "qqp/dev.tsv",
        "id\tqid1\tqid2\tquestion1\tquestion2\tis_duplicate",
        lambda root: queries.read_qqp(root, ["dev"]),
        "1\t1\t2\t{s}\tA woman?\t{y}",
        {"line": "skip", "s": "skip", "y": "error"},
        y="0",
    ),
    "askubuntu": Loader(
        "askubuntu/test.txt",
        "1\t2\t1 2\t0 0",
        lambda root: queries.read_askubuntu(root, "test"),
        "2\t\t{y}\t0 0",
        {"line": "skip", "y": "error"},
        y="1 2",
        companions=lambda data: ASKUBUNTU_TITLES,
    ),
    "corpus": Loader(
        "corpus/train.txt",
        "A sentence.",
        lambda root: list(readers.read_corpus(root / "corpus/train.txt")),
        "{s}",
        SKIPPED,
    ),
    "corpus-stage": Loader(
        WIKI,
        "A sentence.",
        cleaned,
        "{s}",
        SKIPPED,
        empty="no usable sentence (2 texts read, every one blank)",
    ),
    "rake": Loader(
        "phrases/rake.jsonl",
        '["a dog sat", [["dog sat", 4.0, 2, 9]]]',
        lambda root: read_phrase_spans(root / "phrases/rake.jsonl"),
        '["A man.", []]',  # no {s}: a JSON string may not hold every character raw
        SKIPPED,
        missing="not found; run the phrases stage first",
    ),
}

ALPHABET = st.sampled_from([*"ab 1.5-\t\r,\"'é一", "nan", "inf", "NUM:x", "0", "1", "\x85"])
LINES = st.lists(ALPHABET, max_size=12).map("".join)
ENDINGS = [b"\n", b"\r\n", b"\r"]
WIDE_BOMS = ["utf-16-le", "utf-16-be", "utf-32-le", "utf-32-be"]


def invisible(encoding: str, tabs: bool = False) -> st.SearchStrategy[str]:
    """Characters that are no content: whitespace that breaks no line (a tab only where it cannot
    split a field) and format characters (Unicode Cf: zero-width ones, U+FEFF, soft hyphen...)."""
    limit = 0xFF if encoding == "latin-1" else 0x10FFFF
    spaces = "\x0b\x0c\x1c\x1d\x1e\x1f\x85" + ("\t" if tabs else "")
    chars = st.characters(categories=["Zs", "Zl", "Zp", "Cf"], max_codepoint=limit)
    return chars | st.sampled_from(spaces)


def encode(loader: Loader, lines: list[str]) -> dict[str, bytes]:
    """The fuzzed file holding `lines` (each ended by ``\\n``), with its companions."""
    data = "".join(line + "\n" for line in lines).encode(loader.encoding)
    return {loader.path: data, **loader.companions(data)}


def load(name: str, files: dict[str, bytes]) -> tuple[object, str | None]:
    """Load `files` (written under a temporary root shown as ROOT in the message): the records,
    or None and the error."""
    with tempfile.TemporaryDirectory() as folder:
        for rel, data in files.items():
            (Path(folder) / rel).parent.mkdir(parents=True, exist_ok=True)
            (Path(folder) / rel).write_bytes(gzip.compress(data) if rel.endswith(".gz") else data)
        try:
            return LOADERS[name].load(Path(folder)), None
        except readers.DataFormatError as err:
            return None, str(err).replace(folder, "ROOT")


def texts(records: object) -> set[str]:
    """Every string inside `records` (sentences, titles, ids)."""
    if isinstance(records, str):
        return {records}
    if dataclasses.is_dataclass(records):
        records = [getattr(records, f.name) for f in dataclasses.fields(records)]
    if isinstance(records, dict):
        records = [*records, *records.values()]
    if isinstance(records, list | tuple):
        return set().union(*map(texts, records))
    return set()


@pytest.mark.parametrize("name", sorted(LOADERS))
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(line=LINES, raw=st.binary(max_size=8))
def test_malformed_line_is_read_or_one_named_error(name: str, line: str, raw: bytes) -> None:
    loader = LOADERS[name]
    data = f"{loader.first}\n{line}\n".encode() + raw
    _, error = load(name, {loader.path: data, **loader.companions(data)})
    if error is not None:  # the first line is valid, so a line of this file is to blame
        assert re.match(rf"ROOT/{re.escape(loader.path)}:\d+: ", error), error


@pytest.mark.parametrize("name", sorted(LOADERS))
@pytest.mark.parametrize("data", [None, b"\n \n"])
def test_missing_or_empty_file_is_named(name: str, data: bytes | None) -> None:
    loader = LOADERS[name]
    companions = loader.companions(f"{loader.first}\n".encode())
    files = companions if data is None else {loader.path: data, **companions}
    message = loader.missing if data is None else loader.empty
    assert load(name, files) == (None, f"ROOT/{loader.path}: {message}")


@pytest.mark.parametrize("name", sorted(LOADERS))
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    endings=st.lists(st.sampled_from(ENDINGS), min_size=1, max_size=4),
    final=st.booleans(),
    bom=st.sampled_from([b"", codecs.BOM_UTF8]),
)
def test_same_records_under_every_line_ending_and_bom(
    name: str, endings: list[bytes], final: bool, bom: bytes
) -> None:
    """Each file (companions too) with line i ended by `endings[i % len]`, the last one by
    nothing unless `final`, after a UTF-8 BOM or none: the records of the plain file."""
    loader = LOADERS[name]
    plain = encode(loader, [loader.first, loader.line(), loader.line("A woman.")])
    expected = load(name, plain)
    assert expected[1] is None, expected

    def convention(data: bytes) -> bytes:
        lines = data.removesuffix(b"\n").split(b"\n")
        ends = [endings[i % len(endings)] for i in range(len(lines) - 1)]
        ends.append(endings[(len(lines) - 1) % len(endings)] if final else b"")
        return bom + b"".join(line + end for line, end in zip(lines, ends, strict=True))

    assert load(name, {rel: convention(data) for rel, data in plain.items()}) == expected


BLANK_CASES = [(n, where) for n, loader in sorted(LOADERS.items()) for where in loader.blank]
WITH_SENTENCE = [n for n, loader in sorted(LOADERS.items()) if "{s}" in loader.row]


@pytest.mark.parametrize(("name", "where"), BLANK_CASES)
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_blank_line_or_field_does_what_the_policy_says(name: str, where: str, data) -> None:
    """Line 2 blank, or its sentence ("s") or other field ("y") blank: only whitespace and format
    characters, or nothing. "skip": the records without line 2; "example": those with the
    example ""; "error": one error naming the file and line 2."""
    loader = LOADERS[name]
    blank = data.draw(st.text(invisible(loader.encoding, tabs=where == "line"), max_size=5))
    line = blank if where == "line" else loader.line(**{where: blank})
    records, error = load(name, encode(loader, [loader.first, line, loader.line("A woman.")]))
    without = load(name, encode(loader, [loader.first, loader.line("A woman.")]))
    outcome = loader.blank[where]
    if outcome == "error":
        assert error is not None and error.startswith(f"ROOT/{loader.path}:2: "), error
    elif outcome == "skip":
        assert (records, error) == without
    else:
        example = load(name, encode(loader, [loader.first, "", loader.line("A woman.")]))
        assert (records, error) == example != without


@pytest.mark.parametrize("name", WITH_SENTENCE)
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_invisible_characters_inside_a_field_are_kept(name: str, data) -> None:
    """Zero-width and format characters, NEL, U+2028/9 and other odd whitespace inside a
    non-blank sentence: the sentence as it is (none of them breaks a line or is dropped)."""
    loader = LOADERS[name]
    middle = st.text(invisible(loader.encoding) | st.sampled_from("ab "), max_size=6)
    sentence = f"A{data.draw(middle)}."
    records, error = load(name, encode(loader, [loader.first, loader.line(sentence)]))
    assert error is None and sentence in texts(records), (error, sentence)


@pytest.mark.parametrize("name", sorted(LOADERS))
@pytest.mark.parametrize("at", ["start", "middle", "end"])
def test_nul_is_an_error_naming_file_and_line(name: str, at: str) -> None:
    loader = LOADERS[name]
    line = loader.line()
    cut = {"start": 0, "middle": len(line) // 2, "end": len(line)}[at]
    _, error = load(name, encode(loader, [loader.first, line[:cut] + "\0" + line[cut:]]))
    assert error == f"ROOT/{loader.path}:2: NUL character in a text file"


@pytest.mark.parametrize("name", sorted(LOADERS))
@pytest.mark.parametrize("encoding", WIDE_BOMS)
def test_utf16_or_utf32_bom_is_an_error_naming_the_encoding(name: str, encoding: str) -> None:
    loader = LOADERS[name]
    text = f"\ufeff{loader.first}\n{loader.line()}\n"
    files = {**encode(loader, [loader.first, loader.line()]), loader.path: text.encode(encoding)}
    assert load(name, files) == (
        None,
        f"ROOT/{loader.path}:1: starts with a {encoding.upper()} byte-order mark; "
        f"convert it to {loader.encoding}",
    )
