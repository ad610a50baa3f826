"""The method interface: the parts of ONE contrastive objective built on unsupervised SimCSE.

SimCSE (Gao et al., 2021, eq. 1): two dropout views, InfoNCE with in-batch negatives. A part may
add extra negatives (SSCL's intermediate layers, DCLR's noise), weight the in-batch negatives
(DCLR's complementary model) or add a loss term of its own (IS-CSE's smoothing loss). The loss
that composes the parts (`method: iscse+dclr` builds both and sums what they add) is
`sentemb.losses.MethodLoss`; nothing is copied between methods.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import cached_property, wraps
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Generic, Protocol, TypeVar

import torch
from torch import Tensor, nn

from sentemb.config import Temperature
from sentemb.encoder import EncoderOutput
from sentemb.methods.functional import gather_with_grad, info_nce

if TYPE_CHECKING:
    from sentence_transformers import SentenceTransformer

T = TypeVar("T")


@dataclass
class RunShape:
    """What a run makes of a method's params, known before it starts: the global batch
    (`train.batch_size`), a sentence's token limit (`train.max_length`), and the model
    (`model.name_or_path`) with its depth in hidden layers, read from its config on first use."""

    batch_size: int
    max_length: int
    model: str
    read_depth: Callable[[], int] = field(repr=False)

    @cached_property
    def depth(self) -> int:
        return self.read_depth()


@dataclass
class SentenceData(Generic[T]):
    """What a method reads from the pipeline for each training sentence (PaSeR: its phrase
    spans, from the phrases stage): `rows` by sentence, and the `files` they come from, whose
    hash joins the run key. The data collator hands each batch's rows to the part's
    `BatchInputs`."""

    rows: Mapping[str, T]
    files: list[Path]


@dataclass
class MethodConfig:
    """The base of a method's params section (its dataclass, registered with the method)."""

    def run_problems(self, run: RunShape) -> list[str]:
        """What is wrong with this section for `run`, each starting with the param's key (the
        run refuses to start naming `<method>.<problem>`); [] by default."""
        return []

    def sentence_data(
        self, params: Mapping[str, Any], sentences: Sequence[str]
    ) -> SentenceData[Any] | None:
        """What the method reads per training sentence from the pipeline's outputs, checked
        against the corpus's `sentences` (`params`: every section, for the stages it reads);
        a mismatch is a `ConfigError` naming the param. None (the default): nothing."""
        return None


@dataclass
class SimCSEConfig(MethodConfig):
    """Params section `simcse`: the base objective every method builds on."""

    temperature: Temperature = 0.05


class LossMode:
    """The grad mode (inference mode too) and autocast a loss's forward runs in, to re-enter:
    every value the views compute is computed in it, whoever reads it first and from where (a
    part's log under `torch.no_grad`, a function that turns autocast off), so a tensor the
    objective differentiates is never one cached without its graph or in another precision."""

    def __init__(self, device_type: str) -> None:
        self.device_type = device_type
        self.grad = torch.is_grad_enabled()
        self.inference = torch.is_inference_mode_enabled()
        self.autocast = torch.is_autocast_enabled(device_type)
        self.dtype = torch.get_autocast_dtype(device_type)

    @contextmanager
    def __call__(self) -> Iterator[None]:
        autocast = torch.autocast(self.device_type, self.dtype, enabled=self.autocast)
        with torch.inference_mode(self.inference), torch.set_grad_enabled(self.grad), autocast:
            yield


def in_loss_mode(compute: Callable[..., T]) -> Callable[..., T]:
    """A method of `Views` that computes in the loss's mode (`LossMode`)."""

    @wraps(compute)
    def computed(views: Views, *args: Any) -> T:
        with views.mode():
            return compute(views, *args)

    return computed


@dataclass
class Views:
    """The batch as a method sees it; the two dropout views are encoded on first use.

    `batch` is the sentences' model input; `first`/`second` are this process's encoder outputs
    of it (one forward pass over the batch fed twice, one dropout mask per row);
    `anchors`/`positives` are their pooled vectors after the training head, gathered across
    processes with gradient (the global batch). `project` pools and projects any hidden layer of
    a view the way the last one was. `encode` lets a part encode inputs of its own (PaSeR's
    copies, which `inputs` holds when the data collator prepared them off the step).

    Everything here is computed in the mode the views were made in (the loss's forward:
    `LossMode`) and carries its graph: a part that wants a constant detaches it.
    """

    batch: dict[str, Any]
    _encode: Callable[[dict[str, Any]], EncoderOutput]
    _head: Callable[[Tensor], Tensor]
    _project: Callable[[EncoderOutput, int], Tensor]
    inputs: dict[str, dict[str, Tensor]] = field(default_factory=dict)
    mode: LossMode = field(init=False)

    def __post_init__(self) -> None:
        tensors = [v for v in self.batch.values() if isinstance(v, Tensor)]
        self.mode = LossMode(tensors[0].device.type if tensors else "cpu")

    @in_loss_mode
    def encode(self, features: dict[str, Any]) -> EncoderOutput:
        return self._encode(features)

    @in_loss_mode
    def project(self, view: EncoderOutput, layer: int) -> Tensor:
        return self._project(view, layer)

    @cached_property
    @in_loss_mode
    def pair(self) -> tuple[EncoderOutput, EncoderOutput]:
        doubled = {
            k: torch.cat([v, v]) if isinstance(v, Tensor) else v for k, v in self.batch.items()
        }
        return split_views(self._encode(doubled))

    @property
    def first(self) -> EncoderOutput:
        return self.pair[0]

    @property
    def second(self) -> EncoderOutput:
        return self.pair[1]

    @cached_property
    @in_loss_mode
    def anchors(self) -> Tensor:
        return gather_with_grad(self._head(self.first.pooled))

    @cached_property
    @in_loss_mode
    def positives(self) -> Tensor:
        return gather_with_grad(self._head(self.second.pooled))


def split_views(output: EncoderOutput) -> tuple[EncoderOutput, EncoderOutput]:
    """The two halves of a forward pass over a batch fed twice."""
    half = output.pooled.shape[0] // 2

    def take(part: slice) -> EncoderOutput:
        hidden = tuple(h[part] for h in output.hidden_states)
        return EncoderOutput(output.pooled[part], hidden, output.attention_mask[part])

    return take(slice(0, half)), take(slice(half, None))


@dataclass
class TrainState:
    """Where training is: methods with schedules (IS-CSE's α) or randomness (DCLR) read it.
    `total_steps` is None where the loss was not told the run's length."""

    step: int
    total_steps: int | None
    generator: torch.Generator


@dataclass
class Objective:
    """What the parts add to: extra negatives, in-batch negative weights, extra loss terms, and
    diagnostics (`logs`, tensors read only when a step is logged)."""

    views: Views
    temperature: float
    extra_negatives: list[Tensor] = field(default_factory=list)
    extra_weights: list[Tensor | None] = field(default_factory=list)
    negative_weights: Tensor | None = None
    terms: dict[str, Tensor] = field(default_factory=dict)
    logs: dict[str, Tensor | float] = field(default_factory=dict)

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


class BatchInputs(Protocol):
    """What a part needs per batch beyond the token ids (PaSeR's masked and augmented copies),
    made from the batch's texts by the data collator, off the training step (in its workers),
    or by the part itself when a plain sentence-transformers collator gave it token ids only.
    Picklable and free of model weights, since data loader workers receive it."""

    def __call__(
        self,
        texts: Sequence[str],
        rows: Sequence[Any] | None,
        seeds: Sequence[int],
    ) -> dict[str, Tensor]:
        """The inputs of `texts` (with their rows of the method's `SentenceData`, where the
        pipeline gives them: PaSeR's phrase spans); sentence i draws from `seeds[i]` alone."""


class Method(nn.Module):
    """A part of the objective. Subclasses set `name` and implement `contribute`.

    Buffers, heads and decoders are submodules or buffers of the part, so the trainer optimises
    and checkpoints them with the loss. A `contrastive` part needs SimCSE's InfoNCE; an
    objective made only of non-contrastive parts (PaSeR) is the sum of their terms and never
    encodes the dropout views. `model` is the sentence-transformers model being trained.
    """

    name: ClassVar[str]
    contrastive: ClassVar[bool] = True
    hidden_states: ClassVar[bool] = False  # needs every layer's token vectors (SSCL)

    def __init__(self, config: Any, model: SentenceTransformer) -> None:
        super().__init__()
        self.config = config

    def unstable_params(self) -> tuple[str, ...]:
        """The params of its section, as configured, whose extreme values can make the loss
        non-finite: named, with their values, when a run diverges."""
        return ()

    def batch_inputs(self) -> BatchInputs | None:
        """What this part prepares per batch from the texts (None: nothing)."""
        return None

    def contribute(self, objective: Objective, views: Views, state: TrainState) -> None:
        """Add this part's negatives, weights or terms to `objective`."""

    def finish(self, objective: Objective, loss: Tensor) -> Tensor:
        """Transform the total loss once every part has contributed (default: unchanged)."""
        return loss

    def after_step(self, views: Views) -> None:
        """Update state once the batch's loss is computed (e.g. IS-CSE's FIFO buffer)."""

    def save(self, folder: Path) -> None:
        """Write what inspection needs beside the saved model (e.g. PaSeR's decoder)."""
