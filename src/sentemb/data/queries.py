"""Readers of the retrieval suite's sets (PaSeR §4.1): QQP's duplicate questions, retrieved
from a pool, and AskUbuntu's reranking of candidate questions. The line and error policy is
`sentemb.data.readers`'."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from sentemb.data.readers import (
    DataFormatError,
    PairSet,
    data_lines,
    is_blank,
    non_blank,
    read_lines,
    split_columns,
)

QQP_DIR = "qqp"
QQP_HEADER = ("id", "qid1", "qid2", "question1", "question2", "is_duplicate")
ASKUBUNTU_DIR = "askubuntu"


def read_qqp(root: Path, splits: tuple[str, ...] | list[str] = ("train", "dev")) -> PairSet:
    """Quora Question Pairs from GLUE's QQP-clean (`qqp/{split}.tsv`); scores are the 0/1 labels.

    Each file has the header row `id qid1 qid2 question1 question2 is_duplicate`, then six
    tab-separated columns per row. A row with another number of columns or a label other than 0/1
    is a `DataFormatError` naming the file and line. A handful of GLUE rows have a blank question:
    they are skipped (there is nothing to retrieve or rank), not an error. Splits are concatenated.
    """
    pairs = PairSet()
    for split in splits:
        path = root / QQP_DIR / f"{split}.tsv"
        lines = read_lines(path)
        if tuple(c.strip() for c in lines[0].split("\t")) != QQP_HEADER:
            raise DataFormatError(f"{path}:1: expected the header row {' '.join(QQP_HEADER)!r}")
        for lineno, line in data_lines(lines, skip_header=True):
            columns = split_columns(line, path, lineno, len(QQP_HEADER))
            label = columns[5].strip()
            if label not in ("0", "1"):
                raise DataFormatError(f"{path}:{lineno}: label {columns[5]!r} is not 0 or 1")
            first, second = columns[3].strip(), columns[4].strip()
            if is_blank(first) or is_blank(second):
                continue
            pairs.first.append(first)
            pairs.second.append(second)
            pairs.scores.append(float(label))
    return pairs


@dataclass
class RerankingSet:
    """Queries, each with its candidates to rerank and the similar (positive) ones, by id.

    `positives[i]` keeps the ids listed as similar even when they are not among `candidates[i]`;
    the evaluator scores only candidates. `titles` maps every id used here to its title.
    """

    queries: list[str] = field(default_factory=list)
    candidates: list[list[str]] = field(default_factory=list)
    positives: list[list[str]] = field(default_factory=list)
    titles: dict[str, str] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.queries)


def read_askubuntu_texts(root: Path) -> dict[str, str]:
    """Question id -> title from `askubuntu/text_tokenized.txt.gz` (`id TAB title TAB body`).

    Titles are already tokenized and lower-cased in the release; a repeated id keeps its first.
    A blank title is no title (`read_askubuntu` refuses an id it uses without one).
    """
    path = root / ASKUBUNTU_DIR / "text_tokenized.txt.gz"
    titles: dict[str, str] = {}
    for lineno, line in data_lines(read_lines(path), skip_header=False):
        columns = split_columns(line, path, lineno, 2, exact=False)
        qid = non_blank(columns[0], "the question id", path, lineno).strip()
        if not is_blank(columns[1]):
            titles.setdefault(qid, columns[1].strip())
    return titles


def read_askubuntu(root: Path, split: str = "test") -> RerankingSet:
    """AskUbuntu reranking (split: test or dev) in the layout of github.com/taolei87/askubuntu.

    Each line of `askubuntu/{split}.txt` is `query_id TAB similar_ids TAB candidate_ids TAB bm25`,
    ids space-separated (similar may be empty; the BM25 column is ignored). Candidates keep their
    order, repeats dropped. Every query and candidate id must have a title in
    `text_tokenized.txt.gz`; one without is a `DataFormatError` naming the file and line.
    """
    titles = read_askubuntu_texts(root)
    path = root / ASKUBUNTU_DIR / f"{split}.txt"
    data = RerankingSet()
    used: set[str] = set()
    for lineno, line in data_lines(read_lines(path), skip_header=False):
        columns = split_columns(line, path, lineno, 3, exact=False)
        query = columns[0].strip()
        similar = list(dict.fromkeys(columns[1].split()))
        candidates = list(dict.fromkeys(columns[2].split()))
        if is_blank(query) or not candidates:
            raise DataFormatError(f"{path}:{lineno}: expected a query id and candidate ids")
        unknown = [q for q in (query, *candidates) if q not in titles]
        if unknown:
            raise DataFormatError(f"{path}:{lineno}: question id {unknown[0]!r} has no title")
        data.queries.append(query)
        data.candidates.append(candidates)
        data.positives.append(similar)
        used.update((query, *candidates))
    data.titles = {qid: titles[qid] for qid in sorted(used)}
    return data


# --- Training corpora ---


