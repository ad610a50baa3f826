"""Stage `corpus`: the training corpus `train.corpus` names, cleaned, with its data card.

Reads any corpus file (`sentemb.data.corpus`: `.txt`, `.csv`, `.tsv`, `.jsonl`, `.parquet`) and
writes the sentences every later stage trains or fits on, one a line, to `data/corpus.txt`,
and the card to `metrics/corpus.json`: texts read, kept, and dropped by reason; token lengths
by the model's tokenizer (percentiles, the share `train.max_length` cuts, the unknown-token
rate); and how many kept sentences are also test sentences of an evaluation suite (a warning
when any is, with a sample). A bad file is one error naming it (and the line); nothing is
written then.
"""

from __future__ import annotations

import logging
from dataclasses import asdict

from sentemb.cli import Parser, run_stage
from sentemb.config import load_params, section
from sentemb.data.corpus import (
    Card,
    CorpusRules,
    CorpusStats,
    check_corpus_path,
    clean,
    kept_sentences,
)
from sentemb.data.download import DataConfig
from sentemb.evaluate import build_evaluator
from sentemb.io import atomic_path, check_output
from sentemb.model_config import ModelConfig
from sentemb.model_files import resolve_model
from sentemb.registry import SUITES
from sentemb.tracking import mlflow_run
from sentemb.training.config import TrainConfig

log = logging.getLogger("corpus")


def parser() -> Parser:
    parser = Parser(__doc__)
    parser.input("--params", default="params.yaml", folder=False)
    parser.input("--data", default="data/raw", folder=True)
    parser.output("--out", default="data/corpus.txt")
    parser.output("--metrics", default="metrics/corpus.json")
    return parser


def main() -> None:
    args = parser().parse_args()
    check_output(args.out)  # refused now rather than after the reading
    check_output(args.metrics)
    params = load_params(args.params)
    train = section(params, "train", TrainConfig)
    model = section(params, "model", ModelConfig)
    source = check_corpus_path(train.corpus, args.params.resolve().parent)
    rules = CorpusRules(
        train.text_column,
        train.drop_duplicates,
        section(params, "data", DataConfig).corpus_size,
        train.batch_size,
    )
    suites = [build_evaluator(name, params, args.data, model.batch_size) for name in SUITES]
    test = {clean(sentence) for suite in suites for sentence in suite.test_sentences()}
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(
        resolve_model(model.name_or_path), trust_remote_code=model.trust_remote_code
    )
    stats = CorpusStats()
    card = Card(tokenizer, train.max_length, test.__contains__)
    run_params = {"train": asdict(train), "data": {"corpus_size": rules.size}}
    with mlflow_run("corpus", run_params) as run:
        with atomic_path(args.out) as tmp, tmp.open("w", encoding="utf-8") as out:
            for sentence in kept_sentences(source, rules, stats):
                out.write(sentence + "\n")
                card.add(sentence)
        numbers = card.numbers()
        written = run.write_metrics(
            args.metrics,
            {
                "source": train.corpus,
                "read": stats.read,
                "kept": stats.kept,
                "dropped": stats.dropped,
                "duplicates": stats.duplicates,
                **numbers,
            },
        )
    overlap = numbers["test_overlap"]
    if overlap["sentences"]:
        log.warning(
            "%d training sentences are also test sentences of an evaluation suite (%s, ...): "
            "scores on those sets are not held out",
            overlap["sentences"],
            overlap["sample"][0],
        )
    log.info(
        "%s: %d texts read, %d kept (%s dropped) in %.0f s",
        train.corpus,
        stats.read,
        stats.kept,
        stats.dropped,
        written["seconds"],
    )


if __name__ == "__main__":
    run_stage(main)
