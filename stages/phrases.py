"""Stage `phrases`: RAKE phrases and TF-IDF keywords of every training sentence.

Reads the training corpus (`data/corpus.txt`, the corpus stage's), streams it through every
core and writes `data/phrases/rake.jsonl` and `data/phrases/keywords.jsonl` (line i = sentence i)
plus `metrics/phrases.json` (counts and the stage's `seconds`; the throughput goes to MLflow
and `benchmarks/`).
"""

from __future__ import annotations

import logging

from sentemb.cli import Parser, run_stage
from sentemb.clock import SECONDS
from sentemb.config import load_params, section
from sentemb.data.download import DataConfig, use_nltk_data
from sentemb.data.readers import read_corpus
from sentemb.io import check_output
from sentemb.phrases import PhrasesConfig, extract
from sentemb.tracking import mlflow_run

log = logging.getLogger("phrases")


def parser() -> Parser:
    parser = Parser(__doc__)
    parser.input("--params", default="params.yaml", folder=False)
    parser.input("--corpus", default="data/corpus.txt", folder=False)
    parser.output("--out", default="data/phrases")
    parser.output("--metrics", default="metrics/phrases.json")
    return parser


def main() -> None:
    args = parser().parse_args()
    check_output(args.out, folder=True)  # refused now rather than after the extraction
    check_output(args.metrics)
    params = load_params(args.params)
    use_nltk_data(section(params, "data", DataConfig), args.params)
    config = section(params, "phrases", PhrasesConfig)
    total = sum(1 for _ in read_corpus(args.corpus))
    with mlflow_run("phrases", {"phrases": params.get("phrases", {})}) as run:
        stats = extract(lambda: read_corpus(args.corpus), total, config, args.out)
        written = run.write_metrics(args.metrics, stats)
        run.log_metrics({"sentences_per_second": total / max(written[SECONDS], 0.1)})
    log.info(
        "%d sentences in %.0f s, %d with phrases", total, written[SECONDS], stats["with_phrases"]
    )


if __name__ == "__main__":
    run_stage(main)
