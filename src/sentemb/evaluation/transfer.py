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
with the default seed the stratified folds are SentEval's own. As in SentEval, a blank line of
MR, CR, SUBJ or MPQA counts as 0 tokens in that order and is embedded as ".". Two deliberate
differences from the 2018 code: today's scikit-learn default solver (lbfgs, multinomial for TREC)
replaces the liblinear one-vs-rest of scikit-learn 0.19 (liblinear no longer fits more than two
classes), and `max_iter` is raised from 100 because lbfgs needs more on uncentred vectors at a
large C; centred, it needs several times fewer (below; the iterations: docs/protocol.md).
`"<task>/dev"` is the selection score: the mean CV, or the dev, accuracy of the chosen C.

Each CV fold's C grid is one job, fitted on one thread; a task's jobs go to `n_jobs` workers in
one `Parallel` call (for MR, CR, SUBJ and MPQA every outer x inner fold at once), then the refits
at the chosen C in a second. Three defaults bring lbfgs nearer the same optimum in
fewer steps; none is bit-identical to the cold fits, since lbfgs stops within its tolerance at
another point near the optimum, and a few predictions near the boundary, and near-ties between
two C values, go the other way. Each is judged by the protocol's own noise against the exact
optimum (docs/protocol.md; `benchmarks/transfer.py`):

- `center: true`: dense vectors pass a step that subtracts the mean of the rows the model is
  fitted on (`StandardScaler(with_std=False)`; the scored rows are shifted by the same mean). The
  intercept is not penalised, so this is the same regression: the optimum keeps its weights w, its
  intercept becomes b + w.mu, its predictions stay. Sentence vectors lie far from the origin,
  which leaves lbfgs an ill-conditioned problem, and centring it takes several times fewer
  iterations. Sparse vectors (TF-IDF) are left as they are: centring would make them dense.
- `warm_start: true`: each fold's grid is fitted as a regularisation path along increasing C,
  each fit starting from the previous C's solution (as scikit-learn's `LogisticRegressionCV`).
- `tol: 1e-5` (scikit-learn's default is 1e-4): lbfgs stops when no gradient entry exceeds it.
  At 1e-4 a warm-started fit at a large C stops at once, since the penalty's gradient there is
  below the tolerance, so the path keeps the smaller C's solution.

`warm_start: false`, `center: false` and `tol: 1e-4` fit each C cold on the vectors as they are:
the results of `GridSearchCV` inside `cross_validate` bit for bit. On float32 vectors
scikit-learn's lbfgs computes in float32 (the input's dtype; the centring step keeps it).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Literal, NamedTuple

import numpy as np
import scipy.sparse as sp
from joblib import Parallel, cpu_count, delayed
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import f1_score
from sklearn.model_selection import StratifiedKFold
from sklearn.pipeline import Pipeline, make_pipeline
from sklearn.preprocessing import StandardScaler
from threadpoolctl import threadpool_limits

from sentemb.config import ConfigError, Count, Positive, Range, Seed, choice_problems
from sentemb.data.readers import read_binary, read_mrpc, read_sst2, read_trec
from sentemb.data.sources import TRANSFER_FILES
from sentemb.evaluation.base import (
    ENGLISH,
    Embeddings,
    Evaluator,
    SentenceEncoder,
    embed,
    pair_features,
)
from sentemb.registry import register_suite

logger = logging.getLogger(__name__)

TRANSFER_TASKS = tuple(TRANSFER_FILES)  # MR, CR, SUBJ, MPQA, SST2, TREC, MRPC
BINARY_TASKS = ("MR", "CR", "SUBJ", "MPQA")
SOLVERS = ("lbfgs", "newton-cg", "newton-cholesky", "sag", "saga")


Folds = Annotated[int, Range(2)]  # cross-validation needs two folds


@dataclass
class TransferConfig:
    """Params section `eval.transfer`; the defaults are SentEval's with ``kfold: 10``, but for
    warm-started C paths (``warm_start``), centred vectors (``center``) and lbfgs tolerance
    (``tol``)."""

    kfold: Folds = 10  # outer folds of MR/CR/SUBJ/MPQA; CV folds on TREC's and MRPC's train
    inner_kfold: Folds = 10  # folds that pick C inside each outer fold (SentEval: same as kfold)
    regs: list[Positive] = field(default_factory=lambda: [2.0**t for t in range(-2, 4)])
    kfold_regs: list[Positive] = field(default_factory=lambda: [2.0**t for t in range(-1, 6)])
    seed: Seed = 1111  # folds and classifier
    n_jobs: Count = 2  # fits run side by side, each on one thread; at most one per core
    solver: str = "lbfgs"
    max_iter: Count = 1000
    # lbfgs stops when no gradient entry exceeds it (scikit-learn: 1e-4); a looser one stops
    # it far from the fit (docs/protocol.md), so at most 10x scikit-learn's
    tol: Annotated[float, Range(0, 1e-3, open_low=True, why="10x scikit-learn's 1e-4")] = 1e-5
    tasks: list[str] = field(default_factory=lambda: list(TRANSFER_TASKS))
    mrpc_features: Literal["full", "senteval"] = "full"  # [u, v, |u-v|, u*v] | [|u-v|, u*v]
    warm_start: bool = True  # each fold's C grid as a warm-started path; false: cold fits
    center: bool = True  # dense vectors centred on the training rows' mean; false: as they are

    @property
    def jobs(self) -> int:
        """`n_jobs`, at most the cores this process may use (its CPU affinity and quota, as
        joblib counts them): more fits at once would only share them."""
        return min(self.n_jobs, cpu_count())

    def validate(self) -> list[str]:
        problems = [
            f"{name}: must be a non-empty list of C > 0, got {grid}"
            for name in ("regs", "kfold_regs")
            if not (grid := getattr(self, name))
        ]
        if self.solver not in SOLVERS:
            problems.append(f"solver: {self.solver!r} is not one of {list(SOLVERS)}")
        return problems + choice_problems("tasks", self.tasks, TRANSFER_TASKS)


class NestedCVResult(NamedTuple):
    """Mean inner-CV accuracy of the chosen C, mean outer test accuracy (x 100), C per fold."""

    dev: float
    test: float
    chosen: list[float]


Classifier = LogisticRegression | Pipeline  # the regression, or it behind the centring step


def centres(X: Embeddings, config: TransferConfig) -> bool:
    """Whether `X` is centred before its regression: `center`, on dense vectors only."""
    return config.center and not sp.issparse(X)


def logistic_regression(
    config: TransferConfig, C: float = 1.0, warm_start: bool = False, centre: bool = True
) -> Classifier:
    """SentEval's classifier: L2 logistic regression with a fixed `random_state`; with `center`
    and `centre`, behind a step that subtracts the training rows' mean."""
    model = LogisticRegression(
        C=C,
        solver=config.solver,
        max_iter=config.max_iter,
        tol=config.tol,
        random_state=config.seed,
        warm_start=warm_start,
    )
    if config.center and centre:
        return make_pipeline(StandardScaler(with_std=False), model)
    return model


def _folds(k: int, config: TransferConfig) -> StratifiedKFold:
    return StratifiedKFold(n_splits=k, shuffle=True, random_state=config.seed)


def _check_folds(k: int, y: np.ndarray, param: str, task: str) -> None:
    """More folds than the smallest class of `y` has examples is an error naming `param`: each
    stratified fold needs an example of every class."""
    smallest = int(np.unique(y, return_counts=True)[1].min())
    if k > smallest:
        raise ConfigError(
            f"eval.transfer.{param}: {k} folds need {k} examples of every class, and {task}'s "
            f"smallest class has {smallest} there"
        )


def _path_scores(
    X: Embeddings,
    y: np.ndarray,
    train: np.ndarray,
    test: np.ndarray,
    regs: Sequence[float],
    config: TransferConfig,
) -> np.ndarray:
    """Accuracy on the `test` rows of a model fitted on the `train` rows at each C of `regs`,
    the fold's rows taken, and centred (`centres`) on the training rows' mean, once: what the
    centring step of `logistic_regression` would do again at every C, bit for bit. With
    `warm_start`, fitted along increasing C, each fit starting from the previous C's solution
    (the regularisation path of `LogisticRegressionCV`)."""
    X_train, y_train, X_test, y_test = X[train], y[train], X[test], y[test]
    if centres(X, config):
        centring = StandardScaler(with_std=False).fit(X_train)
        X_train, X_test = centring.transform(X_train), centring.transform(X_test)
    model = logistic_regression(config, warm_start=config.warm_start, centre=False)
    scores = np.empty(len(regs))
    with threadpool_limits(limits=1):
        for i in np.argsort(regs, kind="stable"):
            model.set_params(C=regs[i])
            scores[i] = model.fit(X_train, y_train).score(X_test, y_test)
    return scores


def _fit(
    X: Embeddings, y: np.ndarray, rows: np.ndarray | slice, C: float, config: TransferConfig
) -> Classifier:
    """A cold fit on the `rows` of `X` at `C`, on one thread."""
    with threadpool_limits(limits=1):
        return logistic_regression(config, C, centre=centres(X, config)).fit(X[rows], y[rows])


def _best(scores: Sequence[np.ndarray]) -> tuple[int, float]:
    """The grid index of the best mean accuracy over the folds (one array of C scores per fold)
    and that mean; ties go to the first C of the grid, as SentEval's `np.argmax` (and as the
    rank of `GridSearchCV`)."""
    means = np.column_stack(scores).mean(axis=1)
    best = int(np.argmax(means))
    return best, float(means[best])


def nested_cv(
    X: Embeddings, y: np.ndarray, config: TransferConfig, task: str = "the task"
) -> NestedCVResult:
    """MR, CR, SUBJ, MPQA: SentEval's `InnerKFoldClassifier`. The C grids of all outer x inner
    folds are fitted in one `Parallel` call, then each outer fold's refit at its chosen C."""
    _check_folds(config.kfold, y, "kfold", task)
    outer = list(_folds(config.kfold, config).split(X, y))
    for train, _ in outer:
        _check_folds(config.inner_kfold, y[train], "inner_kfold", task)
    inner = [
        [
            (train[tr], train[te])
            for tr, te in _folds(config.inner_kfold, config).split(train, y[train])
        ]
        for train, _ in outer
    ]
    parallel = Parallel(n_jobs=config.jobs)
    paths = parallel(
        delayed(_path_scores)(X, y, tr, te, config.regs, config)
        for folds in inner
        for tr, te in folds
    )
    k = config.inner_kfold
    picks = [_best(paths[i * k : (i + 1) * k]) for i in range(len(outer))]
    models = parallel(
        delayed(_fit)(X, y, train, config.regs[best], config)
        for (train, _), (best, _) in zip(outer, picks, strict=True)
    )
    tests = [model.score(X[test], y[test]) for model, (_, test) in zip(models, outer, strict=True)]
    return NestedCVResult(
        dev=100.0 * float(np.mean([dev for _, dev in picks])),
        test=100.0 * float(np.mean(tests)),
        chosen=[float(config.regs[best]) for best, _ in picks],
    )


def cv_select(
    X_train: Embeddings, y_train: np.ndarray, config: TransferConfig, task: str = "the task"
) -> tuple[Classifier, float]:
    """TREC, MRPC: C by `kfold` CV on train (SentEval's `KFoldClassifier`); the model refit on all
    of train and the CV accuracy x 100 of its C."""
    _check_folds(config.kfold, y_train, "kfold", task)
    folds = _folds(config.kfold, config).split(X_train, y_train)
    best, dev = _best(
        Parallel(n_jobs=config.jobs)(
            delayed(_path_scores)(X_train, y_train, train, test, config.kfold_regs, config)
            for train, test in folds
        )
    )
    model = _fit(X_train, y_train, slice(None), config.kfold_regs[best], config)
    return model, 100.0 * dev


def dev_select(
    X_train: Embeddings,
    y_train: np.ndarray,
    X_dev: Embeddings,
    y_dev: np.ndarray,
    config: TransferConfig,
) -> tuple[Classifier, float]:
    """SST2: C by dev accuracy over `regs` (SentEval's `SplitClassifier`); the model trained on
    train alone and its dev accuracy x 100. Ties go to the first C of the grid."""
    models = Parallel(n_jobs=config.jobs)(
        delayed(_fit)(X_train, y_train, slice(None), C, config) for C in config.regs
    )
    scores = [model.score(X_dev, y_dev) for model in models]
    best = int(np.argmax(scores))
    return models[best], 100.0 * float(scores[best])


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
