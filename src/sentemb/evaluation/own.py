"""Test sets of the user's (`eval.own`): STS pairs, reranking samples and BEIR retrieval folders,
scored like the built-in suites.

    eval:
      own:
        - {name: bio-sts, kind: sts, path: data/own/bio-sts.tsv, dev: data/own/bio-dev.tsv}
        - {name: faq, kind: reranking, path: data/own/faq.jsonl}
        - {name: papers, kind: retrieval, path: data/own/papers}

Every file lives under `data/own/` (a DVC dependency of the scoring stages, so a changed byte
rescores them). The kinds, with the conventions of MTEB and sentence-transformers:

- `sts`: a table (`.tsv`, `.csv`, `.jsonl`, `.parquet`) with columns `sentence1`, `sentence2`,
  `score`; Spearman x 100 of cosine against the scores, as the built-in STS tasks.
- `reranking`: JSON Lines of `{"query": ..., "positive": [...], "negative": [...]}`; MAP and
  MRR@10 x 100, as sentence-transformers' `RerankingEvaluator` defines them (a sample without a
  positive or a negative is skipped, as there).
- `retrieval`: a BEIR folder (`corpus.jsonl` of `_id`, `title`, `text`; `queries.jsonl` of
  `_id`, `text`; `qrels/test.tsv` of `query-id`, `corpus-id`, `score`); nDCG@10, MRR@10 and
  Recall@100 x 100, as its `InformationRetrievalEvaluator` defines them (relevant: a qrel score
  above 0; ties broken by the document id; queries without a relevant document left out).

`dev` names the dev file of an `sts` or `reranking` set, which `train.selection` can select
models on; the test file is never read for it. A `retrieval` set is not selected on: no `dev`.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Literal

import numpy as np
import scipy.sparse as sp
from sklearn.preprocessing import normalize

from sentemb.data.readers import DataFormatError, PairSet, is_blank
from sentemb.data.tables import read_rows, text_field
from sentemb.evaluation.base import (
    ENGLISH,
    ITEMS,
    RESERVED,
    Embeddings,
    Evaluator,
    SentenceEncoder,
    embed,
    sentences_of,
    spearman,
)
from sentemb.evaluation.sts import cosine_scores
from sentemb.registry import register_suite

OWN_FOLDER = "data/own"
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")
MRR_AT, NDCG_AT, RECALL_AT = 10, 10, 100
KIND_COLUMNS = {
    "sts": ("sentence1", "sentence2", "score"),
    "reranking": ("query", "positive", "negative"),
}


@dataclass
class OwnSet:
    """One entry of `eval.own`."""

    name: str  # its key in the metrics and its column in the leaderboard
    kind: Literal["sts", "reranking", "retrieval"]
    path: str  # the test file, or BEIR folder, under data/own/
    dev: str | None = None  # the dev file, for selection (sts and reranking)

    def validate(self) -> list[str]:
        problems = []
        if not NAME.fullmatch(self.name):
            problems.append(f"name: {self.name!r} is no name: letters, digits, '_', '.', '-'")
        elif self.name.split(".")[0] in RESERVED:  # `repal.x`: git's copy of the scores nests it
            problems.append(
                f"name: {self.name!r}: {self.name.split('.')[0]!r} is a key the reports keep"
                f" (names may not be, or begin with one and a '.': {list(RESERVED)})"
            )
        if self.kind == "retrieval" and self.dev is not None:
            problems.append("dev: a retrieval set is not selected on (train.selection): drop it")
        for key in ("path", "dev"):
            value = getattr(self, key)
            inside = value is not None and Path(value).parts[:2] == tuple(OWN_FOLDER.split("/"))
            if value is not None and (not inside or ".." in Path(value).parts):
                problems.append(f"{key}: {value!r} is not under {OWN_FOLDER}/ (a DVC dependency)")
        return problems


@dataclass
class OwnConfig:
    """Params section `eval.own`: a list of `OwnSet`s (an empty list scores none)."""

    LIST: ClassVar[str] = "sets"  # the section is this field's list
    sets: list[OwnSet] = field(default_factory=list)

    def validate(self) -> list[str]:
        names = [s.name for s in self.sets]
        repeated = sorted({n for n in names if names.count(n) > 1})
        return [f"sets: the name {n!r} is given twice" for n in repeated]


def _text(row: Mapping[str, Any], column: str, where: str, param: str) -> str:
    text = text_field(row[column], where, column, param)
    if text is None or is_blank(text):
        raise DataFormatError(f"{where}: {column} is blank ({param})")
    return text


def _score(value: Any, where: str, param: str) -> float:
    try:
        score = float(value)
    except (TypeError, ValueError):
        score = math.nan
    if isinstance(value, bool) or not math.isfinite(score):
        raise DataFormatError(f"{where}: score {value!r} is no finite number ({param})")
    return score


def read_sts_pairs(path: Path, param: str) -> PairSet:
    """An STS table: every row a pair and its gold score."""
    pairs = PairSet()
    for where, row in read_rows(path, KIND_COLUMNS["sts"], param):
        pairs.first.append(_text(row, "sentence1", where, param))
        pairs.second.append(_text(row, "sentence2", where, param))
        pairs.scores.append(_score(row["score"], where, param))
    if len(pairs) < 3:
        raise DataFormatError(f"{path}: {len(pairs)} pairs; a rank correlation needs 3 ({param})")
    if len(set(pairs.scores)) == 1:
        raise DataFormatError(
            f"{path}: every score is {pairs.scores[0]:g}; a rank correlation needs two ({param})"
        )
    return pairs


@dataclass
class RerankingSample:
    query: str
    positive: list[str]
    negative: list[str]


def _texts(row: Mapping[str, Any], column: str, where: str, param: str) -> list[str]:
    values = row[column]
    values = [values] if isinstance(values, str) else values
    if not isinstance(values, list):
        raise DataFormatError(f"{where}: {column} is no list of texts ({param})")
    return [_text({column: v}, column, where, param) for v in values]


def read_reranking(path: Path, param: str) -> list[RerankingSample]:
    """Reranking samples; those without a positive or a negative are left out (as
    sentence-transformers' `RerankingEvaluator` leaves them)."""
    samples = []
    for where, row in read_rows(path, KIND_COLUMNS["reranking"], param):
        sample = RerankingSample(
            _text(row, "query", where, param),
            _texts(row, "positive", where, param),
            _texts(row, "negative", where, param),
        )
        if sample.positive and sample.negative:
            samples.append(sample)
    if not samples:
        raise DataFormatError(f"{path}: no sample with a positive and a negative ({param})")
    return samples


@dataclass
class RetrievalSet:
    """A BEIR split: documents and queries by id, and each query's relevant documents."""

    documents: dict[str, str]
    queries: dict[str, str]
    relevant: dict[str, set[str]]


def _by_id(path: Path, param: str, title: bool) -> dict[str, str]:
    texts: dict[str, str] = {}
    optional = ("title",) if title else ()
    for where, row in read_rows(path, ("_id", "text"), param, optional):
        key = str(row["_id"])
        if key in texts:
            raise DataFormatError(f"{where}: the _id {key!r} is given twice ({param})")
        text = _text(row, "text", where, param)
        if title and isinstance(row.get("title"), str):
            text = f"{row['title']} {text}".strip()
        texts[key] = text
    return texts


def read_beir(folder: Path, split: str, param: str) -> RetrievalSet:
    """A BEIR folder's split `split` (`qrels/<split>.tsv`): a qrel naming no document or no
    query is an error naming its line."""
    documents = _by_id(folder / "corpus.jsonl", param, title=True)
    queries = _by_id(folder / "queries.jsonl", param, title=False)
    relevant: dict[str, set[str]] = {}
    for where, row in read_rows(
        folder / "qrels" / f"{split}.tsv", ("query-id", "corpus-id", "score"), param
    ):
        query, document = row["query-id"], row["corpus-id"]
        if query not in queries:
            raise DataFormatError(f"{where}: query-id {query!r} names no query ({param})")
        if document not in documents:
            raise DataFormatError(f"{where}: corpus-id {document!r} names no document ({param})")
        if _score(row["score"], where, param) > 0:
            relevant.setdefault(query, set()).add(document)
    if not relevant:
        raise DataFormatError(f"{folder}/qrels/{split}.tsv: no relevant document ({param})")
    return RetrievalSet(documents, {q: queries[q] for q in queries if q in relevant}, relevant)


def cosines(rows: Embeddings, query: Embeddings) -> np.ndarray:
    """The cosine of each of unit-length `rows` with the one unit-length row `query`, dense or
    sparse (TF-IDF)."""
    scores = rows @ query.T
    return np.asarray(scores.toarray() if sp.issparse(scores) else scores).ravel()


def reranking_items(
    samples: Sequence[RerankingSample], encoder: SentenceEncoder, batch_size: int
) -> dict[str, np.ndarray]:
    """Each sample's average precision and reciprocal rank of the first positive in the top
    `MRR_AT` (0 past it), by cosine, as `RerankingEvaluator` computes them."""
    from sklearn.metrics import average_precision_score

    texts = [t for s in samples for t in (s.query, *s.positive, *s.negative)]
    vectors, row = embed(encoder, texts, batch_size)
    vectors = normalize(vectors)
    ap, rr = [], []
    for sample in samples:
        docs = [*sample.positive, *sample.negative]
        scores = cosines(vectors[[row[d] for d in docs]], vectors[[row[sample.query]]])
        relevant = np.array([1] * len(sample.positive) + [0] * len(sample.negative))
        top = np.argsort(-scores, kind="stable")[:MRR_AT]
        hits = np.flatnonzero(relevant[top])
        rr.append(1 / (hits[0] + 1) if len(hits) else 0.0)
        ap.append(average_precision_score(relevant, scores))
    return {"map": np.asarray(ap), f"mrr@{MRR_AT}": np.asarray(rr)}


def retrieval_items(
    data: RetrievalSet, encoder: SentenceEncoder, batch_size: int
) -> dict[str, np.ndarray]:
    """Each query's nDCG@10, MRR@10 and Recall@100 over every document by cosine, ties broken
    by document id, as `InformationRetrievalEvaluator` computes them."""
    ids = list(data.documents)
    vectors, row = embed(encoder, [*data.documents.values(), *data.queries.values()], batch_size)
    vectors = normalize(vectors)
    docs = vectors[[row[data.documents[i]] for i in ids]]
    rank_of_id = np.argsort(np.argsort(np.array(ids, dtype=object), kind="stable"))
    depth = max(NDCG_AT, MRR_AT, RECALL_AT)
    items: dict[str, list[float]] = {
        f"ndcg@{NDCG_AT}": [],
        f"mrr@{MRR_AT}": [],
        f"recall@{RECALL_AT}": [],
    }
    for query, text in data.queries.items():
        scores = cosines(docs, vectors[[row[text]]])
        order = np.lexsort((rank_of_id, -scores))[:depth]  # by score, then by id
        hit = np.zeros(depth)  # past the last document: no hit
        hit[: len(order)] = [ids[i] in data.relevant[query] for i in order]
        gains = 1 / np.log2(np.arange(2, depth + 2))
        ideal = gains[: min(len(data.relevant[query]), NDCG_AT)].sum()
        items[f"ndcg@{NDCG_AT}"].append(float((hit[:NDCG_AT] * gains[:NDCG_AT]).sum() / ideal))
        first = np.flatnonzero(hit[:MRR_AT])
        items[f"mrr@{MRR_AT}"].append(1 / (first[0] + 1) if len(first) else 0.0)
        items[f"recall@{RECALL_AT}"].append(hit[:RECALL_AT].sum() / len(data.relevant[query]))
    return {key: np.asarray(values) for key, values in items.items()}


@register_suite("own", config=OwnConfig, order=4)
class OwnEvaluator(Evaluator):
    """The user's sets of `eval.own`, each scored by its kind; `split` "dev" scores their dev
    splits (for `train.selection`)."""

    languages = (ENGLISH,)
    pairs = True
    title = "Your sets (eval.own)"
    columns = ()  # per params: `report_columns`

    def __init__(
        self,
        root: Path,
        batch_size: int = 128,
        config: OwnConfig | None = None,
        split: str = "test",
        repo: Path = Path(),
    ) -> None:
        super().__init__(root, batch_size)
        self.config = config or OwnConfig()
        self.split, self.repo = split, repo

    @classmethod
    def asks_for_tasks(cls, config: OwnConfig) -> bool:
        return bool(config.sets)

    @classmethod
    def report_columns(cls, values: Mapping[str, Any]) -> list[str]:
        """Each set's headline (its name: Spearman, MAP or nDCG@10), in the params' order; no
        `avg` (the kinds' metrics do not average)."""
        return [k for k in values if "/" not in k and k not in RESERVED]

    def _where(self, own: OwnSet) -> tuple[Path, str, str]:
        """The file (or folder) of `own`'s split, its BEIR qrels split, and the param naming it."""
        index = self.config.sets.index(own)
        if self.split == "dev":
            if own.dev is None:
                raise DataFormatError(f"eval.own[{index}].dev: {own.name} has no dev split")
            return self.repo / own.dev, "", f"eval.own[{index}].dev"
        return self.repo / own.path, "test", f"eval.own[{index}].path"

    def items(self, own: OwnSet, encoder: SentenceEncoder) -> dict[str, np.ndarray]:
        """`own`'s per-item scores x 100 (STS: none; its cosines are kept in `pairs`)."""
        path, split, param = self._where(own)
        if own.kind == "sts":
            pairs = read_sts_pairs(path, param)
            cosines = cosine_scores(encoder, {own.name: pairs}, self.batch_size)[own.name]
            self.pairs[own.name] = (cosines, pairs.gold)
            return {}
        if own.kind == "reranking":
            found = reranking_items(read_reranking(path, param), encoder, self.batch_size)
        else:
            found = retrieval_items(read_beir(path, split, param), encoder, self.batch_size)
        return {key: 100 * values for key, values in found.items()}

    def test_sentences(self) -> set[str]:
        sentences: set[str] = set()
        for own in self.config.sets:
            path, split, param = self._where(own)
            if own.kind == "sts":
                sentences.update(sentences_of([read_sts_pairs(path, param)]))
            elif own.kind == "reranking":
                for s in read_reranking(path, param):
                    sentences.update((s.query, *s.positive, *s.negative))
            else:
                data = read_beir(path, split, param)
                sentences.update((*data.documents.values(), *data.queries.values()))
        return sentences

    def score(self, encoders: Mapping[str, SentenceEncoder]) -> dict[str, float]:
        metrics: dict[str, float] = {}
        for own in self.config.sets:
            items = self.items(own, encoders[ENGLISH])
            if own.kind == "sts":
                metrics[own.name] = spearman(*self.pairs[own.name])
            else:
                headline = next(iter(items.values()))  # MAP; nDCG@10
                metrics[own.name] = float(headline.mean())
                metrics.update({f"{own.name}/{k}": float(v.mean()) for k, v in items.items()})
                self.per_item[f"{own.name}/{ITEMS}"] = headline
        return metrics
