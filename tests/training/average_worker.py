"""Run by `torchrun --nproc_per_node=2`: `average_gradients` where the ranks reached different
parameters; each rank writes the gradients it ends with to `<out>.<rank>.json`."""

from __future__ import annotations

import json
import os
import sys

import torch
import torch.distributed as dist

from sentemb.training.loop import average_gradients

# rank -> the gradient of each of 3 parameters (None: the rank's loss never reached it)
GRADS = {0: [[1.0, 2.0], None, None], 1: [[3.0, 4.0], [2.0, 2.0], None]}


def main() -> None:
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    params = [torch.nn.Parameter(torch.zeros(2)) for _ in GRADS[rank]]
    for p, grad in zip(params, GRADS[rank], strict=True):
        p.grad = None if grad is None else torch.tensor(grad)
    average_gradients(params, 2, torch.device("cpu"))
    grads = [None if p.grad is None else p.grad.tolist() for p in params]
    with open(f"{sys.argv[1]}.{rank}.json", "w", encoding="utf-8") as f:
        json.dump(grads, f)
    dist.destroy_process_group()


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    main()
