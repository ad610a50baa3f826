"""The 7 STS test sets end to end: the pipeline's evaluator against sentence-transformers'.

    python benchmarks/evaluation.py
    python benchmarks/evaluation.py --rounds 1 --tasks STSBenchmark   # a quick check

Ours: `STSEvaluator` over STS12-16, STS-B and SICK-R, or the `--tasks` given (one encode pass
over the distinct sentences of all sets, tokenized once and batched by token count). Theirs: one
`EmbeddingSimilarityEvaluator` per set, as its users run it, each over the pooled pairs of that
set (the "all" setting). Same model (`model.name_or_path` with its own pooling), batch size and
autocast (`model.precision`); both read the pairs with the pipeline's readers inside the timed
region. Rounds alternate which runs first. Needs the download stage's `data/raw`. Writes
`benchmarks/evaluation.json`.
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import time
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
from collect import machine

from sentemb.config import load_params, section
from sentemb.data.readers import read_sick, read_sts_year, read_stsb
from sentemb.data.sources import STS_SUBSETS
from sentemb.encoder import Encoder
from sentemb.evaluation.sts import STS_TASKS, STSConfig, STSEvaluator
from sentemb.model_config import ModelConfig
from sentemb.model_files import resolve_model

ROOT = Path(__file__).resolve().parents[1]


def pair_sets(root: Path, tasks: list[str]) -> dict[str, tuple[list[str], list[str], list[float]]]:
    """Each test set's pooled pairs (first sentences, second sentences, gold)."""
    sets = {}
    for task in tasks:
        if task in STS_SUBSETS:
            subsets = list(read_sts_year(root, task).values())
        elif task == "STSBenchmark":
            subsets = [read_stsb(root, "test")]
        else:
            subsets = [read_sick(root, "test_annotated")]
        sets[task] = tuple(
            list(itertools.chain.from_iterable(getattr(p, k) for p in subsets))
            for k in ("first", "second", "scores")
        )
    return sets


def theirs(model: object, root: Path, batch_size: int, tasks: list[str]) -> dict[str, float]:
    """One sentence-transformers evaluator per set; Spearman x 100 of cosine per set."""
    from sentence_transformers.sentence_transformer.evaluation import EmbeddingSimilarityEvaluator

    scores = {}
    for name, (first, second, gold) in pair_sets(root, tasks).items():
        evaluator = EmbeddingSimilarityEvaluator(
            first,
            second,
            gold,
            batch_size=batch_size,
            main_similarity="cosine",
            name=name,
            write_csv=False,
        )
        result = evaluator(model)
        scores[name] = 100.0 * next(v for k, v in result.items() if k.endswith("spearman_cosine"))
    return scores


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--tasks", nargs="+", default=list(STS_TASKS), choices=STS_TASKS)
    parser.add_argument("--data", type=Path, default=ROOT / "data/raw")
    parser.add_argument("--params", default=str(ROOT / "params.yaml"))
    parser.add_argument("--out", type=Path, default=Path(__file__).with_name("evaluation.json"))
    args = parser.parse_args()
    from sentence_transformers import SentenceTransformer

    model = section(load_params(args.params), "model", ModelConfig)
    encoder = Encoder.from_pretrained(
        model.name_or_path, model.pooler, None, False, model.precision
    )
    network = SentenceTransformer(resolve_model(model.name_or_path), device="cpu")
    evaluator = STSEvaluator(args.data, model.batch_size, STSConfig(args.tasks))
    seconds: dict[str, list[float]] = {"ours": [], "sentence-transformers": []}
    spearman: dict[str, dict[str, float]] = {}

    def run(name: str) -> None:
        started = time.perf_counter()
        if name == "ours":
            spearman[name] = {
                k: v for k, v in evaluator(encoder).items() if "/" not in k and k != "avg"
            }
        else:
            with encoder.autocast():  # the same autocast as ours
                spearman[name] = theirs(network, args.data, model.batch_size, args.tasks)
        seconds[name].append(time.perf_counter() - started)

    for round_ in range(args.rounds):
        for name in list(seconds) if round_ % 2 == 0 else list(seconds)[::-1]:
            run(name)
    sets = pair_sets(args.data, args.tasks)
    sentences = {s for first, second, _ in sets.values() for s in (*first, *second)}
    medians = {k: statistics.median(v) for k, v in seconds.items()}
    report = {
        "date": datetime.now(UTC).strftime("%Y-%m-%d"),
        "machine": machine(),
        "model": model.name_or_path,
        "precision": model.precision,
        "tasks": args.tasks,
        "unique_sentences": len(sentences),
        "seconds": seconds,
        "medians": medians,
        "ours_vs_theirs": medians["ours"] / medians["sentence-transformers"],
        "spearman": spearman,
        "max_spearman_difference": float(
            np.max(
                [
                    abs(spearman["ours"][k] - spearman["sentence-transformers"][k])
                    for k in spearman["ours"]
                ]
            )
        ),
    }
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(
        json.dumps(
            {
                k: report[k]
                for k in (
                    "medians",
                    "ours_vs_theirs",
                    "unique_sentences",
                    "max_spearman_difference",
                )
            },
            indent=1,
        )
    )


if __name__ == "__main__":
    main()
