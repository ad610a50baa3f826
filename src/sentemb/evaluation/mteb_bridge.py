"""MTEB's side of suite `mteb`: the adapter MTEB encodes through (`SentenceModel`), what a
task class of yours builds on (`local_metadata`, `beir_split`; docs/data.md), and MTEB's results
read back (`task_metrics`, `model_card`). Imports MTEB only where called.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import scipy.sparse as sp

from sentemb.evaluation.base import SentenceEncoder
from sentemb.evaluation.own import read_beir

if TYPE_CHECKING:
    from mteb.abstasks import AbsTask
    from mteb.abstasks.task_metadata import TaskMetadata

MODEL_NAME = "sentemb/encoder"  # the model in MTEB's result files (its revision: the variant)


def local_metadata(name: str, kind: str, main_score: str, **fields: Any) -> TaskMetadata:
    """MTEB's `TaskMetadata` of a task of yours, named `name`, of MTEB's type `kind` (STS,
    Retrieval, ...) scored by `main_score`: English, test split, the fields MTEB requires
    filled with "not stated" values; `fields` override any (docs/data.md)."""
    from mteb.abstasks.task_metadata import TaskMetadata

    values: dict[str, Any] = {
        "description": f"{name}: a local task (sentemb)",
        "reference": None,
        "dataset": {"path": f"local/{name}", "revision": "local"},
        "category": "t2t",
        "eval_splits": ["test"],
        "eval_langs": ["eng-Latn"],
        "date": None,
        "dialect": [],
        "domains": [],
        "task_subtypes": [],
        "license": "not specified",
        "annotations_creators": None,
        "modalities": ["text"],
        "sample_creation": None,
        "bibtex_citation": "",
    }
    return TaskMetadata(name=name, type=kind, main_score=main_score, **(values | fields))


def beir_split(folder: Path, split: str = "test") -> dict[str, Any]:
    """A BEIR folder's split as MTEB's retrieval tasks hold one (corpus, queries, relevant
    documents), read and checked as an `eval.own` retrieval set is (`own.read_beir`): a
    document's title joined to its text, relevant: a qrel score above 0."""
    from datasets import Dataset

    found = read_beir(folder, split, f"{folder}")
    return {
        "corpus": Dataset.from_list(
            [{"id": key, "text": text, "title": ""} for key, text in found.documents.items()]
        ),
        "queries": Dataset.from_list([{"id": k, "text": t} for k, t in found.queries.items()]),
        "relevant_docs": {q: dict.fromkeys(docs, 1) for q, docs in found.relevant.items()},
        "top_ranked": None,
    }


class SentenceModel:
    """MTEB's encoder interface (`mteb.models.EncoderProtocol`) over a pipeline encoder: the
    texts of MTEB's batches, in order, encoded by `encoder.encode` (cached and checked when it
    is a `CachedEncoder`), as float32 rows; cosine similarity. Prompts are not used: the
    pipeline's models take none."""

    def __init__(self, encoder: SentenceEncoder, variant: str, batch_size: int) -> None:
        from mteb.models.model_meta import ModelMeta

        self.encoder, self.batch_size = encoder, batch_size
        self.mteb_model_meta = ModelMeta(
            loader=None,
            name=MODEL_NAME,
            revision=variant,
            release_date=None,
            languages=None,
            n_parameters=None,
            memory_usage_mb=None,
            max_tokens=None,
            embed_dim=None,
            license=None,
            open_weights=None,
            public_training_code=None,
            public_training_data=None,
            framework=["PyTorch"],
            similarity_fn_name="cosine",
            use_instructions=False,
            training_datasets=None,
        )

    def encode(self, inputs: Any, *, task_metadata: Any, hf_split: str, hf_subset: str,
               prompt_type: Any = None, **kwargs: Any) -> np.ndarray:  # fmt: skip
        sentences = [text for batch in inputs for text in batch["text"]]
        rows = self.encoder.encode(sentences, self.batch_size)
        return np.asarray(rows.todense() if sp.issparse(rows) else rows, dtype=np.float32)

    def similarity(self, first: Any, second: Any) -> Any:
        from mteb.similarity_functions import cos_sim

        return cos_sim(first, second)

    def similarity_pairwise(self, first: Any, second: Any) -> Any:
        from mteb.similarity_functions import pairwise_cos_sim

        return pairwise_cos_sim(first, second)


def task_metrics(result: Any) -> dict[str, float]:
    """One MTEB `TaskResult` as metrics x 100: its main score under the task's name, and every
    numeric score MTEB reports under `<task>/<metric>`, each MTEB's mean over splits and
    subsets (`TaskResult.get_score`)."""
    name = result.task_name
    entries = [entry for split in result.scores.values() for entry in split]
    metrics = {name: 100.0 * float(result.get_score())}
    shared = set.intersection(*(set(entry) for entry in entries)) - {"main_score"}
    for metric in sorted(shared):
        values = [entry[metric] for entry in entries]
        if all(isinstance(v, int | float) and not isinstance(v, bool) for v in values):
            score = 100.0 * float(result.get_score(getter=lambda s, m=metric: s[m]))
            if math.isfinite(score):
                metrics[f"{name}/{metric}"] = score
    return metrics


def model_card(encoder: SentenceEncoder, tasks: Sequence[AbsTask], results: Any) -> bytes:
    """The model's card (its folder's README.md, where `encoder` is a model loaded from a
    folder that has one; else a card of front matter alone) with each task's main score x 100,
    per split and subset, as the Hub's cards hold evaluation results (`model-index`)."""
    from huggingface_hub import EvalResult, ModelCard

    name = str(getattr(getattr(encoder, "encoder", encoder), "name", MODEL_NAME))
    found = Path(name) / "README.md"
    card = ModelCard(found.read_text(encoding="utf-8") if found.is_file() else "---\n---\n")
    metadata = {task.metadata.name: task.metadata for task in tasks}
    card.data.model_name = name
    card.data.eval_results = [
        EvalResult(
            task_type=meta.type,
            task_name=f"MTEB {meta.name}",
            dataset_type=meta.dataset["path"],
            dataset_name=f"MTEB {meta.name}",
            dataset_config=entry["hf_subset"],
            dataset_split=split,
            dataset_revision=meta.dataset["revision"],
            metric_type=meta.main_score,
            metric_value=100.0 * float(entry["main_score"]),
        )
        for result in results.task_results
        for meta in [metadata[result.task_name]]
        for split, entries in result.scores.items()
        for entry in entries
    ]
    return str(card).encode("utf-8")


def sts_pairs(task: AbsTask, predictions: Path) -> tuple[np.ndarray, np.ndarray] | None:
    """An STS task's predicted cosine and gold score of every test pair, from MTEB's
    predictions file in the folder `predictions` and the task's data, for the paired bootstrap
    over pairs; None for another kind of task, one of several splits or subsets (its score is
    a mean of Spearmans, which a bootstrap over pooled pairs does not resample), or a
    predictions file that is missing or does not line up."""
    meta = task.metadata
    if meta.type != "STS" or meta.main_score != "cosine_spearman":
        return None
    if len(task.eval_splits) != 1 or len(task.hf_subsets) != 1:
        return None
    split, subset = task.eval_splits[0], task.hf_subsets[0]
    file = predictions / f"{meta.name}_predictions.json"
    if not file.is_file():
        return None
    found = json.loads(file.read_text())
    predicted = np.asarray(found.get(subset, {}).get(split, {}).get("cosine_scores", []), float)
    data = task.dataset.get(subset, task.dataset)
    gold = np.asarray(data[split]["score"], dtype=float)
    return (predicted, gold) if predicted.size and predicted.shape == gold.shape else None
