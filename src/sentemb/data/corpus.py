"""A training corpus of any file, cleaned in two streaming passes, with its data card.

`train.corpus` names a file (relative to the repo root, or absolute): `.txt` one sentence per
line, or `.csv`, `.tsv`, `.jsonl`, `.parquet` with the text in column `train.text_column`; the
text formats may be gzipped (`.txt.gz`, ...). The built-in corpora are files of the download
stage: `data/raw/corpus/wiki1m_for_simcse.txt` (SimCSE's Wikipedia sentences) and
`data/raw/corpus/sts.txt` (the STS sets' sentences, ConSERT's and PaSeR's corpus).

Every text is read under `sentemb.data.readers`' line policy (a BOM dropped; CRLF and CR are
line ends; not UTF-8 is an error naming the file and line), stripped, and a line break inside
a field becomes a space. A blank text is dropped; a repeated one is dropped when
`train.drop_duplicates`; at most `data.corpus_size` are kept, the first ones. The first pass
spills a 64-bit hash of each text to temporary files (16 bytes a text, under `TMPDIR`), in 256
buckets by the hash's first byte, and finds the repeats one bucket at a time; it keeps one bit a
text in memory. The second pass writes the kept sentences; a file that changed in between is
refused.
"""

from __future__ import annotations

import hashlib
import math
import tempfile
from array import array
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from sentemb.config import ConfigError
from sentemb.data.readers import DataFormatError, is_blank, iter_lines
from sentemb.data.tables import TABLES, read_rows, table_format, text_field

FORMATS = ("txt", *TABLES)
COLUMN = "train.text_column"  # the param a table's column error names
PERCENTILES = (50, 90, 95, 99)
OVERLAP_SAMPLE = 5  # corpus sentences found in test sets, listed in the card


def corpus_format(path: Path) -> str:
    """The format of `path` by its suffixes (`.txt`, `.csv.gz`, ...); else a `ConfigError`
    naming `train.corpus`."""
    return table_format(path, "train.corpus", FORMATS)


def check_corpus_path(value: str, root: Path) -> Path:
    """`train.corpus` as a path under `root` (the repo) or absolute: one file that exists, in a
    known format; else a `ConfigError` naming the param."""
    path = Path(value)  # no `~`: DVC, which hashes it, does not expand one either
    path = path if path.is_absolute() else root / path
    if not path.exists():
        raise ConfigError(
            f"train.corpus: {value}: no such file (a path relative to the repo root, or "
            "absolute; the built-in corpora are data/raw/corpus/wiki1m_for_simcse.txt and "
            "data/raw/corpus/sts.txt, written by the download stage)"
        )
    if not path.is_file():
        raise ConfigError(f"train.corpus: {value}: a folder, not a file")
    corpus_format(path)
    return path


def read_texts(path: Path, column: str = "text") -> Iterator[tuple[str, str | None]]:
    """Stream every text of a corpus file with where it is (`file:line`, `file: row N`); a
    null is None. A malformed row is one `DataFormatError` naming the file and line."""
    if corpus_format(path) == "txt":
        return ((f"{path}:{n}", line) for n, line in enumerate(iter_lines(path), 1))
    rows = read_rows(path, (column,), COLUMN)
    return ((where, text_field(row[column], where, column, COLUMN)) for where, row in rows)


def clean(text: str | None) -> str:
    """A text as it is trained on: one line (a line break inside a field becomes a space),
    stripped; "" when blank."""
    if text is None or is_blank(text):
        return ""
    return " ".join(text.replace("\r\n", "\n").replace("\r", "\n").split("\n")).strip()


def text_hash(text: str) -> int:
    """64 bits of a text, for finding repeats without keeping the texts."""
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "little")


@dataclass
class CorpusRules:
    """What the corpus stage keeps: params `train.text_column`, `train.drop_duplicates` and
    `data.corpus_size`, and the least it must keep (`train.batch_size`)."""

    text_column: str = "text"
    drop_duplicates: bool = False
    size: int = 1_000_000
    batch_size: int = 1


@dataclass
class CorpusStats:
    """What the two passes counted: the card's numbers apart from tokens and overlap."""

    read: int = 0
    blank: int = 0
    duplicates: int = 0  # texts equal to an earlier one, dropped or not
    dropped: dict[str, int] = field(default_factory=dict)
    kept: int = 0


BUCKETS = 256  # the first pass's spill files, by a hash's first byte
SPILL = 1 << 16  # texts hashed in memory before they go to the bucket files
RECORD = np.dtype([("hash", "<u8"), ("index", "<u8")])


@dataclass
class Repeats:
    """The first pass's findings: the non-blank texts' count, a digest of their hashes in order
    (the second pass must see the same), and which repeat an earlier one (one bit a text)."""

    count: int
    digest: bytes
    bits: np.ndarray

    def __contains__(self, index: int) -> bool:
        return bool(self.bits[index >> 3] >> (index & 7) & 1)


class HashStream:
    """Hashes of texts in order, spilled every `SPILL` to `spill` and into a running digest."""

    def __init__(self, spill: Callable[[np.ndarray, int], None] | None = None) -> None:
        self.spill = spill
        self.digest = hashlib.blake2b(digest_size=16)
        self.pending = array("Q")
        self.count = 0

    def __len__(self) -> int:
        """Texts added so far."""
        return self.count + len(self.pending)

    def add(self, text: str) -> None:
        self.pending.append(text_hash(text))
        if len(self.pending) == SPILL:
            self.flush()

    def flush(self) -> None:
        values = np.frombuffer(self.pending, dtype=np.uint64).copy()
        self.digest.update(values.tobytes())
        if self.spill is not None:
            self.spill(values, self.count)
        self.count += len(values)
        del self.pending[:]

    def done(self) -> tuple[int, bytes]:
        self.flush()
        return self.count, self.digest.digest()


def repeats(path: Path, rules: CorpusRules, stats: CorpusStats) -> Repeats:
    """First pass: which non-blank texts repeat an earlier one (counted in `stats`), found
    bucket by bucket from hashes spilled to disk, so memory stays flat as the file grows."""
    with tempfile.TemporaryDirectory(prefix="sentemb-corpus-") as folder:
        buckets = [Path(folder) / f"{b:02x}" for b in range(BUCKETS)]

        def spill(values: np.ndarray, start: int) -> None:
            records = np.empty(len(values), RECORD)
            records["hash"] = values
            records["index"] = np.arange(start, start + len(values), dtype=np.uint64)
            bucket = (values >> np.uint64(56)).astype(np.intp)
            records = records[np.argsort(bucket, kind="stable")]  # by bucket, then text order
            bounds = np.concatenate(([0], np.cumsum(np.bincount(bucket, minlength=BUCKETS))))
            for b in np.flatnonzero(np.diff(bounds)):
                with buckets[b].open("ab") as f:
                    records[bounds[b] : bounds[b + 1]].tofile(f)

        stream = HashStream(spill)
        for _, text in read_texts(path, rules.text_column):
            stats.read += 1
            line = clean(text)
            if line:
                stream.add(line)
            else:
                stats.blank += 1
        count, digest = stream.done()
        bits = np.zeros((count + 7) // 8, dtype=np.uint8)
        for bucket in buckets:
            if not bucket.exists():
                continue
            records = np.fromfile(bucket, RECORD)
            order = np.argsort(records["hash"], kind="stable")  # the first of equals first
            values = records["hash"][order]
            later = records["index"][order[1:]][values[1:] == values[:-1]]
            np.bitwise_or.at(bits, later >> 3, (1 << (later & 7)).astype(np.uint8))
            stats.duplicates += len(later)
    return Repeats(count, digest, bits)


def kept_sentences(path: Path, rules: CorpusRules, stats: CorpusStats) -> Iterator[str]:
    """Both passes: the sentences kept, in the file's order; `stats` filled when exhausted.
    A file that keeps fewer than a batch is a `DataFormatError` naming it."""
    found = repeats(path, rules, stats)
    changed = DataFormatError(f"{path}: it changed while it was read; run the stage again")
    dropped = Counter({"blank": stats.blank})
    stream = HashStream()
    for _, text in read_texts(path, rules.text_column):
        line = clean(text)
        if not line:
            continue
        index = len(stream)
        if index == found.count:
            raise changed
        stream.add(line)
        if rules.drop_duplicates and index in found:
            dropped["duplicate"] += 1
        elif stats.kept >= rules.size:
            dropped["beyond_corpus_size"] += 1
        else:
            stats.kept += 1
            yield line
    if stream.done() != (found.count, found.digest):
        raise changed
    stats.dropped = {k: dropped[k] for k in ("blank", "duplicate", "beyond_corpus_size")}
    if stats.kept == 0:
        raise DataFormatError(
            f"{path}: no usable sentence ({stats.read} texts read, every one blank)"
        )
    if stats.kept < rules.batch_size:
        raise DataFormatError(
            f"{path}: {stats.kept} sentences kept, fewer than a batch (train.batch_size: "
            f"{rules.batch_size}); add sentences or lower train.batch_size"
        )


@dataclass
class Card:
    """The data card's token and overlap counts, added to a sentence at a time: token lengths
    with the model's special tokens (against `max_length`, where training cuts), unknown
    tokens, and the sentences that are also test sentences (`is_test`)."""

    tokenizer: Any
    max_length: int
    is_test: Callable[[str], bool]
    batch: int = 10_000
    lengths: Counter[int] = field(default_factory=Counter)
    tokens: int = 0
    unknown: int = 0
    in_test: int = 0
    sample: list[str] = field(default_factory=list)
    pending: list[str] = field(default_factory=list)

    def add(self, sentence: str) -> None:
        if self.is_test(sentence):
            self.in_test += 1
            if len(self.sample) < OVERLAP_SAMPLE:
                self.sample.append(sentence)
        self.pending.append(sentence)
        if len(self.pending) == self.batch:
            self.flush()

    def flush(self) -> None:
        if not self.pending:
            return
        ids = self.tokenizer(self.pending, add_special_tokens=False)["input_ids"]
        special = self.tokenizer.num_special_tokens_to_add(pair=False)
        unk = self.tokenizer.unk_token_id
        for row in ids:
            self.lengths[len(row) + special] += 1
            self.tokens += len(row)
            self.unknown += row.count(unk) if unk is not None else 0
        self.pending.clear()

    def numbers(self) -> dict[str, Any]:
        """The card's `tokens` and `test_overlap` sections."""
        self.flush()
        ordered = sorted(self.lengths.items())
        total = sum(count for _, count in ordered)
        cumulative = np.cumsum([count for _, count in ordered])

        def percentile(p: int) -> int:  # the nearest-rank percentile
            return ordered[int(np.searchsorted(cumulative, math.ceil(total * p / 100)))][0]

        cut = sum(count for length, count in ordered if length > self.max_length)
        return {
            "tokens": {
                **{f"p{p}": percentile(p) for p in PERCENTILES},
                "max": ordered[-1][0],
                "cut_share": cut / total,
                "unknown_rate": self.unknown / max(self.tokens, 1),
            },
            "test_overlap": {"sentences": self.in_test, "sample": self.sample},
        }
