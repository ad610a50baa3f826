"""Evaluation's compute against training's, counted: the floor under issue 17's "evaluation
<= 1.0x training".

    python benchmarks/eval_compute.py     # after make repro: models/42 and its refinement
    python benchmarks/eval_compute.py --run sscl-43

Runs the pipeline's own code for one trained run (`--run`, default the first method and seed)
with `Encoder.forward` replaced by a counter that records the shape of every batch the encoder
is given and returns random states: stage `refine` (`fit_refinements`), stage `evaluate` (every
suite, plain and refined, in one process as the stage does) and stage `analyze`; the transfer
classifiers, which encode nothing, are stubbed. Training is counted from its trainer's batches
(`train_step.epoch_batches`, tokenized at `train.max_length`, both dropout views in one forward)
and its STS-B dev scorings (as many as `dev_curve.json` has points, plus the untrained one).
The FLOPs of a BERT forward of B rows padded to L tokens are, per layer, 2·B·L·(4H² + 2H·I)
for the projections and the feed-forward plus 4·B·L²·H for attention (H hidden, I intermediate
size), and a backward pass is twice its forward; for training this gives FlopCounterMode's
count of a SimCSE step (`train_step.py`) to 0.1%. Sentences that more than one stage encodes are
counted too. Writes `benchmarks/eval_compute.json`; takes about a minute.
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import torch
from train_step import epoch_batches
from transformers import AutoConfig, PretrainedConfig

import sentemb.evaluation.transfer as transfer
from sentemb.analysis import AnalysisConfig, analyze
from sentemb.config import load_params, section
from sentemb.data.readers import read_corpus
from sentemb.encoder import Encoder, EncoderOutput
from sentemb.evaluate import evaluate_model
from sentemb.evaluation.base import Evaluator
from sentemb.evaluation.encoders import model_names
from sentemb.model_config import ModelConfig
from sentemb.refine.fit import fit_refinements
from sentemb.registry import SUITES
from sentemb.training.config import TrainConfig
from sentemb.training.selection import selection_of

ROOT = Path(__file__).resolve().parents[1]
CORPUS = ROOT / "data/corpus.txt"  # the corpus stage's
TRAIN_STEPS = "train: steps"


class Counted:
    """Forward passes (rows, padded width, real tokens) and encoded sentences per part."""

    def __init__(self) -> None:
        self.part = ""
        self.shapes: dict[str, list[tuple[int, int, int]]] = defaultdict(list)
        self.sentences: dict[str, set[str]] = defaultdict(set)

    @contextmanager
    def under(self, part: str) -> Iterator[None]:
        outer, self.part = self.part, part
        try:
            yield
        finally:
            self.part = outer


def gflops(shapes: list[tuple[int, int, int]], config: PretrainedConfig) -> float:
    """Forward GFLOPs of the BERT encoder `config` over batches of (rows, width, _)."""
    h, i, layers = config.hidden_size, config.intermediate_size, config.num_hidden_layers
    per_layer = (2 * b * w * (4 * h * h + 2 * h * i) + 4 * b * w * w * h for b, w, _ in shapes)
    return layers * sum(per_layer) / 1e9


def install(counted: Counted) -> None:
    """Count every forward and the sentences of every `Encoder.batches`; forward returns random
    states of the right shapes."""
    batches = Encoder.batches  # what `encode` and analyze's one pass batch sentences with

    def counting_batches(
        self: Encoder, sentences: Sequence[str], batch_size: int, special_tokens_mask: bool = False
    ) -> Iterator[tuple[list[int], dict[str, torch.Tensor]]]:
        counted.sentences[counted.part].update(sentences)
        return batches(self, sentences, batch_size, special_tokens_mask)

    def fake_forward(
        self: Encoder, input_ids: torch.Tensor, attention_mask: torch.Tensor, **kwargs: object
    ) -> EncoderOutput:
        rows, width = input_ids.shape
        counted.shapes[counted.part].append((rows, width, int(attention_mask.sum())))
        config = self.backbone.config
        hidden = tuple(
            torch.randn(rows, width, config.hidden_size)
            for _ in range(config.num_hidden_layers + 1)
        )
        pooled = hidden[-1][:, 0]
        return EncoderOutput(pooled, hidden, attention_mask)

    call = Evaluator.__call__

    def tagged_call(self: Evaluator, *args: object, **kwargs: object) -> dict[str, float]:
        """Inside stage evaluate (no part set), each suite is its own part."""
        suite = type(self).__name__.removesuffix("Evaluator").lower()
        with counted.under(counted.part or f"evaluate: {suite}"):
            return call(self, *args, **kwargs)

    Encoder.batches, Encoder.forward, Evaluator.__call__ = (
        counting_batches,
        fake_forward,
        tagged_call,
    )

    class Stub:
        def score(self, X: np.ndarray, y: np.ndarray) -> float:
            return 0.5

        def predict(self, X: np.ndarray) -> np.ndarray:
            return np.zeros(X.shape[0], dtype=int)

    transfer.nested_cv = lambda X, y, config: transfer.NestedCVResult(50.0, 50.0, [1.0])
    transfer.cv_select = lambda X, y, config: (Stub(), 50.0)
    transfer.dev_select = lambda X, y, X_dev, y_dev, config: (Stub(), 50.0)


def table(result: dict) -> str:
    """The table of benchmarks/README.md: each part's forward passes and FLOPs, x training."""
    training = result["training_gflops"]
    rows = [
        "| part | forward rows | tokens | padded tokens | TFLOP | x training |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for part, v in result["parts"].items():
        rows.append(
            f"| {part} | {v['rows']:,} | {v['tokens']:,} | {v['padded_tokens']:,} "
            f"| {v['gflops'] / 1000:.1f} | {v['gflops'] / training:.2f} |"
        )
    shared = result["sentences_in_more_than_one_stage"]
    encoded = sum(result["sentences_encoded_by_stage"].values())
    return "\n".join(rows) + (
        f"\n\nEvaluation {result['evaluation_gflops'] / 1000:.1f} TFLOP, training "
        f"{training / 1000:.1f}: **{result['evaluation_vs_training']:.2f}x**. Sentences encoded "
        f"by more than one stage: {shared:,} of {encoded:,}."
    )


def count_evaluation(counted: Counted, params: dict, data: Path, run: str) -> None:
    """Stages refine, evaluate and analyze of `run`, as the pipeline runs them."""
    model = str(ROOT / "models" / run)
    with counted.under("refine"):
        english, chinese = model_names(params, model)
        fit_refinements(params, english, chinese, CORPUS, data, ROOT / "data/phrases")
    evaluate_model(list(SUITES), params, data, model, ROOT / "refined" / run)
    with counted.under("analyze"):
        pooler = section(params, "train", TrainConfig).eval_pooler
        analysis = section(params, "analysis", AnalysisConfig)
        analyze(model, pooler, analysis, section(params, "model", ModelConfig), data)


def count_training(counted: Counted, params: dict, data: Path, run: str) -> int:
    """Stage train of `run`: its STS-B dev scorings and every step's batch; returns the steps."""
    config = section(params, "train", TrainConfig)
    scorings = 1 + len(json.loads((ROOT / "plots/runs" / run / "dev_curve.json").read_text()))
    with counted.under("train: dev scorings"):
        dev = selection_of(params, data, section(params, "model", ModelConfig).batch_size).scorer
        encoder = Encoder.from_pretrained(str(ROOT / "models" / run), config.eval_pooler)
        for _ in range(scorings):
            dev(encoder)
    sentences = list(read_corpus(CORPUS))  # what stage train reads
    encoder = Encoder.from_pretrained(str(ROOT / "models" / run), config.eval_pooler)
    seed = int(run) if run.isdigit() else params["seeds"][0]
    per_epoch = len(sentences) // config.batch_size
    steps = config.steps(len(sentences))
    for step in range(steps):
        epoch, index = divmod(step, per_epoch)
        batch = epoch_batches(sentences, config.batch_size, seed, epoch)[index]
        mask = encoder.tokenize(batch, config.max_length)["attention_mask"]
        rows, width = mask.shape  # both dropout views go through one forward
        counted.shapes[TRAIN_STEPS].append((2 * rows, width, 2 * int(mask.sum())))
    return steps


def summarise(counted: Counted, config: PretrainedConfig, run: str, steps: int) -> dict:
    """Each part's forward rows, tokens and FLOPs (training's steps x3 for the backward pass),
    the evaluation/training ratio and the sentences more than one stage encodes."""
    parts = {
        part: {
            "batches": len(shapes),
            "rows": sum(b for b, _, _ in shapes),
            "tokens": sum(t for _, _, t in shapes),
            "padded_tokens": sum(b * w for b, w, _ in shapes),
            "gflops": (3 if part == TRAIN_STEPS else 1) * gflops(shapes, config),
        }
        for part, shapes in counted.shapes.items()
    }
    training = sum(v["gflops"] for k, v in parts.items() if k.startswith("train"))
    evaluation = sum(v["gflops"] for k, v in parts.items() if not k.startswith("train"))
    stages: dict[str, set[str]] = defaultdict(set)
    for part, seen in counted.sentences.items():
        if not part.startswith("train"):
            stages[part.split(":")[0]] |= seen
    encoded = sum(len(s) for s in stages.values())
    return {
        "run": run,
        "parts": parts,
        "training_gflops": training,
        "evaluation_gflops": evaluation,
        "evaluation_vs_training": evaluation / training,
        "sentences_encoded_by_stage": {k: len(v) for k, v in stages.items()},
        "sentences_in_more_than_one_stage": encoded - len(set().union(*stages.values())),
        "gflops_per_train_step": parts[TRAIN_STEPS]["gflops"] / steps,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--run", help="a seed's run folder name (default: the first seed)")
    parser.add_argument("--params", default=str(ROOT / "params.yaml"))
    parser.add_argument("--data", default=ROOT / "data/raw", type=Path)
    parser.add_argument("--out", type=Path, default=Path(__file__).with_name("eval_compute.json"))
    args = parser.parse_args()
    params = load_params(args.params)
    run = args.run or str(params["seeds"][0])
    counted = Counted()
    install(counted)
    count_evaluation(counted, params, args.data, run)
    steps = count_training(counted, params, args.data, run)
    config = AutoConfig.from_pretrained(ROOT / "models" / run)
    result = summarise(counted, config, run, steps)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(table(result))


if __name__ == "__main__":
    main()
