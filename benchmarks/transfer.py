"""The SentEval transfer suite's classifier selection: the reference protocol against ours.

    python benchmarks/transfer.py                     # all seven tasks, 1 round
    python benchmarks/transfer.py --tasks CR TREC     # a quick check

Each task's sentences are encoded once with the default model (`model.name_or_path`) and the
vectors cached in `--cache` (npz, one file per task), so both sides score the same vectors. Then,
per task and back to back (rounds alternate which side runs first), `TransferEvaluator` runs with
the reference selection (`GridSearchCV` over C inside `cross_validate`, one cold lbfgs fit per
fold and C, as before issue 17) and with the pipeline's own. Writes the time ratio and every
accuracy of both sides to `benchmarks/transfer.json`. Needs the download stage's `data/raw`.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
from collect import machine
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import GridSearchCV, cross_validate

from sentemb.config import load_params, section
from sentemb.evaluation import transfer
from sentemb.evaluation.base import Embeddings, SentenceEncoder
from sentemb.evaluation.encoders import load_encoder
from sentemb.evaluation.transfer import (
    TRANSFER_TASKS,
    NestedCVResult,
    TransferConfig,
    TransferEvaluator,
)
from sentemb.model_config import ModelConfig

ROOT = Path(__file__).resolve().parents[1]


class CachedEncoder:
    """Vectors of the sentences already encoded, read from an npz; the others from `encoder`."""

    def __init__(self, path: Path, load: Any) -> None:
        self.path, self.load = path, load
        self.rows: dict[str, np.ndarray] = {}
        if path.is_file():
            with np.load(path) as cache:
                self.rows = dict(zip(cache["sentences"].tolist(), cache["vectors"], strict=True))

    def encode(self, sentences: Sequence[str], batch_size: int = 128) -> np.ndarray:
        missing = [s for s in dict.fromkeys(sentences) if s not in self.rows]
        if missing:
            vectors = self.load().encode(missing, batch_size=batch_size)
            self.rows.update(zip(missing, vectors, strict=True))
            np.savez(
                self.path,
                sentences=np.array(list(self.rows)),
                vectors=np.stack(list(self.rows.values())),
            )
        return np.stack([self.rows[s] for s in sentences])


# --- the reference: the selection as it was before issue 17 ---------------------------------------


def _reference_search(regs: Sequence[float], k: int, config: TransferConfig, n_jobs: int):
    return GridSearchCV(
        transfer.logistic_regression(config),
        {"C": list(regs)},
        scoring="accuracy",
        cv=transfer._folds(k, config),
        n_jobs=n_jobs,
        error_score="raise",
    )


def reference_nested_cv(X: Embeddings, y: np.ndarray, config: TransferConfig) -> NestedCVResult:
    search = _reference_search(config.regs, config.inner_kfold, config, n_jobs=1)
    scores = cross_validate(
        search,
        X,
        y,
        cv=transfer._folds(config.kfold, config),
        scoring="accuracy",
        n_jobs=config.n_jobs,
        return_estimator=True,
        error_score="raise",
    )
    return NestedCVResult(
        dev=100.0 * float(np.mean([est.best_score_ for est in scores["estimator"]])),
        test=100.0 * float(np.mean(scores["test_score"])),
        chosen=[float(est.best_params_["C"]) for est in scores["estimator"]],
    )


def reference_cv_select(
    X_train: Embeddings, y_train: np.ndarray, config: TransferConfig
) -> tuple[LogisticRegression, float]:
    search = _reference_search(config.kfold_regs, config.kfold, config, n_jobs=config.n_jobs)
    search.fit(X_train, y_train)
    return search.best_estimator_, 100.0 * float(search.best_score_)


REFERENCE = {"nested_cv": reference_nested_cv, "cv_select": reference_cv_select}


@contextmanager
def reference_selection():
    """`transfer`'s selection functions swapped for the reference ones while inside."""
    saved = {name: getattr(transfer, name) for name in REFERENCE}
    try:
        for name, function in REFERENCE.items():
            setattr(transfer, name, function)
        yield
    finally:
        for name, function in saved.items():
            setattr(transfer, name, function)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--tasks", nargs="+", default=list(TRANSFER_TASKS), choices=TRANSFER_TASKS)
    parser.add_argument("--data", type=Path, default=ROOT / "data/raw")
    parser.add_argument("--params", default=str(ROOT / "params.yaml"))
    parser.add_argument("--cache", type=Path, default=Path("/tmp/sentemb-transfer-vectors"))
    parser.add_argument("--encode-only", action="store_true", help="fill the cache and stop")
    parser.add_argument("--warm-start", action="store_true", help="ours with warm_start: true")
    parser.add_argument("--out", type=Path, default=Path(__file__).with_name("transfer.json"))
    args = parser.parse_args()
    params = load_params(args.params)
    model = section(params, "model", ModelConfig)
    config = section(params, "eval.transfer", TransferConfig)
    config.warm_start = config.warm_start or args.warm_start
    args.cache.mkdir(parents=True, exist_ok=True)
    loaded: list[SentenceEncoder] = []

    def load() -> SentenceEncoder:
        if not loaded:
            loaded.append(load_encoder(model.name_or_path, "en", params, args.data))
        return loaded[0]

    def evaluate(task: str) -> dict[str, float]:
        task_config = TransferConfig(**{**vars(config), "tasks": [task]})
        encoder = CachedEncoder(args.cache / f"{task}.npz", load)
        return TransferEvaluator(args.data, model.batch_size, task_config)(encoder)

    if args.encode_only:
        for task in args.tasks:
            evaluate_encode_only(task, args, model.batch_size, load)
        return
    sides = ("reference", "ours")
    seconds: dict[str, dict[str, list[float]]] = {t: {s: [] for s in sides} for t in args.tasks}
    results: dict[str, dict[str, dict[str, float]]] = {t: {} for t in args.tasks}
    for task in args.tasks:
        evaluate_encode_only(task, args, model.batch_size, load)
        for round_ in range(args.rounds):
            for side in sides if round_ % 2 == 0 else sides[::-1]:
                started = time.perf_counter()
                if side == "reference":
                    with reference_selection():
                        results[task][side] = evaluate(task)
                else:
                    results[task][side] = evaluate(task)
                seconds[task][side].append(time.perf_counter() - started)
        medians = {side: statistics.median(seconds[task][side]) for side in sides}
        print(task, medians, results[task], flush=True)
    report = summarise(args, config, model.name_or_path, seconds, results)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps({k: report[k] for k in ("speedup", "max_abs_difference")}, indent=1))


def evaluate_encode_only(task: str, args: argparse.Namespace, batch_size: int, load: Any) -> None:
    """Fill the cache of `task`: every sentence the evaluator encodes, without fitting."""
    encoder = CachedEncoder(args.cache / f"{task}.npz", load)
    evaluator = TransferEvaluator(args.data, batch_size, TransferConfig(tasks=[task]))
    saved = {name: getattr(transfer, name) for name in ("nested_cv", "cv_select", "dev_select")}

    class Stop(Exception):
        pass

    def stop(*_: object) -> None:
        raise Stop

    try:
        for name in saved:
            setattr(transfer, name, stop)
        evaluator(encoder)
    except Stop:
        pass
    finally:
        for name, function in saved.items():
            setattr(transfer, name, function)


def summarise(
    args: argparse.Namespace,
    config: TransferConfig,
    model: str,
    seconds: dict[str, dict[str, list[float]]],
    results: dict[str, dict[str, dict[str, float]]],
) -> dict[str, Any]:
    per_task = {}
    for task, times in seconds.items():
        medians = {side: statistics.median(v) for side, v in times.items()}
        reference, ours = results[task]["reference"], results[task]["ours"]
        per_task[task] = {
            "seconds": times,
            "speedup": medians["reference"] / medians["ours"],
            "reference": reference,
            "ours": ours,
            "abs_difference": {k: abs(ours[k] - reference[k]) for k in reference},
        }
    total = {
        side: sum(statistics.median(seconds[t][side]) for t in seconds)
        for side in ("reference", "ours")
    }
    return {
        "date": datetime.now(UTC).strftime("%Y-%m-%d"),
        "machine": machine(),
        "model": model,
        "config": vars(config),
        "rounds": args.rounds,
        "tasks": per_task,
        "total_seconds": total,
        "speedup": total["reference"] / total["ours"],
        "max_abs_difference": max(
            d for t in per_task.values() for d in t["abs_difference"].values()
        ),
    }


if __name__ == "__main__":
    main()
