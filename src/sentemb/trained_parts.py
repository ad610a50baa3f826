"""A loss's own trainable modules in the model it trains (`TrainedParts`), so any trainer's
zero_grad, clipping, DDP and checkpoints cover them as the model's (`sentemb.losses`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sentence_transformers.base.modules import Module
from torch import Tensor, nn

from sentemb.methods.base import Method


class TrainedParts(Module):
    """A loss's own trainable modules as the model's last module, under the loss's names
    (`head`, `parts.paser`), the modules themselves (so the trainer's weight decay knows their
    LayerNorms); the forward passes the features on. Saved with the model's checkpoints;
    loaded from one, it holds the saved tensors under the same names, which the trainer's
    resume copies into the live one."""

    def __init__(self, parts: Mapping[str, nn.Module | Tensor] | None = None) -> None:
        super().__init__()
        for name, value in (parts or {}).items():
            *path, leaf = name.split(".")
            module: nn.Module = self
            for step in path:
                if step not in dict(module.named_children()):
                    module.add_module(step, nn.Module())
                module = module.get_submodule(step)
            if isinstance(value, nn.Module):
                module.add_module(leaf, value)
            else:  # a saved tensor, weight or buffer alike: only copied from
                module.register_buffer(leaf, value)

    def forward(self, features: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        return features

    def save(
        self, output_path: str, *args: Any, safe_serialization: bool = True, **kw: Any
    ) -> None:
        self.save_torch_weights(output_path, safe_serialization)

    @classmethod
    def load(cls, model_name_or_path: str, subfolder: str = "", **kwargs: Any) -> TrainedParts:
        hub = ("token", "cache_folder", "revision", "local_files_only")
        found = {key: kwargs[key] for key in hub if key in kwargs}
        return cls(cls.load_torch_weights(model_name_or_path, subfolder=subfolder, **found))


def own_modules(module: nn.Module, theirs: set[int], name: str) -> dict[str, nn.Module]:
    """The top-most modules under `module` (named `name`) whose weights are all trainable and
    none the model's (`theirs`: ids), and which keep no state of the loss (a buffer, as
    IS-CSE's; extra state; a part itself), by dotted name: what goes in the model."""
    weights = list(module.parameters())
    if all(id(p) in theirs for p in weights):  # none, or the model's
        return {}
    stateful = type(module).get_extra_state is not nn.Module.get_extra_state
    if (
        all(p.requires_grad and id(p) not in theirs for p in weights)
        and next(module.buffers(), None) is None
        and not stateful
        and not isinstance(module, Method)
    ):
        return {name: module}
    found: dict[str, nn.Module] = {}
    for child, submodule in module.named_children():
        found |= own_modules(submodule, theirs, f"{name}.{child}")
    return found
