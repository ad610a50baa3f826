"""One training step of a tiny job per spec through the trainer, alone or under torchrun:
writes each spec's loss (averaged over the processes) and every trainable gradient as the
optimizer gets it (averaged, before clipping), from rank 0, as JSON in OUT/SPEC.json. The specs
run one after another in the same processes: starting them costs more than the steps.

    python ddp_worker.py MODEL OUT SENTENCES.json SPEC [SPEC ...]
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import torch
import torch.distributed as dist

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: support
from sentemb.training.trainer import Trainer

from support.training import make_job

CAPTURED: dict = {}


def capture(self: Trainer, model: torch.nn.Module) -> torch.Tensor:
    norm = clip(self, model)
    loss = self.loss.last.clone()
    if dist.is_initialized():
        dist.all_reduce(loss, op=dist.ReduceOp.AVG)
    CAPTURED["loss"] = float(loss)
    CAPTURED["grads"] = {
        name.replace("model.module.", "model."): p.grad.tolist()
        for name, p in self.loss.named_parameters()
        if p.grad is not None
    }
    return norm


clip = Trainer._clip_grad_norm


def main() -> None:
    model_dir, out, sentences_file, *specs = sys.argv[1:]
    sentences = json.loads(Path(sentences_file).read_text())
    rank = int(os.environ.get("RANK", "0"))
    Trainer._clip_grad_norm = capture
    for spec in specs:
        work = Path(out) / spec
        checkpoints = work / "ck"  # one folder for every process, as the stage has
        job = make_job(
            Path(model_dir),
            spec,
            checkpoints,
            dropout_free=True,
            max_steps=1,
            max_grad_norm=0.0,
            sentences=sentences,
            method_params={"paser": {"augment": ["synonym", "swap"], "augment_ratio": 0.3}},
        )
        CAPTURED.clear()
        job.train(work / "model", checkpoints)
        if rank == 0:
            (Path(out) / f"{spec}.json").write_text(json.dumps(CAPTURED))


if __name__ == "__main__":
    main()
