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

import torch.distributed as dist

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: support
from transformers import TrainerCallback

from sentemb.losses import MethodLoss
from sentemb.trained_parts import TrainedParts

from support.training import make_job

CAPTURED: dict = {}


class Capture(TrainerCallback):
    """The loss and the gradients the optimizer is about to take (its step's), the loss's own
    (in the model's `TrainedParts`) under the loss's names."""

    def __init__(self, loss: MethodLoss) -> None:
        self.loss = loss
        parts = loss.model[-1]
        own = parts.named_parameters() if isinstance(parts, TrainedParts) else ()
        self.own = {id(p): name for name, p in own}

    def on_pre_optimizer_step(self, args, state, control, **kwargs) -> None:
        loss = self.loss.last.clone()
        if dist.is_initialized():
            dist.all_reduce(loss, op=dist.ReduceOp.AVG)
        CAPTURED["loss"] = float(loss)
        CAPTURED["grads"] = {
            self.own.get(id(p), name.replace("model.module.", "model.")): p.grad.tolist()
            for name, p in self.loss.named_parameters()
            if p.grad is not None
        }


def main() -> None:
    model_dir, out, sentences_file, *specs = sys.argv[1:]
    sentences = json.loads(Path(sentences_file).read_text())
    rank = int(os.environ.get("RANK", "0"))
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
        job.train(work / "model", checkpoints, callbacks=[Capture(job.loss)])
        if rank == 0:
            (Path(out) / f"{spec}.json").write_text(json.dumps(CAPTURED))


if __name__ == "__main__":
    main()
