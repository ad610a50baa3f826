"""Semantic retrieval (QQP) and reranking (AskUbuntu) by cosine similarity: MAP and MRR@10.

Protocol of PaSeR (Wu et al., 2022), §4.1 "Quora Question Pair" and "AskUbuntu Question", results
in §4.4, Table 3:

- **QQP** (retrieval): the corpus is every distinct q2 question, the queries every distinct q1
  that has at least one duplicate (label 1) q2; each query ranks the whole corpus. We use the
  train and dev rows of GLUE's QQP-clean (`eval.retrieval.qqp_splits`). MAP is over the full
  ranking, MRR is cut at rank 10.
- **AskUbuntu** (reranking): each query of the test split reranks its 20 given candidates; texts
  are titles. Queries with no similar question among their candidates are left out.

The paper does not say whether a query may retrieve its own text when the same question is also
a q2; by default (`exclude_query: true`) it never does, and a pair whose two questions are the
same text is no positive (BEIR's `ignore_identical_ids` for its Quora set does the same).

**Offline sets.** The offline mirror has neither QQP nor AskUbuntu, so the QQP protocol is also
applied to the duplicate-pair test sets that are there: LCQMC and BQ (senteval_cn, label 1 =
duplicate; encoded by the Chinese encoder when one is given) and MRPC (label 1 = paraphrase),
reported as ``QQP-protocol/<set>/...``. They run **always**, not only when QQP is missing: they
take seconds, and a run online then reports the same keys as a run offline, so the two stay
comparable. `eval.retrieval.offline_sets: []` turns them off.

**Ties.** Metrics never depend on the order of tied scores. Average precision is scikit-learn's
`average_precision_score`: a positive's precision is (positives scoring >= it) / (items scoring
>= it), which is the mean of i / rank_i when there are no ties. The reciprocal rank puts tied
items before the first positive (a pessimistic rank), so a constant encoder earns no credit.

Results are x 100: ``QQP/map``, ``QQP/mrr@10``, ``AskUbuntu/map``, ``AskUbuntu/mrr@10``,
``QQP-protocol/LCQMC/map``, ... and ``avg``, the mean of every ``.../map`` present (absent when no
set could be read). A missing dataset is skipped and its reason recorded in `skipped`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import scipy.sparse as sp
from sklearn.preprocessing import normalize

from sentemb.config import Count, PairSample, choice_problems
from sentemb.data.queries import RerankingSet, read_askubuntu, read_qqp
from sentemb.data.readers import PairSet, read_chinese, read_mrpc
from sentemb.evaluation.base import (
    CHINESE,
    ENGLISH,
    Embeddings,
    Evaluator,
    SentenceEncoder,
    distinct,
    embed,
    for_set,
    rowwise_cosine,
    sentences_of,
)
from sentemb.registry import register_suite

log = logging.getLogger(__name__)

QQP_SPLITS = ("train", "dev")
ASKUBUNTU_SPLITS = ("test", "dev")
CHINESE_PAIR_SETS = ("LCQMC", "BQ", "ATEC", "PAWSX")
OFFLINE_SETS = (*CHINESE_PAIR_SETS, "MRPC")
PROTOCOL_PREFIX = "QQP-protocol"


@dataclass
class RetrievalConfig:
    """Params section `eval.retrieval`.

    `query_chunk` queries are scored against the corpus at a time, fewer when the similarity block
    would exceed `chunk_cells` entries (memory is about 9 bytes per cell for float32 embeddings:
    the block, one gathered copy and a boolean mask). `max_pairs` keeps a fixed sample of each
    offline Chinese set (`read_chinese`; the same pairs as `eval.chinese.max_pairs` of that size).
    """

    mrr_k: Count = 10
    query_chunk: Count = 1024
    chunk_cells: Count = 50_000_000
    qqp_splits: list[str] = field(default_factory=lambda: list(QQP_SPLITS))
    askubuntu_split: str = "test"
    offline_sets: list[str] = field(default_factory=lambda: ["LCQMC", "BQ", "MRPC"])
    exclude_query: bool = True
    max_pairs: PairSample | None = None

    def validate(self) -> list[str]:
        problems = choice_problems("qqp_splits", self.qqp_splits, QQP_SPLITS)
        problems += choice_problems("offline_sets", self.offline_sets, OFFLINE_SETS, empty=True)
        if self.askubuntu_split not in ASKUBUNTU_SPLITS:
            problems.append(
                f"askubuntu_split: {self.askubuntu_split!r} is not one of {list(ASKUBUNTU_SPLITS)}"
            )
        return problems


# --- metric maths --------------------------------------------------------------------------


def ranking_metrics(
    sim: np.ndarray, rows: np.ndarray, cols: np.ndarray, k: int = 10
) -> tuple[np.ndarray, np.ndarray]:
    """Average precision and reciprocal rank @k of every row of `sim`, vectorised.

    `(rows[i], cols[i])` are the distinct relevant cells; every row needs at least one. Entries of
    -inf are never ranked (padding, or a query's own text). A positive's rank is found by
    counting the items scoring at or above it, not by sorting the row, so tied scores share one
    cut-off: average precision is scikit-learn's `average_precision_score`, and items tied with
    a row's best positive rank before it (a pessimistic reciprocal rank).
    """
    rows, cols = np.asarray(rows, dtype=np.int64), np.asarray(cols, dtype=np.int64)
    n = sim.shape[0]
    counts = np.bincount(rows, minlength=n)
    if len(counts) > n or (counts == 0).any():
        raise ValueError("every row of the similarity block needs at least one relevant column")
    values = sim[rows, cols]
    if not np.isfinite(values).all():
        raise ValueError("a relevant item has a non-finite similarity")
    at_or_above = np.empty(len(rows), dtype=np.int64)
    for start in range(0, len(rows), n):  # gathered copies stay the size of `sim`
        part = slice(start, start + n)
        at_or_above[part] = np.count_nonzero(sim[rows[part]] >= values[part, None], axis=1)
    # positives of the same row scoring at or above each positive: sort by (row, -score), then
    # a positive's count runs to the last of its tie group, from the start of its row
    order = np.lexsort((-values, rows))
    row_sorted, value_sorted = rows[order], values[order]
    new_row = np.ones(len(order), dtype=bool)
    new_row[1:] = row_sorted[1:] != row_sorted[:-1]
    new_group = new_row.copy()
    new_group[1:] |= value_sorted[1:] != value_sorted[:-1]
    group_end = np.flatnonzero(np.append(new_group[1:], True))[np.cumsum(new_group) - 1]
    row_start = np.maximum.accumulate(np.where(new_row, np.arange(len(order)), 0))
    positives_at_or_above = np.empty_like(at_or_above)
    positives_at_or_above[order] = group_end - row_start + 1
    ap = np.bincount(rows, weights=positives_at_or_above / at_or_above, minlength=n) / counts
    first = order[new_row]  # the best positive of each row, rows in ascending order
    rank = at_or_above[first] - positives_at_or_above[first] + 1
    rr = np.where(rank <= k, 1.0 / rank, 0.0)
    return ap, rr


# --- tasks ---------------------------------------------------------------------------------


@dataclass
class RetrievalTask:
    """Queries that each rank one shared corpus; `positives[i]` are corpus indices.

    `own[i]` is the corpus index of query i's own text, never ranked, or -1.
    """

    queries: list[str]
    corpus: list[str]
    positives: list[list[int]]
    own: list[int]

    def __len__(self) -> int:
        return len(self.queries)


@dataclass
class RerankingTask:
    """Queries that each rerank their own candidates; `positives[i]` index `candidates[i]`."""

    queries: list[str]
    candidates: list[list[str]]
    positives: list[list[int]]

    def __len__(self) -> int:
        return len(self.queries)


def qqp_task(pairs: PairSet, exclude_query: bool = True) -> RetrievalTask:
    """The QQP protocol (PaSeR §4.1) on labelled pairs.

    The distinct q2s are the corpus, the distinct q1s with a duplicate (score 1) the queries, their
    duplicates the positives. With `exclude_query`, a query's own text is never ranked and a pair
    of identical texts is no positive.
    """
    where = distinct(pairs.second)
    corpus = list(where)
    positives: dict[str, dict[int, None]] = {}
    for first, second, score in zip(pairs.first, pairs.second, pairs.scores, strict=True):
        if score == 1.0 and not (exclude_query and first == second):
            positives.setdefault(first, {})[where[second]] = None
    queries = list(positives)
    own = [where.get(q, -1) if exclude_query else -1 for q in queries]
    return RetrievalTask(queries, corpus, [list(positives[q]) for q in queries], own)


def askubuntu_task(data: RerankingSet) -> RerankingTask:
    """AskUbuntu reranking (PaSeR §4.1) on titles; queries with no similar candidate left out."""
    task = RerankingTask([], [], [])
    for query, candidates, similar in zip(
        data.queries, data.candidates, data.positives, strict=True
    ):
        wanted = set(similar)
        positives = [j for j, c in enumerate(candidates) if c in wanted]
        if positives:
            task.queries.append(data.titles[query])
            task.candidates.append([data.titles[c] for c in candidates])
            task.positives.append(positives)
    return task


# --- scoring -------------------------------------------------------------------------------


def _encode(
    encoder: SentenceEncoder, texts: Sequence[str], batch_size: int
) -> tuple[Embeddings, dict[str, int]]:
    """`embed` (which refuses non-finite vectors), as CSR or a dense array for row indexing."""
    vectors, index = embed(encoder, texts, batch_size)
    return (vectors.tocsr() if sp.issparse(vectors) else np.asarray(vectors)), index


def _flat_positives(positives: list[list[int]]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Row and column of every positive, and where each query's positives start."""
    sizes = np.fromiter((len(p) for p in positives), dtype=np.int64, count=len(positives))
    offsets = np.concatenate([[0], np.cumsum(sizes)])
    rows = np.repeat(np.arange(len(positives), dtype=np.int64), sizes)
    cols = np.fromiter((c for p in positives for c in p), dtype=np.int64, count=int(offsets[-1]))
    return rows, cols, offsets


def score_retrieval(
    task: RetrievalTask,
    encoder: SentenceEncoder,
    batch_size: int = 128,
    k: int = 10,
    query_chunk: int = 1024,
    chunk_cells: int = 50_000_000,
) -> tuple[float, float]:
    """MAP and MRR@k (x 100) of every query ranking the whole corpus by cosine similarity.

    Texts are encoded once (queries and corpus share them); queries are scored in chunks with one
    product per chunk, dense or sparse.
    """
    if not len(task):
        raise ValueError("the retrieval task has no query")
    vectors, index = _encode(encoder, [*task.queries, *task.corpus], batch_size)
    queries = normalize(vectors[[index[q] for q in task.queries]])
    corpus_t = normalize(vectors[[index[c] for c in task.corpus]]).T
    if sp.issparse(corpus_t):
        corpus_t = corpus_t.tocsc()
    rows, cols, offsets = _flat_positives(task.positives)
    own = np.asarray(task.own, dtype=np.int64)
    step = max(1, min(query_chunk, chunk_cells // max(1, len(task.corpus))))
    ap_sum = rr_sum = 0.0
    for start in range(0, len(task), step):
        stop = min(start + step, len(task))
        sim = queries[start:stop] @ corpus_t
        sim = sim.toarray() if sp.issparse(sim) else np.asarray(sim)
        own_part = own[start:stop]
        has_own = np.flatnonzero(own_part >= 0)
        sim[has_own, own_part[has_own]] = -np.inf
        lo, hi = offsets[start], offsets[stop]
        ap, rr = ranking_metrics(sim, rows[lo:hi] - start, cols[lo:hi], k)
        ap_sum, rr_sum = ap_sum + ap.sum(), rr_sum + rr.sum()
    return 100.0 * ap_sum / len(task), 100.0 * rr_sum / len(task)


def score_reranking(
    task: RerankingTask, encoder: SentenceEncoder, batch_size: int = 128, k: int = 10
) -> tuple[float, float]:
    """MAP and MRR@k (x 100) of every query reranking its own candidates by cosine similarity."""
    if not len(task):
        raise ValueError("the reranking task has no query")
    texts = [*task.queries, *(c for cands in task.candidates for c in cands)]
    vectors, index = _encode(encoder, texts, batch_size)
    sizes = np.fromiter((len(c) for c in task.candidates), dtype=np.int64, count=len(task))
    query_rows = np.repeat([index[q] for q in task.queries], sizes)
    candidate_rows = [index[c] for cands in task.candidates for c in cands]
    cosine = rowwise_cosine(vectors[query_rows], vectors[candidate_rows])
    sim = np.full((len(task), int(sizes.max())), -np.inf)
    flat_rows = np.repeat(np.arange(len(task)), sizes)
    flat_cols = np.arange(len(flat_rows)) - np.repeat(np.cumsum(sizes) - sizes, sizes)
    sim[flat_rows, flat_cols] = cosine
    rows, cols, _ = _flat_positives(task.positives)
    ap, rr = ranking_metrics(sim, rows, cols, k)
    return 100.0 * float(ap.mean()), 100.0 * float(rr.mean())


# --- the suite -----------------------------------------------------------------------------


@register_suite("retrieval", config=RetrievalConfig, order=3)
class RetrievalEvaluator(Evaluator):
    """QQP retrieval, AskUbuntu reranking, and the QQP protocol on the offline duplicate-pair
    sets."""

    languages = (ENGLISH, CHINESE)
    pairs = False
    title = "Retrieval (MAP / MRR@10 x 100)"
    columns = (
        "QQP/map",
        "QQP/mrr@10",
        "AskUbuntu/map",
        "AskUbuntu/mrr@10",
        "QQP-protocol/LCQMC/map",
        "QQP-protocol/BQ/map",
        "QQP-protocol/MRPC/map",
        "avg",
    )

    def __init__(
        self, root: Path, batch_size: int = 128, config: RetrievalConfig | None = None
    ) -> None:
        super().__init__(root, batch_size)
        self.config = config or RetrievalConfig()

    def test_sentences(self) -> set[str]:
        cfg, sentences, sets = self.config, set[str](), list[PairSet]()
        if self.available("QQP"):
            sets.append(read_qqp(self.root, cfg.qqp_splits))
        if self.available("AskUbuntu"):
            sentences.update(read_askubuntu(self.root, cfg.askubuntu_split).titles.values())
        for name in filter(self.available, cfg.offline_sets):
            if name == "MRPC":
                sets.append(read_mrpc(self.root, "test")[0])
            else:
                sets.append(read_chinese(self.root, name, "test", cfg.max_pairs))
        sentences.update(sentences_of(sets))
        return sentences

    def score(self, encoders: Mapping[str, SentenceEncoder]) -> dict[str, float]:
        """Scores x 100; the `CHINESE` encoder encodes the Chinese sets, `ENGLISH` the others."""
        cfg, results = self.config, {}
        encoder = encoders[ENGLISH]
        self.skipped = {}
        if self.available("QQP"):
            task = qqp_task(read_qqp(self.root, cfg.qqp_splits), cfg.exclude_query)
            self._retrieval("QQP", task, encoder, results)
        if self.available("AskUbuntu"):
            task = askubuntu_task(read_askubuntu(self.root, cfg.askubuntu_split))
            if self._has_queries("AskUbuntu", task):
                started = time.perf_counter()
                scores = score_reranking(task, encoder, self.batch_size, cfg.mrr_k)
                self._record("AskUbuntu", scores, results, started)
        for name in cfg.offline_sets:
            if not self.available(name):
                continue
            if name == "MRPC":
                pairs, set_encoder = read_mrpc(self.root, "test")[0], encoder
            else:
                pairs = read_chinese(self.root, name, "test", cfg.max_pairs)
                set_encoder = encoders[CHINESE]
            task = qqp_task(pairs, cfg.exclude_query)
            set_encoder = for_set(set_encoder, name)
            self._retrieval(f"{PROTOCOL_PREFIX}/{name}", task, set_encoder, results)
        maps = [value for key, value in results.items() if key.endswith("/map")]
        if maps:
            results["avg"] = float(np.mean(maps))
        return results

    def _has_queries(self, name: str, task: RetrievalTask | RerankingTask) -> bool:
        if len(task):
            return True
        self.skipped[name] = "no query has a positive (duplicate) among its candidates"
        return False

    def _retrieval(
        self,
        name: str,
        task: RetrievalTask,
        encoder: SentenceEncoder,
        results: dict[str, float],
    ) -> None:
        if not self._has_queries(name, task):
            return
        started = time.perf_counter()
        cfg = self.config
        scores = score_retrieval(
            task, encoder, self.batch_size, cfg.mrr_k, cfg.query_chunk, cfg.chunk_cells
        )
        self._record(name, scores, results, started)

    def _record(
        self, name: str, scores: tuple[float, float], results: dict[str, float], started: float
    ) -> None:
        results[f"{name}/map"], results[f"{name}/mrr@{self.config.mrr_k}"] = scores
        log.info(
            "%s: MAP %.2f, MRR@%d %.2f (%.1f s)",
            name,
            scores[0],
            self.config.mrr_k,
            scores[1],
            time.perf_counter() - started,
        )
