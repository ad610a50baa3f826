"""One training run as the `train` stage does it: every input checked before the model is loaded,
the run key, model selection on the dev sets, the metrics and the model card.

    job = prepare(spec, seed, params, data)          # inputs checked, model loaded, run key
    result = job.train(out, checkpoints, on_log)     # the best model (with its card) in `out`
    metrics = job.metrics(result)
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, NoReturn

import numpy as np

from sentemb.config import SEEDS, ConfigError, parse_spec, run_plan, section
from sentemb.data.readers import DataFormatError, read_stsb, training_corpus
from sentemb.data.sources import DATASETS
from sentemb.encoder import Encoder, model_identity, precision_used
from sentemb.evaluation.base import distinct, probe, scoring
from sentemb.evaluation.sts import STSConfig, STSEvaluator
from sentemb.methods.base import CombinedMethod
from sentemb.methods.paser import PaSeRConfig
from sentemb.model_config import ModelConfig
from sentemb.phrases import PhrasesConfig
from sentemb.pooling import check_pooler
from sentemb.registry import METHODS
from sentemb.training.checkpoint import files_hash, lines_hash, source_hash
from sentemb.training.config import TrainConfig
from sentemb.training.loop import Trainer, TrainResult, pick_device
from sentemb.training.modelcard import CardInfo, write_model_card

SELECTION = {  # train.selection -> the dev sets averaged: (STS task, dataset, its file's name part)
    "stsb": [("STSBenchmark", "STSBenchmark", "sts-dev")],
    "stsb+sick": [
        ("STSBenchmark", "STSBenchmark", "sts-dev"),
        ("SICKRelatedness", "SICK", "SICK_trial"),
    ],
}


def dev_scorer(data: Path, batch_size: int, selection: str) -> STSEvaluator:
    """The scorer of model selection: the dev sets of `selection` alone (SimCSE §3: STS-B dev;
    DCLR: STS-B dev and SICK trial), so training encodes no dev set it does not average."""
    tasks = [task for task, _, _ in SELECTION[selection]]
    return STSEvaluator(data, batch_size, STSConfig(tasks), split="dev")


def dev_metrics(selection: str) -> list[str]:
    """The metric keys `dev_scorer(..., selection)` averages."""
    return [f"{task}/dev" for task, _, _ in SELECTION[selection]]


def dev_files(root: Path, selection: str) -> list[Path]:
    """The files model selection reads; a missing one is an error before anything is built."""
    files = [
        root / f.path
        for _, dataset, part in SELECTION[selection]
        for f in DATASETS[dataset].files
        if part in Path(f.path).name
    ]
    for path in files:
        if not path.is_file():
            raise DataFormatError(
                f"{path}: not found; train.selection: {selection} selects the model on it "
                "(download it: data.datasets)"
            )
    return files


@dataclass
class TrainingJob:
    """A run ready to train: its inputs read and checked, the model loaded, its run key."""

    spec: str
    seed: int
    model: ModelConfig
    config: TrainConfig
    sentences: list[str]
    corpus: str
    encoder: Encoder
    method: CombinedMethod
    run_key: dict[str, Any]
    dev: STSEvaluator

    def dev_score(self, model: Encoder) -> float:
        """The mean of the selection's dev metrics (SimCSE §3: STS-B dev Spearman)."""
        metrics = self.dev(model)
        return float(np.mean([metrics[key] for key in dev_metrics(self.config.selection)]))

    def train(
        self,
        out: Path,
        checkpoints: Path,
        on_log: Callable[[dict[str, float], int], None] | None = None,
    ) -> TrainResult | None:
        """Train; the best model goes to `out` with its model card. None on ranks other than 0."""
        trainer = Trainer(
            self.encoder,
            self.method,
            self.config,
            self.sentences,
            self.dev_score,
            self.seed,
            checkpoints,
            self.run_key,
            on_log=on_log,
            corpus=self.corpus,
        )
        result = trainer.train(out, finish=self.write_card)
        return result if trainer.rank == 0 else None

    def metrics(self, result: TrainResult) -> dict[str, Any]:
        """The stage's metrics file (without the wall time, which the tracking run adds)."""
        return {
            "method": self.spec,
            "best_dev": result.best_score,
            "best_step": result.best_step,
            "initial_dev": result.initial_dev,
            "steps": result.steps,
            "final_loss": result.loss_curve[-1]["loss"] if result.loss_curve else None,
            "sentences": len(self.sentences),
            "selection": self.config.selection,
            "autocast": precision_used(self.config.precision, pick_device(self.config.device, 0)),
            "warnings": result.warnings,
        }

    def write_card(self, folder: Path, result: TrainResult) -> None:
        """The model card of the folder being written (`README.md`)."""
        params = {"train": self.run_key["train"], "simcse": self.run_key["simcse"]}
        params |= {name: self.run_key[name] for name in self.method.parts}
        shown = ("best_dev", "best_step", "initial_dev", "steps", "final_loss", "sentences")
        metrics = {k: v for k, v in self.metrics(result).items() if k in shown}
        metrics["selection"] = " + ".join(dev_metrics(self.config.selection))
        info = CardInfo(
            base_model=self.model.name_or_path,
            pooler=self.config.eval_pooler,
            train_max_length=self.config.max_length,
            max_length=self.encoder.max_length,
            dim=self.encoder.backbone.config.hidden_size,
            method=self.spec,
            seed=self.seed,
            params=params,
            metrics=metrics,
            corpus=f"{len(self.sentences)} sentences ({self.config.corpus} corpus)",
            warnings=result.warnings,
        )
        write_model_card(folder, info)


def probe_dev_vectors(encoder: Encoder, pooler: str, data: Path, batch_size: int) -> None:
    """Refuse, naming the model, an untrained model whose vectors of a handful of STS-B dev
    sentences with `pooler` (the evaluation pooler) cannot be scored (`probe`): its dev score,
    the first thing training computes, would be refused, and now no lock is taken yet."""
    dev = read_stsb(data, "dev")
    trained_with, encoder.pooler = encoder.pooler, pooler
    try:
        with scoring(encoder.name):
            probe(encoder, list(distinct([*dev.first, *dev.second])), batch_size)
    finally:
        encoder.pooler = trained_with


def check_params(params: Mapping[str, Any]) -> None:
    """What every training run reads, checked before anything starts (also before `torchrun`
    starts its processes, which would each print the error): the run plan, `train`, and the
    section of every method, whichever runs, since every one is a param of stage `train`: a typo
    in another method's section is an error, not a silent rerun."""
    run_plan(params)
    section(params, "train", TrainConfig)
    for entry in METHODS.values():
        section(params, entry.name, entry.config)


def prepare(spec: str, seed: int, params: Mapping[str, Any], data: Path) -> TrainingJob:
    """Check every input of a run (method spec, seed, params, corpus, dev sets, PaSeR's phrases),
    then load the model and build the method and the run key: everything that defines the run
    (params of every part, data hashes, the model's weights, the code), so a checkpoint resumes
    only the same run."""
    check_params(params)  # the experiment's method and seeds, and every method's section
    names = parse_spec(spec)
    spec = "+".join(names)
    if seed not in SEEDS:
        raise ConfigError(f"--seed: expected an integer in [0, 2**32), got {seed}")
    model_config = section(params, "model", ModelConfig)
    config = section(params, "train", TrainConfig)
    for name in ("pooler", "eval_pooler"):
        check_pooler(getattr(config, name), f"train.{name}")
    check_pooler(model_config.pooler, "model.pooler", auto=True)  # now, not after training
    sentences = list(training_corpus(data, config.corpus))
    corpus = (
        str(data / "corpus" / "train.txt")
        if config.corpus == "wiki"
        else f"the STS sets under {data} (train.corpus: sts)"
    )
    hashes = {"corpus": lines_hash(sentences), "dev": files_hash(dev_files(data, config.selection))}
    if "paser" in names:
        paser = section(params, "paser", PaSeRConfig)
        top_k = section(params, "phrases", PhrasesConfig).top_k
        if paser.mask_phrases > top_k:
            raise ConfigError(
                f"paser.mask_phrases: {paser.mask_phrases} is more than the {top_k} phrases the "
                "phrases stage keeps per sentence (phrases.top_k): raise phrases.top_k or lower it"
            )
        phrases = Path(paser.phrases)
        if not phrases.is_file():
            raise ConfigError(f"paser.phrases: {phrases}: not found; run the phrases stage first")
        hashes["phrases"] = files_hash([phrases])
    encoder = Encoder.from_pretrained(
        model_config.name_or_path,
        config.pooler,
        None,
        model_config.trust_remote_code,
        model_config.precision,
        pooler_param="train.pooler",
    )
    encoder.check_length(config.max_length, "train.max_length")
    encoder.check_pooling(config.eval_pooler, "train.eval_pooler")
    weights = model_identity(model_config.name_or_path, encoder).sha256
    method = CombinedMethod(spec, params, encoder, seed)
    method.check_corpus(sentences)  # PaSeR's phrases must be those of this corpus
    probe_dev_vectors(encoder, config.eval_pooler, data, model_config.batch_size)
    run_key = {
        "method": spec,
        "seed": seed,
        "model": {**asdict(model_config), "weights": weights},
        "train": asdict(config),
        "simcse": asdict(method.base),
        **{name: asdict(part.config) for name, part in method.parts.items()},
        "data": hashes,
        "code": source_hash(),
    }
    dev = dev_scorer(data, model_config.batch_size, config.selection)
    return TrainingJob(
        spec, seed, model_config, config, sentences, corpus, encoder, method, run_key, dev
    )


def torchrun_command(nproc: int, argv: Sequence[str]) -> list[str]:
    """`argv` (a script and its arguments) run by `nproc` processes under torchrun, on a free
    port of this machine (`--standalone`)."""
    launcher = [sys.executable, "-m", "torch.distributed.run", "--standalone"]
    return [*launcher, f"--nproc-per-node={nproc}", *argv]


def torchrun(nproc: int) -> NoReturn:
    """Replace this process by `torchrun_command` running the same command (signals and the
    exit status are then torchrun's): `train.nproc` launches the processes itself, so DVC
    records the stage as usual."""
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(sys.executable, torchrun_command(nproc, sys.argv))
