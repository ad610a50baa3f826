"""SentEval transfer tasks: logistic regression on frozen embeddings, accuracy x 100.

The protocol is SentEval's (Conneau & Kiela, "SentEval: An Evaluation Toolkit for Universal
Sentence Representations", LREC 2018) with its scikit-learn classifier (``usepytorch=False``):
an L2-regularised `LogisticRegression` on the unscaled sentence vectors, its inverse strength C
picked from a grid, as in `senteval/tools/validation.py`:

- MR, CR, SUBJ, MPQA (one labelled set): nested cross-validation. The outer `kfold` stratified
  folds give the test accuracies, which are averaged; in each outer training fold, an inner
  `inner_kfold` CV over the grid `regs` (2^-2 .. 2^3) picks C (`InnerKFoldClassifier`).
- TREC, MRPC (train and test): C by `kfold` CV on train over the grid `kfold_regs` (2^-1 .. 2^5),
  refit on all of train, accuracy on test (`KFoldClassifier`). MRPC also reports the F1 of the
  paraphrase class. Its features are ``[u, v, |u - v|, u * v]`` by default
  (`mrpc_features: full`); `mrpc_features: senteval` gives ``[|u - v|, u * v]``, what SentEval's
  own `senteval/mrpc.py` uses.
- SST2 (train, dev and test): C over `regs` by dev accuracy, the model trained on train alone
  scored on test (`SplitClassifier`).

Samples are put in SentEval's order (by token count, then label) before folds are drawn, so that
with the default seed the stratified folds are SentEval's own; a blank line of MR, CR, SUBJ or
MPQA counts as 0 tokens and is embedded as ".". Two deliberate differences from the 2018 code:
today's scikit-learn solver (lbfgs, multinomial for TREC) replaces liblinear's one-vs-rest, and
`max_iter` is raised from 100. `"<task>/dev"` is the selection score: the mean CV, or the dev,
accuracy of the chosen C.

Each CV fold's C grid is one job on one thread; a task's jobs go to `n_jobs` workers at once,
then the refits at the chosen C. Three defaults bring lbfgs nearer the same optimum in fewer
steps, each judged against the protocol's noise (docs/protocol.md, "The transfer suite's
noise"): `center: true` subtracts the fitted rows' mean from dense vectors (the same
regression: the intercept is not penalised), `warm_start: true` fits each fold's grid as a
path along increasing C, and `tol: 1e-5`. `warm_start: false`, `center: false` and
`tol: 1e-4` give `GridSearchCV` inside `cross_validate` bit for bit.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import numpy as np
import scipy.sparse as sp
from sklearn.metrics import f1_score

from sentemb.data.readers import read_binary, read_mrpc, read_sst2, read_trec
from sentemb.evaluation.base import (
    ENGLISH,
    Embeddings,
    Evaluator,
    SentenceEncoder,
    embed,
    pair_features,
)
from sentemb.evaluation.classify import (
    BINARY_TASKS,
    TRANSFER_TASKS,
    TransferConfig,
    cv_select,
    dev_select,
    nested_cv,
)
from sentemb.registry import register_suite

logger = logging.getLogger(__name__)

def _take(vectors: Embeddings, row: dict[str, int], sentences: Sequence[str]) -> Embeddings:
    """The rows of `sentences` (dense, or CSR for sparse encoders so rows can be indexed)."""
    index = np.fromiter((row[s] for s in sentences), dtype=np.intp, count=len(sentences))
    return vectors.tocsr()[index] if sp.issparse(vectors) else np.asarray(vectors)[index]


def _senteval_order(keys: Sequence[tuple[int, ...]]) -> list[int]:
    """A stable sort by `keys` (token counts, then label): the order SentEval embeds in."""
    return sorted(range(len(keys)), key=keys.__getitem__)


def _ntokens(sentence: str) -> int:
    return len(sentence.split())


@register_suite("transfer", config=TransferConfig, order=1)
class TransferEvaluator(Evaluator):
    """The seven SentEval transfer tasks (Conneau & Kiela, LREC 2018) with logistic regression.

    Returns accuracy x 100 per task (``MR``, ``CR``, ``SUBJ``, ``MPQA``, ``SST2``, ``TREC``,
    ``MRPC``), ``MRPC/f1``, the selection score ``<task>/dev`` and ``avg``, the mean accuracy of
    the tasks that ran. A task whose files are missing is skipped and its reason is recorded in
    `skipped`; ``avg`` is absent only when no task ran.
    """

    languages = (ENGLISH,)
    pairs = False
    title = "Transfer (SentEval accuracy)"
    columns = ("MR", "CR", "SUBJ", "MPQA", "SST2", "TREC", "MRPC", "avg")

    def __init__(
        self, root: Path, batch_size: int = 128, config: TransferConfig | None = None
    ) -> None:
        super().__init__(root, batch_size)
        self.config = config or TransferConfig()

    def score(self, encoders: Mapping[str, SentenceEncoder]) -> dict[str, float]:
        encoder = encoders[ENGLISH]
        runners: dict[str, Callable[[SentenceEncoder, str], dict[str, float]]] = {
            **dict.fromkeys(BINARY_TASKS, self._binary),
            "SST2": self._sst2,
            "TREC": self._trec,
            "MRPC": self._mrpc,
        }
        results: dict[str, float] = {}
        for task in self.config.tasks:
            if self.available(task):
                results.update(runners[task](encoder, task))
                logger.info("%s: %.2f (dev %.2f)", task, results[task], results[f"{task}/dev"])
        accuracies = [results[task] for task in TRANSFER_TASKS if task in results]
        if accuracies:
            results["avg"] = float(np.mean(accuracies))
        return results

    def test_sentences(self) -> set[str]:
        """MR, CR, SUBJ and MPQA: every sentence (each is tested in one fold); the others'
        test splits."""
        sentences: set[str] = set()
        for task in filter(self.available, self.config.tasks):
            if task in BINARY_TASKS:
                sentences.update(read_binary(self.root, task).sentences)
            elif task == "SST2":
                sentences.update(read_sst2(self.root, "test").sentences)
            elif task == "TREC":
                sentences.update(read_trec(self.root, "test").sentences)
            else:
                pairs = read_mrpc(self.root, "test")[0]
                sentences.update((*pairs.first, *pairs.second))
        return sentences

    def _binary(self, encoder: SentenceEncoder, task: str) -> dict[str, float]:
        data = read_binary(self.root, task)
        # SentEval gives SUBJ's objective file label 1; read_binary gives it label 0
        flip = task == "SUBJ"
        order = _senteval_order(
            [
                (_ntokens(s), 1 - y if flip else y)
                for s, y in zip(data.sentences, data.labels, strict=True)
            ]
        )
        # ordered by the raw line (a blank one is 0 tokens), embedded with SentEval's "." for ""
        sentences = [data.sentences[i] or "." for i in order]
        labels = np.asarray([data.labels[i] for i in order])
        vectors, row = embed(encoder, sentences, self.batch_size)
        result = nested_cv(_take(vectors, row, sentences), labels, self.config, task)
        return {task: result.test, f"{task}/dev": result.dev}

    def _sst2(self, encoder: SentenceEncoder, task: str) -> dict[str, float]:
        splits = {split: read_sst2(self.root, split) for split in ("train", "dev", "test")}
        vectors, row = embed(
            encoder, [s for data in splits.values() for s in data.sentences], self.batch_size
        )
        X = {split: _take(vectors, row, data.sentences) for split, data in splits.items()}
        y = {split: np.asarray(data.labels) for split, data in splits.items()}
        model, dev = dev_select(X["train"], y["train"], X["dev"], y["dev"], self.config)
        return {task: 100.0 * float(model.score(X["test"], y["test"])), f"{task}/dev": dev}

    def _trec(self, encoder: SentenceEncoder, task: str) -> dict[str, float]:
        train, test = read_trec(self.root, "train"), read_trec(self.root, "test")
        order = _senteval_order(
            [(_ntokens(s), y) for s, y in zip(train.sentences, train.labels, strict=True)]
        )
        train_sentences = [train.sentences[i] for i in order]
        y_train = np.asarray([train.labels[i] for i in order])
        vectors, row = embed(encoder, train_sentences + test.sentences, self.batch_size)
        model, dev = cv_select(_take(vectors, row, train_sentences), y_train, self.config, task)
        test_accuracy = model.score(_take(vectors, row, test.sentences), np.asarray(test.labels))
        return {task: 100.0 * float(test_accuracy), f"{task}/dev": dev}

    def _mrpc(self, encoder: SentenceEncoder, task: str) -> dict[str, float]:
        (train, y_train), (test, y_test) = (
            read_mrpc(self.root, "train"),
            read_mrpc(self.root, "test"),
        )
        order = _senteval_order(
            [
                (_ntokens(a), _ntokens(b), y)
                for a, b, y in zip(train.first, train.second, y_train, strict=True)
            ]
        )
        first, second = [train.first[i] for i in order], [train.second[i] for i in order]
        sentences = first + second + test.first + test.second
        vectors, row = embed(encoder, sentences, self.batch_size)

        def features(a: Sequence[str], b: Sequence[str]) -> Embeddings:
            u, v = _take(vectors, row, a), _take(vectors, row, b)
            features = pair_features(u, v)
            return (
                features if self.config.mrpc_features == "full" else features[:, 2 * u.shape[1] :]
            )

        y_train_sorted = np.asarray([y_train[i] for i in order])
        model, dev = cv_select(features(first, second), y_train_sorted, self.config, task)
        predicted = model.predict(features(test.first, test.second))
        gold = np.asarray(y_test)
        return {
            task: 100.0 * float(np.mean(predicted == gold)),
            f"{task}/f1": 100.0 * float(f1_score(gold, predicted)),
            f"{task}/dev": dev,
        }
