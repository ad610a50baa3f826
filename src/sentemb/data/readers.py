r"""Readers for the real benchmark files, in the layouts of the SentEval and senteval_cn archives.

Every data text file (these readers, the download stage's corpus cap, the TF-IDF corpus, the
phrases stage's `rake.jsonl`) is read by `iter_lines`, under one policy:

| in a file                                   | every reader                                       |
|---------------------------------------------|----------------------------------------------------|
| ``\n``, ``\r\n``, a lone ``\r``             | a line break, all alike (line numbers count each)  |
| NEL ``\x85``, U+2028, U+2029, ``\v``,       | text, not a break (MR is latin-1: its byte 0x85 is |
| ``\f``, ``\x1c``-``\x1f``                   | text); whitespace                                  |
| a UTF-8 BOM at the start of the file        | dropped, in UTF-8 and in latin-1 files             |
| a UTF-16 or UTF-32 BOM at the start         | an error naming that encoding                      |
| NUL; bytes not valid in the file's encoding | an error                                           |
| zero-width and other format characters      | kept where they are, but no content: a line or     |
| (Unicode Cf: U+200B-U+200D, U+2060, U+FEFF  | field of only these and whitespace is blank        |
| inside a line, soft hyphen, ...)            |                                                    |
| a blank line or field: nothing, whitespace  | see the table below                                |
| (`str.isspace`) and format characters only  |                                                    |
| whitespace at the edges of a field          | stripped where a line is one text (corpus, MR/CR/  |
|                                             | SUBJ/MPQA, SST-2, TREC, QQP, titles); kept by the  |
|                                             | others (some SICK sentences end in a space)        |

| reader                         | blank line          | blank sentence     | blank score, label |
|--------------------------------|---------------------|--------------------|--------------------|
| STS12-16 (input and gold file) | (*)                 | error              | pair skipped       |
| STS-B, SICK, MRPC, senteval_cn | skipped             | error              | error              |
| SST-2, TREC                    | skipped             | error              | error              |
| MR, CR, SUBJ, MPQA             | the example "" (**) | -                  | -                  |
| QQP                            | skipped             | the row is skipped | error              |
| AskUbuntu                      | skipped             | title: none (***)  | error              |
| corpus, `rake.jsonl`           | skipped             | -                  | -                  |

(*) Line i of the input file and line i of the gold file are one pair: a blank gold line skips
it, a blank input line with a score is an error. (**) CR and MPQA have a few blank lines, which
SentEval keeps as examples and embeds as ".". (***) An id whose title is blank has none: a query
or candidate without one is an error, and so is a blank id.

Every error is one `DataFormatError` naming the file and line, and nothing is returned.
"""

from __future__ import annotations

import codecs
import gzip
import math
import unicodedata
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from sentemb.config import UserError
from sentemb.data.sources import SENTEVAL_DIR, STS_SUBSETS, TRANSFER_FILES

WIDE_BOMS = {  # UTF-32 first: the UTF-32-LE mark starts with the UTF-16-LE one
    codecs.BOM_UTF32_LE: "UTF-32-LE",
    codecs.BOM_UTF32_BE: "UTF-32-BE",
    codecs.BOM_UTF16_LE: "UTF-16-LE",
    codecs.BOM_UTF16_BE: "UTF-16-BE",
}


class DataFormatError(UserError, ValueError):
    """A benchmark file is missing, empty or has a malformed line."""


@dataclass
class PairSet:
    """Sentence pairs with a gold score (STS) or label (paraphrase)."""

    first: list[str] = field(default_factory=list)
    second: list[str] = field(default_factory=list)
    scores: list[float] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.scores)

    @property
    def gold(self) -> np.ndarray:
        return np.asarray(self.scores, dtype=np.float64)


@dataclass
class LabelledSentences:
    """Single sentences with integer class labels (transfer tasks)."""

    sentences: list[str] = field(default_factory=list)
    labels: list[int] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.labels)


def iter_lines(path: Path, encoding: str = "utf-8") -> Iterator[str]:
    """Stream the lines of `path` (gunzipped if ``.gz``) under the policy above, each decoded alone.

    Lines break at ``\\n``, ``\\r\\n`` and a lone ``\\r``, which a line loses; a UTF-8 BOM at the
    start is dropped. A missing file, a UTF-16/32 BOM, a NUL, an undecodable line or damaged gzip
    data is a `DataFormatError` naming the file (and line). Line numbers count every break.
    """
    if not path.is_file():
        raise DataFormatError(f"{path}: file not found")
    try:
        yield from _lines(path, encoding)
    except (OSError, EOFError, zlib.error) as err:
        if path.suffix != ".gz":
            raise
        raise DataFormatError(f"{path}: not gzip, or its data is damaged ({err})") from err


def _lines(path: Path, encoding: str) -> Iterator[str]:
    """`iter_lines` but for the errors of a damaged gzip file."""
    with gzip.open(path, "rb") if path.suffix == ".gz" else path.open("rb") as f:
        head = f.peek(4)[:4]
        for bom, name in WIDE_BOMS.items():
            if head.startswith(bom):
                raise DataFormatError(
                    f"{path}:1: starts with a {name} byte-order mark; convert it to {encoding}"
                )
        if head.startswith(codecs.BOM_UTF8):
            f.read(len(codecs.BOM_UTF8))
        lineno = 0
        for raw in f:
            for piece in raw.removesuffix(b"\n").removesuffix(b"\r").split(b"\r"):
                lineno += 1
                if b"\0" in piece:
                    raise DataFormatError(f"{path}:{lineno}: NUL character in a text file")
                try:
                    line = piece.decode(encoding)
                except UnicodeDecodeError as err:
                    raise DataFormatError(
                        f"{path}:{lineno}: not valid {encoding}: {err.reason}"
                    ) from err
                yield line


def is_blank(text: str) -> bool:
    """Whether `text` has no content: only whitespace and format (zero-width) characters."""
    return all(ch.isspace() or unicodedata.category(ch) == "Cf" for ch in text)


def non_blank(text: str, what: str, path: Path, lineno: int) -> str:
    """`text` unchanged, or an error naming the file and line when it is blank."""
    if is_blank(text):
        raise DataFormatError(f"{path}:{lineno}: {what} is blank")
    return text


def read_lines(path: Path, encoding: str = "utf-8") -> list[str]:
    """The lines of `path` as `iter_lines` gives them; a missing, undecodable or blank file is an
    error."""
    lines = list(iter_lines(path, encoding))
    if all(is_blank(line) for line in lines):
        raise DataFormatError(f"{path}: file is empty")
    return lines


def parse_score(text: str, path: Path, lineno: int, low: float, high: float) -> float:
    """A finite number in [low, high], or an error naming the file and line."""
    try:
        value = float(text)
    except ValueError as err:
        raise DataFormatError(f"{path}:{lineno}: score {text!r} is not a number") from err
    if not math.isfinite(value) or not low <= value <= high:
        raise DataFormatError(f"{path}:{lineno}: score {text!r} outside [{low}, {high}]")
    return value


def split_columns(line: str, path: Path, lineno: int, count: int, exact: bool = True) -> list[str]:
    """Split a tab-separated line; the wrong number of columns is an error."""
    columns = line.split("\t")
    if len(columns) < count or (exact and len(columns) != count):
        expected = count if exact else f"at least {count}"
        raise DataFormatError(
            f"{path}:{lineno}: expected {expected} tab-separated columns, got {len(columns)}"
        )
    return columns


def data_lines(lines: list[str], skip_header: bool) -> Iterator[tuple[int, str]]:
    for lineno, line in enumerate(lines, start=1):
        if (skip_header and lineno == 1) or is_blank(line):
            continue
        yield lineno, line


def read_sts_subset(root: Path, year: str, subset: str) -> PairSet:
    """One STS12-16 subset; pairs whose gold line is empty are skipped (they have no score)."""
    folder = root / SENTEVAL_DIR / "STS" / f"{year}-en-test"
    input_path, gold_path = folder / f"STS.input.{subset}.txt", folder / f"STS.gs.{subset}.txt"
    inputs, golds = read_lines(input_path), read_lines(gold_path)
    if len(inputs) != len(golds):
        raise DataFormatError(f"{gold_path}: {len(golds)} lines but {input_path} has {len(inputs)}")
    pairs = PairSet()
    for lineno, (pair, gold) in enumerate(zip(inputs, golds, strict=True), start=1):
        if is_blank(gold):
            continue
        first, second = split_columns(pair, input_path, lineno, 2, exact=False)[:2]
        pairs.first.append(non_blank(first, "sentence 1 of a scored pair", input_path, lineno))
        pairs.second.append(non_blank(second, "sentence 2 of a scored pair", input_path, lineno))
        pairs.scores.append(parse_score(gold.strip(), gold_path, lineno, 0.0, 5.0))
    return pairs


def read_sts_year(root: Path, year: str) -> dict[str, PairSet]:
    """All subsets of one STS year, by subset name."""
    return {subset: read_sts_subset(root, year, subset) for subset in STS_SUBSETS[year]}


def read_stsb(root: Path, split: str) -> PairSet:
    """STS Benchmark: score in column 5, sentences in 6 and 7; quotes are literal text."""
    path = root / SENTEVAL_DIR / "STS" / "STSBenchmark" / f"sts-{split}.csv"
    pairs = PairSet()
    for lineno, line in data_lines(read_lines(path), skip_header=False):
        columns = split_columns(line, path, lineno, 7, exact=False)
        pairs.scores.append(parse_score(columns[4], path, lineno, 0.0, 5.0))
        pairs.first.append(non_blank(columns[5], "sentence 1", path, lineno))
        pairs.second.append(non_blank(columns[6], "sentence 2", path, lineno))
    return pairs


def read_sick(root: Path, split: str) -> PairSet:
    """SICK relatedness (split: train, trial or test_annotated); header row, score column 4."""
    path = root / SENTEVAL_DIR / "SICK" / f"SICK_{split}.txt"
    lines = read_lines(path)
    if not lines[0].startswith("pair_ID"):
        raise DataFormatError(f"{path}:1: expected the header row 'pair_ID ...'")
    pairs = PairSet()
    for lineno, line in data_lines(lines, skip_header=True):
        columns = split_columns(line, path, lineno, 5)
        pairs.first.append(non_blank(columns[1], "sentence A", path, lineno))
        pairs.second.append(non_blank(columns[2], "sentence B", path, lineno))
        pairs.scores.append(parse_score(columns[3], path, lineno, 1.0, 5.0))
    return pairs


def read_binary(root: Path, task: str) -> LabelledSentences:
    """MR, CR, SUBJ, MPQA: one latin-1 file per class, positive (label 1) first.

    Blank lines are examples with the empty sentence "" (CR and MPQA have a few): SentEval sorts
    them as 0 tokens and embeds them as "."; the transfer evaluator does the same.
    """
    data = LabelledSentences()
    for label, rel in zip((1, 0), TRANSFER_FILES[task], strict=True):
        for line in read_lines(root / SENTEVAL_DIR / rel, "latin-1"):
            data.sentences.append("" if is_blank(line) else line.strip())
            data.labels.append(label)
    return data


def read_sst2(root: Path, split: str) -> LabelledSentences:
    """SST-2 (binary), `sentence TAB label` per line."""
    path = root / SENTEVAL_DIR / "SST" / "binary" / f"sentiment-{split}"
    data = LabelledSentences()
    for lineno, line in data_lines(read_lines(path), skip_header=False):
        sentence, label = split_columns(line, path, lineno, 2)
        if label.strip() not in ("0", "1"):
            raise DataFormatError(f"{path}:{lineno}: label {label!r} is not 0 or 1")
        data.sentences.append(non_blank(sentence, "the sentence", path, lineno).strip())
        data.labels.append(int(label))
    return data


TREC_CLASSES = ("ABBR", "DESC", "ENTY", "HUM", "LOC", "NUM")


def read_trec(root: Path, split: str) -> LabelledSentences:
    """TREC question types (split: train or test), `COARSE:fine question`, latin-1."""
    name = "train_5500.label" if split == "train" else "TREC_10.label"
    path = root / SENTEVAL_DIR / "TREC" / name
    data = LabelledSentences()
    for lineno, line in data_lines(read_lines(path, "latin-1"), skip_header=False):
        label, _, question = line.strip().partition(" ")
        coarse = label.split(":")[0]
        if coarse not in TREC_CLASSES or is_blank(question):
            raise DataFormatError(f"{path}:{lineno}: expected 'COARSE:fine question', got {line!r}")
        data.sentences.append(question)
        data.labels.append(TREC_CLASSES.index(coarse))
    return data


def read_mrpc(root: Path, split: str) -> tuple[PairSet, list[int]]:
    """MRPC (split: train or test): header row, then Quality, #1 ID, #2 ID, #1 String, #2 String."""
    path = root / SENTEVAL_DIR / "MRPC" / f"msr_paraphrase_{split}.txt"
    lines = read_lines(path)
    if not lines[0].startswith("Quality"):
        raise DataFormatError(f"{path}:1: expected the header row 'Quality ...'")
    pairs, labels = PairSet(), []
    for lineno, line in data_lines(lines, skip_header=True):
        columns = split_columns(line, path, lineno, 5)
        if columns[0] not in ("0", "1"):
            raise DataFormatError(f"{path}:{lineno}: label {columns[0]!r} is not 0 or 1")
        pairs.first.append(non_blank(columns[3], "#1 String", path, lineno))
        pairs.second.append(non_blank(columns[4], "#2 String", path, lineno))
        pairs.scores.append(float(columns[0]))
        labels.append(int(columns[0]))
    return pairs, labels


def read_chinese(root: Path, name: str, split: str, max_pairs: int | None = None) -> PairSet:
    """A senteval_cn set (ATEC, BQ, LCQMC, PAWSX, STS-B): `s1 TAB s2 TAB label`, UTF-8.

    With `max_pairs`, a sample of that many pairs (numpy's generator seeded 0, kept in file
    order): the same pairs for every model and every caller."""
    path = root / "senteval_cn" / name / f"{name}.{split}.data"
    high = 5.0 if name == "STS-B" else 1.0
    pairs = PairSet()
    for lineno, line in data_lines(read_lines(path), skip_header=False):
        first, second, label = split_columns(line, path, lineno, 3)
        pairs.first.append(non_blank(first, "sentence 1", path, lineno))
        pairs.second.append(non_blank(second, "sentence 2", path, lineno))
        pairs.scores.append(parse_score(label, path, lineno, 0.0, high))
    if max_pairs is None or len(pairs) <= max_pairs:
        return pairs
    keep = np.sort(np.random.default_rng(0).permutation(len(pairs))[:max_pairs])
    columns = (pairs.first, pairs.second, pairs.scores)
    return PairSet(*([column[i] for i in keep] for column in columns))


def read_corpus(path: Path, limit: int | None = None) -> Iterator[str]:
    """Stream the non-blank lines of a one-sentence-per-line corpus (UTF-8), stripped, at most
    `limit` of them; a corpus without one is an error."""
    count = 0
    for line in iter_lines(path):
        if limit is not None and count >= limit:
            return
        if not is_blank(line):
            count += 1
            yield line.strip()
    if count == 0:
        raise DataFormatError(f"{path}: file is empty")


def sts_sentences(root: Path) -> list[str]:
    """Every sentence of the seven STS sets (all splits, no labels), first occurrence first.

    The unsupervised training corpus of ConSERT (Yan et al., 2021) and PaSeR (§4.2).
    """
    sets = [s for year in STS_SUBSETS for s in read_sts_year(root, year).values()]
    sets += [read_stsb(root, split) for split in ("train", "dev", "test")]
    sets += [read_sick(root, split) for split in ("train", "trial", "test_annotated")]
    return list(dict.fromkeys(s for pairs in sets for s in (*pairs.first, *pairs.second)))
