"""One training run as the `train` stage does it: every input checked before the model is loaded,
the run key, model selection on the dev sets, the metrics and the model card.

    job = prepare(spec, seed, params, data, corpus)  # inputs checked, model loaded, run key
    result = job.train(out, checkpoints, on_log)     # the best model (with its card) in `out`
    metrics = job.metrics(result)
"""

from __future__ import annotations

import contextlib
import logging
import shutil
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch.distributed as dist

from sentemb.config import SEEDS, ConfigError, parse_spec, run_plan, section
from sentemb.data.readers import read_corpus, read_stsb
from sentemb.encoder import Encoder
from sentemb.evaluation.base import distinct, probe, scoring
from sentemb.identity import model_identity
from sentemb.io import atomic_path
from sentemb.losses import MethodLoss, contrastive, method_loss
from sentemb.methods.base import RunShape, SentenceData
from sentemb.model_checks import check_length
from sentemb.model_config import ModelConfig
from sentemb.model_files import hidden_layers
from sentemb.pooling import check_pooler
from sentemb.precision import autocast_dtype, precision_used
from sentemb.registry import METHODS
from sentemb.st_model import st_model
from sentemb.training.build import build_trainer
from sentemb.training.callback import RunHooks, TrainResult
from sentemb.training.checkpoint import (
    exclusive,
    explain_fresh_start,
    files_hash,
    latest_checkpoint,
    lines_hash,
    params_hash,
    source_hash,
)
from sentemb.training.config import TrainConfig
from sentemb.training.modelcard import CardInfo, write_model_card
from sentemb.training.processes import pick_device, process_count, process_rank
from sentemb.training.selection import Selection, selection_of
from sentemb.training.trainer import check_run

if TYPE_CHECKING:
    from sentence_transformers import SentenceTransformer
    from transformers import TrainerCallback

log = logging.getLogger(__name__)


@dataclass
class TrainingJob:
    """A run ready to train: its inputs read and checked, the model and its loss built, its run
    key. `encoder` is the model being trained seen as the pipeline's `Encoder` (the same
    weights, the evaluation pooler): it scores the dev set and saves the best model."""

    spec: str
    seed: int
    model_config: ModelConfig
    config: TrainConfig
    sentences: list[str]
    corpus: str
    model: SentenceTransformer
    encoder: Encoder
    loss: MethodLoss
    run_key: dict[str, Any]
    dev: Selection
    sentence_data: dict[str, SentenceData[Any]] = field(default_factory=dict)

    def dev_score(self) -> float:
        """The mean of the selection's dev metrics (SimCSE §3: STS-B dev Spearman), with the
        evaluation pooler (`UnusableVectors` for vectors that cannot be scored)."""
        with scoring(self.encoder.name):
            return self.dev.score(self.encoder)

    def save_best(self, folder: Path) -> None:
        """The model as the evaluation loads it (`Encoder.save`), and what the loss keeps."""
        self.encoder.save(folder)
        self.loss.save(folder)

    def likely(self) -> list[str]:
        """The params that likely made a run diverge, with their values."""
        device = pick_device(self.config.device, 0)
        half = autocast_dtype(self.config.precision, device) is not None
        precision = [f"train.precision ({self.config.precision}; fp32 is safer)"] if half else []
        rate = [f"train.learning_rate ({self.config.learning_rate:g}) too high"]
        return rate + self.loss.unstable_params() + precision

    def train(
        self,
        out: Path,
        checkpoints: Path,
        on_log: Callable[[dict[str, float], int], None] | None = None,
        callbacks: Sequence[TrainerCallback] = (),
    ) -> TrainResult | None:
        """Train; the best model goes to `out` with its model card. None on ranks other than 0.
        `callbacks` join the trainer's (a benchmark's clock).

        Checkpoints live in `checkpoints/<run key hash>/`, so a killed run restarted with the
        same key resumes from its last complete checkpoint, and one with another key starts
        afresh saying which part differs; removed on success. One process holds the folder."""
        rank, world = process_rank(), process_count()
        check_run(self.config, len(self.sentences), self.corpus, self.loss.contrastive, world)
        if world > 1 and rank == 0:
            share = self.config.batch_size // world
            log.info("%d processes, %d sentences of each batch apiece", world, share)
        run_dir = checkpoints / params_hash(self.run_key)[:16]
        hold = exclusive(checkpoints) if rank == 0 else contextlib.nullcontext()
        with hold:
            resume = latest_checkpoint(run_dir, tidy=rank == 0) if run_dir.is_dir() else None
            if resume is None and rank == 0:
                explain_fresh_start(checkpoints, run_dir, self.run_key)
            hooks = RunHooks(
                self.dev_score,
                self.save_best,
                self.likely,
                self.run_key,
                run_dir,
                on_log or (lambda metrics, step: None),
            )
            trainer = build_trainer(self, run_dir, hooks, resume, world, callbacks)
            try:
                trainer.train(resume_from_checkpoint=None if resume is None else str(resume))
            except BaseException:
                if rank == 0:
                    tidy(run_dir)
                raise
            if world > 1:
                dist.barrier()  # every process is done with the run's folder
            result = trainer.run.result
            result.steps = trainer.state.global_step
            result.warnings = self.warnings(result) if rank == 0 else []
            if rank != 0:
                return None
            with atomic_path(out, folder=True) as tmp:
                shutil.copytree(run_dir / "best", tmp)
                self.write_card(tmp, result)
            shutil.rmtree(run_dir)
        return result

    def warnings(self, result: TrainResult) -> list[str]:
        """What says the run did not learn, each also logged: a loss that never moved, a best
        dev score below the untrained model's."""
        found = []
        losses = [point["loss"] for point in result.loss_curve]
        if len(losses) > 1 and max(losses) - min(losses) <= 1e-6 * max(1.0, abs(losses[0])):
            temperature = (
                f", simcse.temperature {self.loss.base.temperature:g}"
                if self.loss.contrastive
                else ""
            )
            found.append(
                f"the loss was {losses[0]:g} at every logged step: the model did not learn "
                f"(train.learning_rate {self.config.learning_rate:g}, "
                f"train.batch_size {self.config.batch_size}{temperature})"
            )
        if result.best_score < result.initial_dev:
            found.append(
                f"the best dev score {result.best_score:.2f} (step {result.best_step}) is below "
                f"the untrained model's {result.initial_dev:.2f}: training made the model worse "
                f"(train.learning_rate {self.config.learning_rate:g} too high?)"
            )
        for warning in found:
            log.warning("%s", warning)
        return found

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
        params |= {name: self.run_key[name] for name in self.loss.parts}
        shown = ("best_dev", "best_step", "initial_dev", "steps", "final_loss", "sentences")
        metrics = {k: v for k, v in self.metrics(result).items() if k in shown}
        metrics["selection"] = " + ".join(self.dev.keys)
        info = CardInfo(
            base_model=self.model_config.name_or_path,
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


def tidy(run_dir: Path) -> None:
    """Remove what a failed run leaves that resumes nothing: the evaluator's empty folder, and
    the run's folder when it holds no checkpoint."""
    shutil.rmtree(run_dir / "eval", ignore_errors=True)
    if run_dir.is_dir() and not any(run_dir.glob("checkpoint-*")):
        shutil.rmtree(run_dir)


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


def check_params(params: Mapping[str, Any], spec: str) -> tuple[TrainConfig, ModelConfig]:
    """What every training run reads, checked before anything starts (also before `torchrun`
    starts its processes, which would each print the error): the run plan, `train`, `model` and
    the section of every method, whichever runs, since every one is a param of stage `train`: a
    typo in another method's section is an error, not a silent rerun. Then what the run makes of
    the sections of the methods of `spec` (`MethodConfig.run_problems`: the batch, the token
    limit, the model's depth, read from its config, not its weights). Returns `train` and
    `model`, parsed."""
    run_plan(params)
    train = section(params, "train", TrainConfig)
    configs = {entry.name: section(params, entry.name, entry.config) for entry in METHODS.values()}
    model = section(params, "model", ModelConfig)
    run = RunShape(
        train.batch_size,
        train.max_length,
        model.name_or_path,
        lambda: hidden_layers(model.name_or_path, model.trust_remote_code, "model.name_or_path"),
    )
    for name in parse_spec(spec):
        for problem in configs[name].run_problems(run):
            raise ConfigError(f"{name}.{problem}")
    return train, model


def prepare(
    spec: str, seed: int, params: Mapping[str, Any], data: Path, corpus: Path
) -> TrainingJob:
    """Check every input of a run (method spec, seed, params, the `corpus` file of the corpus
    stage, the dev sets under `data`, what a method reads per sentence: PaSeR's phrases), then
    load the model and build its loss and the run key: everything that defines the run
    (params of every part, data hashes, the model's weights, the code), so a checkpoint resumes
    only the same run."""
    config, model_config = check_params(params, spec)  # the method, seeds, every section
    names = parse_spec(spec)
    spec = "+".join(names)
    if seed not in SEEDS:
        raise ConfigError(f"--seed: expected an integer in [0, 2**32), got {seed}")
    for name in ("pooler", "eval_pooler"):
        check_pooler(getattr(config, name), f"train.{name}")
    check_pooler(model_config.pooler, "model.pooler", auto=True)  # now, not after training
    sentences = list(read_corpus(corpus))
    check_run(config, len(sentences), str(corpus), contrastive(names), process_count())
    dev = selection_of(dict(params), data, model_config.batch_size)
    hashes = {"corpus": lines_hash(sentences), "dev": files_hash(dev.files)}
    sentence_data = {}
    for name in names:
        found = section(params, name, METHODS[name].config).sentence_data(params, sentences)
        if found is not None:
            sentence_data[name] = found
            hashes[name] = files_hash(found.files)
    model = st_model(
        model_config.name_or_path,
        config.pooler,
        config.max_length,
        trust_remote_code=model_config.trust_remote_code,
        attention=config.attention,
    )
    encoder = Encoder(
        model[0].auto_model,
        model[0].tokenizer,
        config.eval_pooler,
        None,
        model_config.precision,
        "train.eval_pooler",
        name=model_config.name_or_path,
        param="model.name_or_path",
    )
    check_length(encoder, config.max_length, "train.max_length")
    weights = model_identity(model_config.name_or_path, encoder).sha256
    loss = method_loss(spec, model, params, seed=seed, mlp_head=config.mlp_head)
    probe_dev_vectors(encoder, config.eval_pooler, data, model_config.batch_size)
    run_key = {
        "method": spec,
        "seed": seed,
        "model": {**asdict(model_config), "weights": weights},
        "train": asdict(config),
        "simcse": asdict(loss.base),
        **{name: asdict(part.config) for name, part in loss.parts.items()},
        "data": hashes,
        "code": source_hash(),
    }
    return TrainingJob(
        spec,
        seed,
        model_config,
        config,
        sentences,
        f"{config.corpus} ({corpus})",
        model,
        encoder,
        loss,
        run_key,
        dev,
        sentence_data,
    )
