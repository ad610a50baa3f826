"""The method interface, the registry, and the composition of methods into one objective.

Every method is a plug-in part of ONE contrastive objective built on unsupervised SimCSE
(Gao et al., 2021, eq. 1): two dropout views, InfoNCE with in-batch negatives. A part may add
extra negatives (SSCL's intermediate layers, DCLR's noise), weight the in-batch negatives (DCLR's
complementary model) or add a loss term of its own (IS-CSE's smoothing loss). `method: iscse+dclr`
builds both parts and sums what they add; nothing is copied between methods.
"""

from __future__ import annotations

import functools
import operator
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any, ClassVar

import torch
from torch import Tensor, nn

from sentemb.config import Positive, parse_spec, section
from sentemb.encoder import Encoder, EncoderOutput
from sentemb.methods.functional import gather_with_grad, info_nce
from sentemb.registry import METHODS


@dataclass
class SimCSEConfig:
    """Params section `simcse`: the base objective every method builds on."""

    temperature: Positive = 0.05


@dataclass
class Views:
    """The batch as a method sees it; the two dropout views are encoded on first use.

    `first`/`second` are the encoder outputs of this process (one forward pass over the batch
    fed twice, one dropout mask per row); `anchors`/`positives` are their pooled vectors after the
    training head, gathered across processes with gradient (the global batch). `project` pools and
    projects any hidden layer of a view the way the last one was. `tokenize` and `encode` let a
    method encode texts of its own (PaSeR's masked copies) in the same way and precision.
    """

    sentences: list[str]
    batch: dict[str, Tensor]
    tokenize: Callable[[list[str]], dict[str, Tensor]]
    encode: Callable[[dict[str, Tensor]], EncoderOutput]
    head: Callable[[Tensor], Tensor]
    project: Callable[[EncoderOutput, int], Tensor]

    @cached_property
    def pair(self) -> tuple[EncoderOutput, EncoderOutput]:
        doubled = {k: torch.cat([v, v]) for k, v in self.batch.items() if k != "token_type_ids"}
        return split_views(self.encode(doubled))

    @property
    def first(self) -> EncoderOutput:
        return self.pair[0]

    @property
    def second(self) -> EncoderOutput:
        return self.pair[1]

    @cached_property
    def anchors(self) -> Tensor:
        return gather_with_grad(self.head(self.first.pooled))

    @cached_property
    def positives(self) -> Tensor:
        return gather_with_grad(self.head(self.second.pooled))


def split_views(output: EncoderOutput) -> tuple[EncoderOutput, EncoderOutput]:
    """The two halves of a forward pass over a batch fed twice."""
    half = output.pooled.shape[0] // 2

    def take(part: slice) -> EncoderOutput:
        hidden = tuple(h[part] for h in output.hidden_states)
        return EncoderOutput(output.pooled[part], hidden, output.attention_mask[part])

    return take(slice(0, half)), take(slice(half, None))


@dataclass
class TrainState:
    """Where training is: methods with schedules (IS-CSE's α) or randomness (DCLR) read it."""

    step: int
    total_steps: int
    generator: torch.Generator


@dataclass
class Objective:
    """What the parts add to: extra negatives, in-batch negative weights, extra loss terms."""

    views: Views
    temperature: float
    extra_negatives: list[Tensor] = field(default_factory=list)
    extra_weights: list[Tensor | None] = field(default_factory=list)
    negative_weights: Tensor | None = None
    terms: dict[str, Tensor] = field(default_factory=dict)
    logs: dict[str, float] = field(default_factory=dict)

    @property
    def anchors(self) -> Tensor:
        return self.views.anchors

    @property
    def positives(self) -> Tensor:
        return self.views.positives

    def add_negatives(self, negatives: Tensor, weights: Tensor | None = None) -> None:
        self.extra_negatives.append(negatives)
        self.extra_weights.append(weights)

    def weigh_negatives(self, weights: Tensor) -> None:
        self.negative_weights = (
            weights if self.negative_weights is None else self.negative_weights * weights
        )

    def contrastive_loss(self) -> Tensor:
        """InfoNCE of the anchors against positives, in-batch and every extra negative."""
        return info_nce(
            self.anchors,
            self.positives,
            self.temperature,
            extra_negatives=self.extra_negatives or None,
            negative_weights=self.negative_weights,
            extra_weights=self.extra_weights or None,
        )


class Method(nn.Module):
    """A part of the objective. Subclasses set `name` and implement `contribute`.

    Buffers, frozen teachers and decoders are submodules or buffers, so the loop optimises and
    checkpoints them with no change. A `contrastive` part needs SimCSE's InfoNCE; an objective
    made only of non-contrastive parts (PaSeR) is the sum of their terms and never encodes the
    dropout views.
    """

    name: ClassVar[str]
    contrastive: ClassVar[bool] = True

    def __init__(self, config: Any, encoder: Encoder) -> None:
        super().__init__()
        self.config = config

    def unstable_params(self) -> tuple[str, ...]:
        """The params of its section, as configured, whose extreme values can make the loss
        non-finite: named, with their values, when a run diverges."""
        return ()

    def check_corpus(self, sentences: Sequence[str]) -> None:
        """Refuse, before training, a corpus this part cannot train on (PaSeR: phrases of
        another corpus); the default accepts any."""

    def contribute(self, objective: Objective, views: Views, state: TrainState) -> None:
        """Add this part's negatives, weights or terms to `objective`."""

    def finish(self, objective: Objective, loss: Tensor) -> Tensor:
        """Transform the total loss once every part has contributed (default: unchanged)."""
        return loss

    def after_step(self, views: Views) -> None:
        """Update state after the optimiser step (e.g. IS-CSE's FIFO buffer)."""

    def save(self, folder: Path) -> None:
        """Write what inspection needs beside the saved model (e.g. PaSeR's decoder)."""


@dataclass
class MethodOutput:
    """The loss to minimise and the scalars to log (each part's own terms)."""

    loss: Tensor
    logs: dict[str, float]


class CombinedMethod(nn.Module):
    """SimCSE's InfoNCE plus every part named in `method` (`iscse+dclr`, `sscl+dclr`, ...)."""

    def __init__(self, spec: str, params: dict[str, Any], encoder: Encoder, seed: int = 0) -> None:
        """Build the parts; their random initialisation (PaSeR's decoder) is drawn from `seed`."""
        super().__init__()
        names = parse_spec(spec)
        self.spec = "+".join(names)
        self.base = section(params, "simcse", SimCSEConfig)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            self.parts = nn.ModuleDict(
                {n: METHODS[n].cls(section(params, n, METHODS[n].config), encoder) for n in names}
            )

    @property
    def contrastive(self) -> bool:
        return any(part.contrastive for part in self.parts.values())

    def forward(self, views: Views, state: TrainState) -> MethodOutput:
        objective = Objective(views, self.base.temperature)
        for part in self.parts.values():
            part.contribute(objective, views, state)
        losses, logs = [], dict(objective.logs)
        if self.contrastive:
            loss = objective.contrastive_loss()
            for part in self.parts.values():
                loss = part.finish(objective, loss)
            losses.append(loss)
            logs["contrastive_loss"] = loss.item()
        for name, term in objective.terms.items():
            losses.append(term)
            logs[name] = term.item()
        return MethodOutput(functools.reduce(operator.add, losses), logs)

    def check_corpus(self, sentences: Sequence[str]) -> None:
        """Every part's check of the training corpus (`Method.check_corpus`)."""
        for part in self.parts.values():
            part.check_corpus(sentences)

    def after_step(self, views: Views) -> None:
        for part in self.parts.values():
            part.after_step(views)

    def save(self, folder: Path) -> None:
        for part in self.parts.values():
            part.save(folder)
