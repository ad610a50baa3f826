"""fp32 against bf16 autocast on CPU: encoding and training speed, and STS-B dev Spearman.

    python benchmarks/precision.py                      # 2 rounds, 8 timed steps, 50 training steps
    python benchmarks/precision.py --train-steps 0      # speed only

Encoding: every distinct STS-B dev sentence, `model.name_or_path` with its own pooling, batch
`model.batch_size`; each round times fp32 then bf16 (rounds alternate the order), and the dev
Spearman of each precision is recorded. Training: SimCSE's steps through the train stage's
trainer (`train_step.pipeline_seconds`: batch 64, max length 32), 2 warm-up + `--steps` timed
steps per precision. With
`--train-steps N`, SimCSE trains N steps in each precision from the same seed and the STS-B dev
Spearman of the two results is compared (the full pipeline's numbers are in the README). Needs
the download stage's `data/raw`. Writes `benchmarks/precision.json`.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

from collect import machine
from train_step import CORPUS, ROOT, WARMUP, bench_job, pipeline_seconds

from sentemb.config import load_params, section
from sentemb.data.readers import read_corpus, read_stsb
from sentemb.encoder import Encoder
from sentemb.evaluation.sts import STSEvaluator
from sentemb.model_config import ModelConfig
from sentemb.training.config import TrainConfig

PRECISIONS = ("fp32", "bf16")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--train-steps", type=int, default=50)
    parser.add_argument("--data", type=Path, default=ROOT / "data/raw")
    parser.add_argument("--params", default=str(ROOT / "params.yaml"))
    parser.add_argument("--out", type=Path, default=Path(__file__).with_name("precision.json"))
    args = parser.parse_args()
    params = load_params(args.params)
    model = section(params, "model", ModelConfig)
    base = section(params, "train", TrainConfig)
    dev = read_stsb(args.data, "dev")
    sentences = list(dict.fromkeys([*dev.first, *dev.second]))
    evaluator = STSEvaluator(args.data, model.batch_size, split="dev")
    encoder = Encoder.from_pretrained(model.name_or_path, model.pooler)
    encode: dict[str, list[float]] = {p: [] for p in PRECISIONS}
    dev_score: dict[str, float] = {}
    for round_ in range(args.rounds):
        for precision in PRECISIONS if round_ % 2 == 0 else PRECISIONS[::-1]:
            encoder.precision = precision
            started = time.perf_counter()
            encoder.encode(sentences, model.batch_size, show_progress=False)
            encode[precision].append(time.perf_counter() - started)
            dev_score[precision] = evaluator(encoder)["STSBenchmark/dev"]
    corpus = list(
        read_corpus(CORPUS, limit=base.batch_size * max(args.train_steps, args.steps + WARMUP))
    )
    step: dict[str, list[float]] = {}
    trained: dict[str, float] = {}
    for precision in PRECISIONS:
        with tempfile.TemporaryDirectory() as folder:
            job = bench_job(params, "simcse", corpus, Path(folder) / "ck", precision=precision)
            step[precision] = pipeline_seconds(job, args.steps, Path(folder))["seconds"]
        if args.train_steps:
            with tempfile.TemporaryDirectory() as folder:
                job = bench_job(params, "simcse", corpus, Path(folder) / "ck", precision=precision)
                job.config.max_steps = job.config.eval_steps = args.train_steps
                job.train(Path(folder) / "model", Path(folder) / "ck")
                run = Encoder.from_pretrained(str(Path(folder) / "model"), base.eval_pooler)
                run.precision = precision
                trained[precision] = evaluator(run)["STSBenchmark/dev"]
    medians = {
        p: {"encode": statistics.median(encode[p]), "step": statistics.median(step[p])}
        for p in PRECISIONS
    }
    report = {
        "date": datetime.now(UTC).strftime("%Y-%m-%d"),
        "machine": machine(),
        "model": model.name_or_path,
        "sentences": len(sentences),
        "encode_seconds": encode,
        "step_seconds": step,
        "medians": medians,
        "speedup": {k: medians["fp32"][k] / medians["bf16"][k] for k in ("encode", "step")},
        "dev_untrained": dev_score,
        "dev_trained": trained,
        "train_steps": args.train_steps,
    }
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps({k: report[k] for k in ("speedup", "dev_untrained", "dev_trained")}, indent=1))


if __name__ == "__main__":
    main()
