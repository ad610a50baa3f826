"""SentEval transfer tasks: the selection logic on hand-checkable toys, the evaluator end to end on
a small data root in the real layout, one real task from the mirror, and skipping missing data."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.feature_extraction.text import HashingVectorizer
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import GridSearchCV, cross_validate
from sklearn.pipeline import Pipeline

from sentemb.config import ConfigError, section
from sentemb.data.sources import SENTEVAL_DIR
from sentemb.evaluation import classify
from sentemb.evaluation.base import embed
from sentemb.evaluation.classify import (
    TRANSFER_TASKS,
    Classifier,
    NestedCVResult,
    TransferConfig,
    _best,
    _fit,
    _folds,
    _path_scores,
    cv_select,
    dev_select,
    logistic_regression,
    nested_cv,
)
from sentemb.evaluation.transfer import TransferEvaluator, _senteval_order

FAST = {"kfold": 3, "inner_kfold": 2, "n_jobs": 1}


def regression(model: Classifier) -> LogisticRegression:
    """The logistic regression of `model` (its C, coef_ and intercept_), centred or not."""
    return model[-1] if isinstance(model, Pipeline) else model


ACCURACY_KEYS = set(TRANSFER_TASKS)
ALL_KEYS = ACCURACY_KEYS | {f"{t}/dev" for t in TRANSFER_TASKS} | {"MRPC/f1", "avg"}


def blobs(centres: Sequence[float], per_class: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Well separated 2-d clusters, one per class, centred at (c, -c)."""
    rng = np.random.default_rng(seed)
    X = np.vstack([np.array([c, -c]) + 0.1 * rng.standard_normal((per_class, 2)) for c in centres])
    return X, np.repeat(np.arange(len(centres)), per_class)


# --- the selection logic --------------------------------------------------------------------------


def test_nested_cv_separable_data_is_perfect_and_ties_pick_the_first_c() -> None:
    X, y = blobs([-3.0, 3.0], per_class=12)
    config = TransferConfig(**FAST, regs=[0.5, 1.0, 2.0])
    result = nested_cv(X, y, config)
    assert result.test == 100.0
    assert result.dev == 100.0
    assert result.chosen == [0.5, 0.5, 0.5]  # every C is perfect: SentEval's argmax keeps the first


def test_nested_cv_gives_the_same_result_for_sparse_features() -> None:
    X, y = blobs([-1.0, 1.0], per_class=15)
    X[:, 0] += np.random.default_rng(1).standard_normal(len(y))  # overlap, so C matters
    config = TransferConfig(**FAST)
    dense, sparse = nested_cv(X, y, config), nested_cv(sp.csr_matrix(X), y, config)
    assert sparse.test == pytest.approx(dense.test)
    assert sparse.chosen == dense.chosen


@pytest.mark.parametrize("warm_start", [False, True])
def test_ties_go_to_the_first_c_of_the_grid_not_the_smallest(warm_start: bool) -> None:
    # rows: folds, columns: the grid's C values; C 1 and 2 tie on the mean accuracy 0.75
    assert _best([np.array([0.5, 0.75, 0.5]), np.array([0.5, 0.75, 1.0])]) == (1, 0.75)
    X, y = blobs([-3.0, 3.0], per_class=12)
    result = nested_cv(X, y, TransferConfig(**FAST, regs=[2.0, 0.5, 1.0], warm_start=warm_start))
    assert result.chosen == [2.0, 2.0, 2.0]  # the path runs 0.5, 1, 2; the pick is the grid's first
    model, _ = cv_select(X, y, TransferConfig(**FAST, kfold_regs=[8.0, 4.0], warm_start=warm_start))
    assert regression(model).C == 8.0


def overlapping_imbalanced() -> tuple[np.ndarray, np.ndarray]:
    """30 negatives around (-0.5, -0.5) and 10 positives around (0.5, 0.5), unit spread: the
    inner CV picks a different C in different outer folds."""
    rng = np.random.default_rng(2)
    X = np.vstack([rng.normal(-0.5, 1.0, (30, 2)), rng.normal(0.5, 1.0, (10, 2))])
    return X, np.repeat([0, 1], [30, 10])


def grid(config: TransferConfig, regs: list[float], k: int) -> GridSearchCV:
    """The protocol as scikit-learn writes it: a cold `GridSearchCV` over C (ties to the first)
    of the same classifier, centring step included, on the same folds."""
    model = logistic_regression(config)
    key = "logisticregression__C" if config.center else "C"
    return GridSearchCV(model, {key: regs}, cv=_folds(k, config))


@pytest.mark.parametrize("center", [False, True])
@pytest.mark.parametrize(("warm_start", "n_jobs"), [(False, 1), (False, 2), (True, 1)])
def test_nested_cv_equals_grid_search_in_cross_validate(
    warm_start: bool, n_jobs: int, center: bool
) -> None:
    """Each fold's C grid in one job (cold, or warm-started along C), every outer x inner fold in
    one `Parallel` call, against a cold `GridSearchCV` inside `cross_validate`. The problem is
    small enough for lbfgs to converge."""
    X, y = overlapping_imbalanced()
    config = TransferConfig(
        kfold=4,
        inner_kfold=3,
        n_jobs=n_jobs,
        regs=[0.01, 0.1, 1.0, 10.0],
        warm_start=warm_start,
        center=center,
    )
    search = grid(config, config.regs, config.inner_kfold)
    reference = cross_validate(search, X, y, cv=_folds(config.kfold, config), return_estimator=True)
    result = nested_cv(X, y, config)
    assert result.chosen == [0.01, 10.0, 0.01, 10.0]  # C matters here
    assert result.chosen == [regression(e.best_estimator_).C for e in reference["estimator"]]
    assert result.test == 100.0 * np.mean(reference["test_score"]) == 67.5
    assert result.dev == 100.0 * np.mean([est.best_score_ for est in reference["estimator"]])


@pytest.mark.parametrize("center", [False, True])
@pytest.mark.parametrize("warm_start", [False, True])
def test_cv_select_equals_grid_search(warm_start: bool, center: bool) -> None:
    X, y = overlapping_imbalanced()
    regs = [0.01, 0.1, 1.0, 10.0]
    config = TransferConfig(
        kfold=4, n_jobs=1, kfold_regs=regs, warm_start=warm_start, center=center
    )
    search = grid(config, regs, config.kfold).fit(X, y)
    model, dev = cv_select(X, y, config)
    best = regression(search.best_estimator_)
    assert (regression(model).C, dev) == (best.C, 100.0 * search.best_score_)
    assert np.array_equal(regression(model).coef_, best.coef_)  # the same cold refit


def test_centring_gives_the_same_regression_in_fewer_iterations() -> None:
    """The intercept is not penalised, so shifting every vector by -mu moves only the intercept:
    the optimum keeps its weights w, its intercept becomes b + w.mu, its predictions stay. On
    vectors far from the origin (as sentence embeddings are) lbfgs gets there in fewer steps."""
    X, y = overlapping_imbalanced()
    X = X + np.array([40.0, -25.0])
    config = TransferConfig(max_iter=100_000)
    plain, centred = logistic_regression(replace(config, center=False)), logistic_regression(config)
    for model in (plain, centred):
        regression(model).set_params(tol=1e-12)
        model.fit(X, y)
    w, b = plain.coef_, plain.intercept_
    assert regression(centred).coef_ == pytest.approx(w, abs=1e-6)
    assert regression(centred).intercept_ == pytest.approx(b + w @ X.mean(axis=0), abs=1e-6)
    assert np.array_equal(centred.predict(X), plain.predict(X))
    default = (logistic_regression(m) for m in (replace(config, center=False), config))
    steps = [regression(model.fit(X, y)).n_iter_[0] for model in default]
    assert steps[1] < steps[0]


@pytest.mark.parametrize("sparse", [False, True])
@pytest.mark.parametrize("warm_start", [False, True])
@pytest.mark.parametrize("center", [False, True])
def test_a_path_centres_once_as_the_centring_step_would_at_every_c(
    monkeypatch: pytest.MonkeyPatch, center: bool, warm_start: bool, sparse: bool
) -> None:
    """A fold's C path centres its rows once; the pipeline of `logistic_regression`, refitted at
    each C, gives the same fits (weights, intercept) and accuracies, bit for bit."""
    fits: list[bytes] = []
    score = LogisticRegression.score

    def recorded(self: LogisticRegression, *args: object) -> float:
        fits.append(self.coef_.tobytes() + self.intercept_.tobytes())
        return score(self, *args)

    monkeypatch.setattr(LogisticRegression, "score", recorded)
    X, y = overlapping_imbalanced()
    X = X + np.array([40.0, -25.0])
    X = sp.csr_matrix(X) if sparse else X
    train, test = np.arange(0, 40, 2), np.arange(1, 40, 2)
    regs = [1.0, 0.01, 10.0, 0.1]
    config = TransferConfig(center=center, warm_start=warm_start)
    model = logistic_regression(config, warm_start=warm_start, centre=not sparse)
    expected = np.empty(len(regs))
    for i in np.argsort(regs, kind="stable"):
        regression(model).set_params(C=regs[i])
        expected[i] = model.fit(X[train], y[train]).score(X[test], y[test])
    pipeline_fits, fits[:] = fits[:], []
    assert _path_scores(X, y, train, test, regs, config).tobytes() == expected.tobytes()
    assert fits == pipeline_fits and len(set(fits)) == len(regs)


def test_the_centring_step_takes_the_training_rows_mean_and_skips_sparse_vectors() -> None:
    """Only the rows a model is fitted on give the mean; a sparse matrix (TF-IDF's) would turn
    dense, so it goes to the regression as it is."""
    X, y = overlapping_imbalanced()
    rows = np.arange(0, 40, 2)
    fitted = _fit(X, y, rows, 1.0, TransferConfig())
    assert isinstance(fitted, Pipeline)
    assert fitted[0].mean_ == pytest.approx(X[rows].mean(axis=0))
    assert isinstance(_fit(sp.csr_matrix(X), y, rows, 1.0, TransferConfig()), LogisticRegression)


def test_two_workers_give_the_fits_of_one_bit_for_bit() -> None:
    """The jobs' results come back in submission order: each outer fold's inner folds and refit
    line up whichever worker ran them, so n_jobs changes nothing, dev and test included."""
    X, y = overlapping_imbalanced()
    X_dev, y_dev = X[::3], y[::3]
    serial, parallel = (
        TransferConfig(kfold=4, inner_kfold=3, n_jobs=n, regs=[0.01, 0.1, 1.0, 10.0])
        for n in (1, 2)
    )
    assert nested_cv(X, y, parallel) == nested_cv(X, y, serial)
    for select, args in ((cv_select, (X, y)), (dev_select, (X, y, X_dev, y_dev))):
        (one, dev_one), (two, dev_two) = select(*args, serial), select(*args, parallel)
        assert dev_two == dev_one
        two, one = regression(two), regression(one)
        assert (two.C, two.coef_.tobytes()) == (one.C, one.coef_.tobytes())


def test_cv_select_refits_the_first_best_c_on_all_of_train() -> None:
    X, y = blobs([-4.0, 0.0, 4.0], per_class=9)
    model, dev = cv_select(X, y, TransferConfig(**FAST, kfold_regs=[4.0, 8.0]))
    assert (dev, regression(model).C) == (100.0, 4.0)
    assert model.score(X, y) == 1.0
    assert sorted(model.classes_) == [0, 1, 2]


# An imbalanced training set: 18 negatives on x < 0 and 2 positives at x = 1, 2. A tiny C shrinks
# the weight to ~0 and leaves only the (unpenalised) intercept, logit(2/20) < 0: every point is
# predicted negative. A large C separates the classes at x ~ 0.
TRAIN_X = np.array([[-1.0 - i / 6] for i in range(18)] + [[1.0], [2.0]])
TRAIN_Y = np.array([0] * 18 + [1] * 2)


def test_dev_select_takes_the_strong_penalty_when_dev_favours_the_prior() -> None:
    X_dev, y_dev = np.array([[2.0], [3.0]]), np.array([0, 0])  # positives' side, labelled 0
    model, dev = dev_select(TRAIN_X, TRAIN_Y, X_dev, y_dev, TransferConfig(regs=[1e-4, 100.0]))
    assert (regression(model).C, dev) == (1e-4, 100.0)


def test_dev_select_takes_the_weak_penalty_when_dev_needs_the_feature() -> None:
    X_dev, y_dev = np.array([[-2.0], [2.0]]), np.array([0, 1])
    model, dev = dev_select(TRAIN_X, TRAIN_Y, X_dev, y_dev, TransferConfig(regs=[1e-4, 100.0]))
    assert (regression(model).C, dev) == (100.0, 100.0)
    # the returned model was trained on train alone, as SentEval's SplitClassifier does
    assert model.score(TRAIN_X, TRAIN_Y) == 1.0


@pytest.mark.parametrize(("param", "k"), [("kfold", 7), ("inner_kfold", 6)])
def test_more_folds_than_a_class_has_examples_is_one_error_naming_the_param(
    param: str, k: int
) -> None:
    """9 examples per class: 7 outer folds leave 7-8 of each class to train on, so 6 inner
    folds fit and 9 do not; more outer folds than 9 do not either."""
    X, y = blobs([-4.0, 4.0], per_class=9)
    config = TransferConfig(**{**FAST, "kfold": 7, "inner_kfold": 2, param: k})
    nested_cv(X, y, config, "MR")  # fits
    too_many = {"kfold": 10, "inner_kfold": 9}[param]
    with pytest.raises(ConfigError, match=rf"^eval\.transfer\.{param}: {too_many} folds need"):
        nested_cv(X, y, replace(config, **{param: too_many}), "MR")
    with pytest.raises(ConfigError, match=r"^eval\.transfer\.kfold: 10 folds .* TREC's"):
        cv_select(X, y, replace(config, kfold=10), "TREC")


def test_samples_take_senteval_order_by_length_then_label_stably() -> None:
    assert _senteval_order([(2, 1), (1, 0), (2, 0), (1, 0), (1, 1)]) == [1, 3, 4, 2, 0]


# --- config ---------------------------------------------------------------------------------------


def test_fits_run_on_at_most_one_worker_per_core(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(classify, "cpu_count", lambda: 2)
    assert [TransferConfig(n_jobs=n).jobs for n in (1, 2, 1000)] == [1, 2, 2]


def test_default_config_is_senteval_and_valid() -> None:
    config = TransferConfig()
    assert config.validate() == []
    assert config.regs == [0.25, 0.5, 1.0, 2.0, 4.0, 8.0]
    assert config.kfold_regs == [0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 32.0]
    assert (config.kfold, config.seed, config.tasks) == (10, 1111, list(TRANSFER_TASKS))
    assert config.warm_start  # issue 34: warm-started C paths; false gives the cold fits
    assert config.center  # issue 34: centred vectors, the same regression; false: as they are
    assert config.tol == 1e-5  # issue 34: scikit-learn's 1e-4 leaves the warm paths' large C


@pytest.mark.parametrize(
    ("values", "where"),
    [
        ({"kfold": 1}, "kfold"),
        ({"inner_kfold": 0}, "inner_kfold"),
        ({"regs": []}, "regs"),
        ({"kfold_regs": [1, -2]}, "kfold_regs"),
        ({"n_jobs": 0}, "n_jobs"),
        ({"solver": "adam"}, "solver"),
        ({"max_iter": 0}, "max_iter"),
        ({"tol": 0.0}, "tol"),
        ({"tol": float("nan")}, "tol"),
        ({"center": "yes"}, "center"),
        ({"tasks": ["MR", "SST5"]}, "tasks"),
        ({"tasks": []}, "tasks"),
        ({"kfolds": 5}, "unknown key"),
    ],
)
def test_bad_params_name_the_key(values: dict, where: str) -> None:
    with pytest.raises(ConfigError, match=f"eval.transfer.*{where}"):
        section({"eval": {"transfer": values}}, "eval.transfer", TransferConfig)


# --- end to end on a small root in the real layout ------------------------------------------------

POSITIVE = ["a good film", "good acting here", "truly good café", "good good", "so good", "good"]
NEGATIVE = ["a bad film", "bad acting here", "truly bad café", "bad bad", "so bad", "bad one"]
TREC_QUESTIONS = {
    "ABBR": ["What does abbr NASA stand for ?", "What is the abbr for doctor ?"],
    "DESC": ["Why describe the sky ?", "How describe a rainbow ?"],
    "ENTY": ["What entity animal barks ?", "What entity fruit is red ?"],
    "HUM": ["Who human wrote Hamlet ?", "Who human painted it ?"],
    "LOC": ["Where location is Paris ?", "Where location is Rome ?"],
    "NUM": ["How many number legs ?", "How much number money ?"],
}


def write(root: Path, rel: str, lines: Sequence[str], encoding: str = "utf-8") -> None:
    path = root / SENTEVAL_DIR / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(("\n".join(lines) + "\n").encode(encoding))


def make_root(root: Path, tasks: Sequence[str] = TRANSFER_TASKS) -> Path:
    """Every transfer task's files, in the archive layout and encodings, with few examples."""
    binary = {
        "MR": ("MR/rt-polarity.pos", "MR/rt-polarity.neg"),
        "CR": ("CR/custrev.pos", "CR/custrev.neg"),
        "SUBJ": ("SUBJ/subj.subjective", "SUBJ/subj.objective"),
        "MPQA": ("MPQA/mpqa.pos", "MPQA/mpqa.neg"),
    }
    for task, (pos, neg) in binary.items():
        if task in tasks:
            write(root, pos, POSITIVE, "latin-1")
            write(root, neg, NEGATIVE, "latin-1")
    if "SST2" in tasks:
        labelled = [f"{s}\t1" for s in POSITIVE] + [f"{s}\t0" for s in NEGATIVE]
        write(root, "SST/binary/sentiment-train", labelled)
        write(root, "SST/binary/sentiment-dev", labelled[::3])  # shares sentences with train
        write(root, "SST/binary/sentiment-test", ["good fun\t1", "bad fun\t0", "very good\t1"])
    if "TREC" in tasks:
        train = [f"{c}:x {q}" for c, qs in TREC_QUESTIONS.items() for q in qs for _ in range(2)]
        write(root, "TREC/train_5500.label", train, "latin-1")
        test = [f"{c}:x {qs[0]}" for c, qs in TREC_QUESTIONS.items()]
        write(root, "TREC/TREC_10.label", test, "latin-1")
    if "MRPC" in tasks:
        header = "\ufeffQuality\t#1 ID\t#2 ID\t#1 String\t#2 String"
        same = [f"1\t{i}\t{i}\t{s}\t{s}" for i, s in enumerate(POSITIVE + NEGATIVE)]
        different = [
            f"0\t{i}\t{i}\t{a}\t{b}"
            for i, (a, b) in enumerate(zip(POSITIVE, NEGATIVE, strict=True))
        ]
        write(root, "MRPC/msr_paraphrase_train.txt", [header, *same, *different])
        write(root, "MRPC/msr_paraphrase_test.txt", [header, *same[::2], *different[::2]])
    return root


class BagOfWords:
    """A deterministic toy encoder: word counts over a fixed vocabulary, dense or sparse."""

    vocabulary = ("good", "bad", "abbr", "describe", "entity", "human", "location", "number")

    def __init__(self, sparse: bool = False) -> None:
        self.sparse = sparse
        self.calls: list[list[str]] = []

    def encode(self, sentences: Sequence[str], batch_size: int = 128) -> np.ndarray | sp.csr_matrix:
        self.calls.append(list(sentences))
        counts = np.array(
            [[s.lower().split().count(w) for w in self.vocabulary] for s in sentences], dtype=float
        )
        return sp.csr_matrix(counts) if self.sparse else counts


def test_end_to_end_on_a_toy_root_gives_every_key_and_the_mean(tmp_path: Path) -> None:
    encoder = BagOfWords()
    evaluator = TransferEvaluator(make_root(tmp_path), 4, TransferConfig(**FAST))
    results = evaluator(encoder)
    assert set(results) == ALL_KEYS
    assert evaluator.skipped == {}
    assert results["avg"] == pytest.approx(np.mean([results[t] for t in TRANSFER_TASKS]))
    assert all(0.0 <= value <= 100.0 for value in results.values())
    # the encoder sees each words-only signal, so every task is solved
    assert {t: results[t] for t in TRANSFER_TASKS} == dict.fromkeys(TRANSFER_TASKS, 100.0)
    assert results["MRPC/f1"] == 100.0
    # one encode call per task, each sentence once (SST2 dev repeats train sentences)
    assert len(encoder.calls) == len(TRANSFER_TASKS)
    assert all(len(call) == len(set(call)) for call in encoder.calls)


def test_sparse_embeddings_give_the_same_results(tmp_path: Path) -> None:
    root = make_root(tmp_path)
    config = TransferConfig(**FAST)
    dense = TransferEvaluator(root, 4, config)(BagOfWords())
    sparse = TransferEvaluator(root, 4, config)(BagOfWords(sparse=True))
    assert sparse == pytest.approx(dense)


# --- missing data ---------------------------------------------------------------------------------


def test_missing_tasks_are_skipped_with_a_reason_and_left_out_of_the_average(
    tmp_path: Path,
) -> None:
    root = make_root(tmp_path, tasks=("MR", "TREC"))
    (root / "MANIFEST.json").write_text(json.dumps({"missing": {"CR": "download failed: 404"}}))
    evaluator = TransferEvaluator(root, 4, TransferConfig(**FAST))
    results = evaluator(BagOfWords())
    assert set(results) == {"MR", "MR/dev", "TREC", "TREC/dev", "avg"}
    assert results["avg"] == pytest.approx((results["MR"] + results["TREC"]) / 2)
    assert set(evaluator.skipped) == {"CR", "SUBJ", "MPQA", "SST2", "MRPC"}
    assert evaluator.skipped["CR"] == "download failed: 404"
    assert "not found under" in evaluator.skipped["MRPC"]


def test_no_task_data_gives_no_metrics(tmp_path: Path) -> None:
    evaluator = TransferEvaluator(tmp_path, 4, TransferConfig(tasks=["SST2"]))
    assert evaluator(BagOfWords()) == {}
    assert list(evaluator.skipped) == ["SST2"]


# --- real data ------------------------------------------------------------------------------------


class HashedWords:
    """A cheap sparse bag-of-words encoder for the real data (the TF-IDF baseline's shape)."""

    def __init__(self) -> None:
        self.vectorizer = HashingVectorizer(n_features=2**14, alternate_sign=False)

    def encode(self, sentences: Sequence[str], batch_size: int = 128) -> sp.csr_matrix:
        return self.vectorizer.transform(sentences)


def test_real_trec_and_mrpc_from_the_mirror(mirror: Path) -> None:
    """Both real files read and scored end to end; 2 folds and 2 C values keep it to seconds
    (the protocol's grids are exercised on small data above)."""
    config = TransferConfig(tasks=["TREC", "MRPC"], kfold=2, kfold_regs=[0.5, 8.0])
    evaluator = TransferEvaluator(mirror, 64, config)
    results = evaluator(HashedWords())
    assert set(results) == {"TREC", "TREC/dev", "MRPC", "MRPC/dev", "MRPC/f1", "avg"}
    assert evaluator.skipped == {}
    # bag of words beats the majority class on both (TREC test 27.6%, MRPC test 66.5%)
    assert 60.0 < results["TREC"] <= 100.0
    assert 66.5 < results["MRPC"] <= 100.0
    assert 0.0 < results["MRPC/f1"] <= 100.0
    assert results["avg"] == pytest.approx((results["TREC"] + results["MRPC"]) / 2)


def test_blank_lines_sort_as_zero_tokens_and_embed_as_a_period(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SentEval's order (`senteval/binary.py`) on files with blank lines: each line is
    `line.split()`, sorted by (token count, label), an empty one embedded as "."; so a blank line
    is 0 tokens, not the 1 token of its ".". The stratified folds depend on the labels' order
    alone, so they are SentEval's too."""
    positive = ["good", "", "a good film", "so good", "good", "", "good acting here", "good good"]
    negative = ["bad", "", "bad one", "", "a bad film", "bad", "so bad", "truly bad film"]
    write(tmp_path, "MPQA/mpqa.pos", positive, "latin-1")
    write(tmp_path, "MPQA/mpqa.neg", negative, "latin-1")
    seen: dict[str, list] = {}

    def record_embed(encoder: BagOfWords, sentences: list[str], batch_size: int) -> tuple:
        seen["sentences"] = list(sentences)
        return embed(encoder, sentences, batch_size)

    def record_cv(
        X: np.ndarray, y: np.ndarray, config: TransferConfig, task: str
    ) -> NestedCVResult:
        seen["labels"] = y.tolist()
        return NestedCVResult(dev=0.0, test=0.0, chosen=[])

    monkeypatch.setattr("sentemb.evaluation.transfer.embed", record_embed)
    monkeypatch.setattr("sentemb.evaluation.transfer.nested_cv", record_cv)
    TransferEvaluator(tmp_path, 4, TransferConfig(**FAST | {"tasks": ["MPQA"]}))(BagOfWords())

    samples = [line.split() for line in positive + negative]
    labels = [1] * len(positive) + [0] * len(negative)
    expected = sorted(zip(samples, labels, strict=True), key=lambda z: (len(z[0]), z[1]))
    assert seen["sentences"] == [" ".join(tokens) or "." for tokens, _ in expected]
    assert seen["labels"] == [label for _, label in expected]
    assert seen["sentences"][:4] == ["."] * 4  # the old "." key put them among the 1-token lines
