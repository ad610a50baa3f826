"""Run by `torchrun --nproc_per_node=2`: one step's loss and averaged gradients, as JSON."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import torch.distributed as dist

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: support
from support.training import make_trainer


def main() -> None:
    model_dir, spec, out = sys.argv[1:4]
    rank = int(os.environ["RANK"])
    trainer = make_trainer(
        Path(model_dir), spec, Path(out).parent / f"ck{rank}", dropout_free=True, precision="fp32"
    )
    logs, _ = trainer.compute_gradients(0)
    if trainer.rank == 0:
        grads = {
            name: p.grad.tolist()
            for name, p in trainer.encoder.named_parameters()
            if p.grad is not None
        }
        Path(out).write_text(json.dumps({"loss": logs["loss"], "grads": grads}))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
