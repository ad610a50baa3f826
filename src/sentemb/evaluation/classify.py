"""The transfer suite's params and SentEval's classifiers (`senteval/tools/validation.py`): an
L2-regularised logistic regression whose C is picked by nested cross-validation
(`nested_cv`: MR, CR, SUBJ, MPQA), by CV on the train split (`cv_select`: TREC, MRPC) or on the
dev split (`dev_select`: SST2). The protocol, and how its defaults fit faster: the module
docstring of `sentemb.evaluation.transfer`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Annotated, Literal, NamedTuple

import numpy as np
import scipy.sparse as sp
from joblib import Parallel, cpu_count, delayed
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import StratifiedKFold
from sklearn.pipeline import Pipeline, make_pipeline
from sklearn.preprocessing import StandardScaler
from threadpoolctl import threadpool_limits

from sentemb.config import ConfigError, Count, Positive, Range, Seed, choice_problems
from sentemb.data.sources import TRANSFER_FILES
from sentemb.evaluation.base import Embeddings

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


