"""The user's test sets (`eval.own`): one implementation with the built-in suites, the metrics
of sentence-transformers' evaluators, and one error naming file, line and column per bad row."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from sentemb.config import ConfigError, section
from sentemb.data.readers import DataFormatError, read_stsb
from sentemb.evaluation.own import (
    OwnConfig,
    OwnEvaluator,
    read_beir,
    read_reranking,
    read_sts_pairs,
    reranking_items,
    retrieval_items,
)
from sentemb.evaluation.sts import STSConfig, STSEvaluator

from support.encoders import HashEncoder


class AsSentenceTransformer:
    """`encoder` as sentence-transformers' evaluators call a model."""

    def __init__(self, encoder) -> None:
        self.encoder = encoder
        self.similarity_fn_name = "cosine"

    def encode(self, sentences, **kwargs) -> torch.Tensor:
        return torch.from_numpy(self.encoder.encode(list(sentences)))

    encode_query = encode_document = encode


def test_own_sts_file_of_stsb_test_scores_what_the_builtin_task_scores(
    mirror: Path, tmp_path: Path
) -> None:
    test = read_stsb(mirror, "test")
    own = tmp_path / "data/own/stsb.tsv"
    own.parent.mkdir(parents=True)
    rows = zip(test.first, test.second, test.scores, strict=True)
    own.write_text(
        "sentence1\tsentence2\tscore\n" + "".join(f"{a}\t{b}\t{y}\n" for a, b, y in rows)
    )
    encoder = HashEncoder()
    builtin = STSEvaluator(mirror, config=STSConfig(tasks=["STSBenchmark"]))(encoder)
    config = section(
        {"own": [{"name": "b", "kind": "sts", "path": "data/own/stsb.tsv"}]}, "own", OwnConfig
    )
    scores = OwnEvaluator(mirror, config=config, repo=tmp_path)(encoder)
    assert scores["b"] == pytest.approx(builtin["STSBenchmark"], abs=0.01)


def test_reranking_metrics_are_sentence_transformers(tmp_path: Path) -> None:
    from sentence_transformers.sentence_transformer.evaluation import RerankingEvaluator

    rng = np.random.default_rng(0)
    rows = [
        {
            "query": f"q{i}",
            "positive": [f"p{i}.{j}" for j in range(rng.integers(1, 4))],
            "negative": [f"n{i}.{j}" for j in range(rng.integers(1, 15))],
        }
        for i in range(20)
    ]
    path = tmp_path / "r.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    encoder = HashEncoder()
    items = reranking_items(read_reranking(path, "eval.own[0].path"), encoder, 8)
    theirs = RerankingEvaluator(rows, at_k=10, write_csv=False).compute_metrics(
        AsSentenceTransformer(encoder)
    )
    assert items["map"].mean() == pytest.approx(theirs["map"], abs=1e-9)
    assert items["mrr@10"].mean() == pytest.approx(theirs["mrr"], abs=1e-9)


@pytest.mark.parametrize("size", [150, 6])  # 6: fewer documents than the cut-offs
def test_retrieval_metrics_are_sentence_transformers(tmp_path: Path, size: int) -> None:
    from sentence_transformers.sentence_transformer.evaluation import (
        InformationRetrievalEvaluator,
    )
    from sentence_transformers.util import cos_sim

    rng = np.random.default_rng(1)
    documents = {f"d{i}": f"document {i}" for i in range(size)}
    queries = {f"q{i}": f"query {i}" for i in range(12)}
    relevant = {
        q: {f"d{j}" for j in rng.choice(size, rng.integers(1, 5), replace=False)}
        for q in list(queries)[:10]
    }
    folder = tmp_path / "beir"
    (folder / "qrels").mkdir(parents=True)
    (folder / "corpus.jsonl").write_text(
        "".join(json.dumps({"_id": k, "title": "", "text": v}) + "\n" for k, v in documents.items())
    )
    (folder / "queries.jsonl").write_text(
        "".join(json.dumps({"_id": k, "text": v}) + "\n" for k, v in queries.items())
    )
    qrels = "".join(f"{q}\t{d}\t1\n" for q, ds in relevant.items() for d in sorted(ds))
    (folder / "qrels/test.tsv").write_text("query-id\tcorpus-id\tscore\n" + qrels)
    encoder = HashEncoder()
    items = retrieval_items(read_beir(folder, "test", "eval.own[0].path"), encoder, 16)
    theirs = InformationRetrievalEvaluator(
        queries,
        documents,
        relevant,
        mrr_at_k=[10],
        ndcg_at_k=[10],
        precision_recall_at_k=[100],
        accuracy_at_k=[1],
        map_at_k=[10],
        write_csv=False,
        score_functions={"cosine": cos_sim},
    ).compute_all_metrics(AsSentenceTransformer(encoder))
    scores = theirs["cosine"]
    assert items["ndcg@10"].mean() == pytest.approx(scores["ndcg@k"][10], abs=1e-9)
    assert items["mrr@10"].mean() == pytest.approx(scores["mrr@k"][10], abs=1e-9)
    assert items["recall@100"].mean() == pytest.approx(scores["recall@k"][100], abs=1e-9)


@pytest.mark.parametrize(
    ("name", "data", "message"),
    [
        (
            "s.tsv",
            "sentence1\tsentence2\n",
            r"s\.tsv:1: column 'score' \(eval\.own\[0\]\.path\) is not among",
        ),
        (
            "s.tsv",
            "sentence1\tsentence2\tscore\na\tb\tmuch\n",
            r"s\.tsv:2: score 'much' is no finite",
        ),
        ("s.tsv", "sentence1\tsentence2\tscore\na\t \t1\n", r"s\.tsv:2: sentence2 is blank"),
        (
            "s.jsonl",
            '{"sentence1": "a", "sentence2": "b", "score": null}\n',
            r"s\.jsonl:1: score None",
        ),
    ],
)
def test_a_bad_sts_row_names_file_line_and_column(
    tmp_path: Path, name: str, data: str, message: str
) -> None:
    (tmp_path / "data/own").mkdir(parents=True)
    (tmp_path / "data/own" / name).write_text(data)
    config = section(
        {"own": [{"name": "x", "kind": "sts", "path": f"data/own/{name}"}]}, "own", OwnConfig
    )
    with pytest.raises(DataFormatError, match=message):
        OwnEvaluator(tmp_path, config=config, repo=tmp_path)(HashEncoder())


@pytest.mark.parametrize(
    ("entries", "message"),
    [
        (
            [{"name": "a", "kind": "sts", "path": "x.tsv"}],
            r"own\[0\]\.path: 'x\.tsv' is not under data/own/",
        ),
        (
            [{"name": "a b", "kind": "sts", "path": "data/own/x.tsv"}],
            r"own\[0\]\.name: 'a b' is no name",
        ),
        (
            [{"name": "a", "kind": "nli", "path": "data/own/x.tsv"}],
            r"own\[0\]\.kind: 'nli' is not one of",
        ),
        (
            [{"name": "a", "kind": "sts", "path": "data/own/../../x"}],
            r"own\[0\]\.path: .* not under",
        ),
        (
            [{"name": "a", "kind": "sts", "path": f"data/own/{x}"} for x in "xy"],
            r"own\.sets: the name 'a' is given twice",
        ),
    ],
)
def test_a_bad_entry_names_its_param(entries: list, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        section({"own": entries}, "own", OwnConfig)


def test_a_qrel_naming_no_document_names_its_line(tmp_path: Path) -> None:
    folder = tmp_path
    (folder / "qrels").mkdir()
    (folder / "corpus.jsonl").write_text('{"_id": "d1", "text": "a"}\n')
    (folder / "queries.jsonl").write_text('{"_id": "q1", "text": "b"}\n')
    (folder / "qrels/test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td1\t1\nq1\td9\t1\n")
    with pytest.raises(DataFormatError, match=r"test\.tsv:3: corpus-id 'd9' names no document"):
        read_beir(folder, "test", "eval.own[0].path")


def test_every_key_a_metrics_file_holds_beside_scores_is_reserved() -> None:
    """A set may not be named as a refinement (its scores nest under that key), `seconds` or
    `skipped`, nor begin with one and a dot: own.py spells the refinements' names so training
    does not read their code."""
    from sentemb.evaluation.own import RESERVED
    from sentemb.registry import REFINEMENTS

    assert set(REFINEMENTS) <= set(RESERVED)
    for name in (*RESERVED, *(f"{r}.x" for r in RESERVED)):  # git's scores key `repal.<column>`
        key = name.split(".")[0]
        with pytest.raises(ConfigError, match=rf"own\[0\]\.name: '{name}': '{key}' is a key"):
            section(
                {"own": [{"name": name, "kind": "sts", "path": "data/own/a.tsv"}]}, "own", OwnConfig
            )
    assert section(
        {"own": [{"name": "repalx", "kind": "sts", "path": "data/own/a.tsv"}]}, "own", OwnConfig
    )


@pytest.mark.parametrize(
    ("read", "missing"),
    [
        (read_sts_pairs, "none.tsv"),
        (read_reranking, "none.jsonl"),
        (lambda path, param: read_beir(path, "test", param), "none/corpus.jsonl"),
    ],
    ids=["sts", "reranking", "retrieval"],
)
def test_a_missing_file_names_its_param(tmp_path: Path, read: Any, missing: str) -> None:
    path = tmp_path / missing.split("/")[0]
    with pytest.raises(
        DataFormatError, match=rf"{missing}: file not found \(eval\.own\[1\]\.path\)"
    ):
        read(path, "eval.own[1].path")


def beir_folder(folder: Path, documents: dict[str, dict], queries: dict[str, str]) -> Path:
    """A BEIR folder: every query relevant to the first document."""
    (folder / "qrels").mkdir(parents=True)
    (folder / "corpus.jsonl").write_text(
        "".join(json.dumps({"_id": k} | v) + "\n" for k, v in documents.items())
    )
    (folder / "queries.jsonl").write_text(
        "".join(json.dumps({"_id": k, "text": v}) + "\n" for k, v in queries.items())
    )
    first = next(iter(documents))
    qrels = "".join(f"{q}\t{first}\t1\n" for q in queries)
    (folder / "qrels/test.tsv").write_text("query-id\tcorpus-id\tscore\n" + qrels)
    return folder


def test_tfidf_scores_reranking_and_retrieval_sets(tmp_path: Path) -> None:
    """The TF-IDF reference row's vectors are sparse: its cosines are the dense ones'."""
    from sentemb.tfidf import TfidfEncoder

    path = tmp_path / "r.jsonl"
    sample = {"query": "red apples", "positive": ["apples are red"], "negative": ["blue sky"]}
    path.write_text(json.dumps(sample) + "\n")
    tfidf = TfidfEncoder("en")
    reranking = reranking_items(read_reranking(path, "eval.own[0].path"), tfidf, 8)
    assert reranking["map"].tolist() == [1.0] and reranking["mrr@10"].tolist() == [1.0]
    documents = {"d1": {"text": "apples are red"}, "d2": {"text": "the sky is blue"}}
    folder = beir_folder(tmp_path / "beir", documents, {"q1": "red apples"})
    retrieval = retrieval_items(read_beir(folder, "test", "eval.own[0].path"), tfidf, 8)
    assert retrieval["ndcg@10"].tolist() == [1.0]


def test_a_beir_title_is_read_before_its_text(tmp_path: Path) -> None:
    documents = {"d1": {"title": "Photosynthesis", "text": "a process"}, "d2": {"text": "b"}}
    folder = beir_folder(tmp_path, documents, {"q1": "x"})
    read = read_beir(folder, "test", "eval.own[0].path")
    assert read.documents == {"d1": "Photosynthesis a process", "d2": "b"}


def test_an_sts_file_of_equal_scores_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "s.tsv"
    path.write_text("sentence1\tsentence2\tscore\n" + "a\tb\t3\n" * 4)
    with pytest.raises(DataFormatError, match=r"s\.tsv: every score is 3; a rank correlation"):
        read_sts_pairs(path, "eval.own[0].path")


def test_a_retrieval_set_takes_no_dev() -> None:
    entry = {"name": "p", "kind": "retrieval", "path": "data/own/p", "dev": "data/own/q"}
    with pytest.raises(ConfigError, match=r"own\[0\]\.dev: a retrieval set is not selected on"):
        section({"own": [entry]}, "own", OwnConfig)
