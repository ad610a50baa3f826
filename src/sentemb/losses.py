"""Every training method as a sentence-transformers loss, trained by its trainer.

    from sentence_transformers import SentenceTransformer, SentenceTransformerTrainer
    from sentemb.losses import method_loss

    model = SentenceTransformer("bert-base-uncased")
    loss = method_loss("iscse+dclr", model)   # or one method's: DCLRLoss(model, DCLRConfig())
    SentenceTransformerTrainer(model=model, train_dataset=sentences, loss=loss).train()

`train_dataset` has one column of sentences. Each loss is unsupervised SimCSE's objective
(Gao et al., 2021, eq. 1: two dropout views of each sentence in one forward pass, InfoNCE over
the in-batch negatives at temperature 0.05, a fresh dense + tanh head over the pooled vector in
training only) with the parts of its method (`sentemb.methods`). `MethodLoss` composes the parts
of any spec, from params.yaml's sections (their defaults where absent); each method's file has
its own loss class, its section typed (`SSCLLoss(model, SSCLConfig(layers=[-2, -3]))`, a
`OneMethodLoss`). What a method trains besides the model lives in the loss, as `GISTEmbedLoss`
holds its guide model: the head, IS-CSE's buffer, DCLR's frozen complementary model, PaSeR's
decoder and MLM head. PaSeR finds its phrases itself (RAKE) unless the data collator of
`sentemb.training.data` hands it the pipeline's.

The loss puts its own trainable weights (the head, PaSeR's decoder) in the model, as its last
module (`TrainedParts`, which passes the features on): whichever trainer trains the model then
zeroes, clips, averages (DDP) and checkpoints them as the model's. Save the encoder without it
(`del model[-1]`; the pipeline saves its `Encoder`). Under DDP they are used outside the
model's forward: train with `ddp_find_unused_parameters=False` (the loss refuses a DDP model
that looks for unused parameters). Under several processes (`torchrun`), the
vectors are gathered with gradient, so the negatives are those of the global batch, and a mean
over items scales by the global count: the average of the processes' gradients is the
single-process gradient of the global batch.
"""

from __future__ import annotations

import functools
import operator
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Generic, TypeVar

import torch
from torch import Tensor, nn

from sentemb.config import parse_spec, section
from sentemb.encoder import EncoderOutput
from sentemb.methods.base import BatchInputs, Objective, SimCSEConfig, TrainState, Views
from sentemb.registry import METHODS
from sentemb.trained_parts import TrainedParts, own_modules

if TYPE_CHECKING:
    from sentence_transformers import SentenceTransformer

C = TypeVar("C")  # a method's params dataclass


def contrastive(names: Iterable[str]) -> bool:
    """Whether a spec of these method names trains with SimCSE's InfoNCE (and its head)."""
    return any(METHODS[name].cls.contrastive for name in names)


class MLPHead(nn.Module):
    """SimCSE's training-only head: dense + tanh over the pooled vector."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.dense = nn.Linear(dim, dim)

    def forward(self, x: Tensor) -> Tensor:
        return torch.tanh(self.dense(x))


class MethodLoss(nn.Module):
    """SimCSE's InfoNCE plus every part `spec` names (`iscse+dclr`, `sscl+dclr`, ...).

    `params` holds params.yaml sections (`simcse`, the methods'); a missing one takes its
    defaults. The head and the parts' random initialisation (PaSeR's decoder), and the parts'
    random draws (DCLR's noise, IS-CSE's K-means), come from `seed`. `total_steps` is the run's
    length, which only IS-CSE's cosine α schedule reads. `forward` returns the loss's terms,
    which the trainer sums; `logs()` gives the last step's terms and diagnostics. The model's
    `TrainedParts` are this loss's: a loss built later on the same model replaces them.
    """

    def __init__(
        self,
        model: SentenceTransformer,
        spec: str = "simcse",
        params: Mapping[str, Any] | None = None,
        *,
        seed: int = 0,
        mlp_head: bool = True,
        total_steps: int | None = None,
    ) -> None:
        super().__init__()
        params = dict(params or {})
        names = parse_spec(spec)
        if isinstance(model[-1], TrainedParts):  # an earlier loss's: no longer trained
            del model[-1]
        self.spec, self.model, self.total_steps = "+".join(names), model, total_steps
        self.base = section(params, "simcse", SimCSEConfig)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            dim = model.get_embedding_dimension()
            self.head = MLPHead(dim) if mlp_head and contrastive(names) else nn.Identity()
            self.parts = nn.ModuleDict(
                {n: METHODS[n].cls(section(params, n, METHODS[n].config), model) for n in names}
            )
        self.step = 0  # training forward passes so far (IS-CSE's α, resumed with the loss)
        self.seed, self._generator = seed, None
        self._generator_state: Tensor | None = None  # a resumed state, for the generator to be
        self.last = torch.zeros(())  # the last loss, for the trainer's finiteness check
        self._last: dict[str, Tensor | float] = {}  # the last training step's terms, diagnostics
        # the model's own modules (lists: they are the model's, not the loss's): its Transformer,
        # and the modules after it (pooling), which pool an intermediate layer as the last
        self._transformer, self._pooling = [model[0]], [list(model)[1:]]
        layers = [*self.parts.values(), *self._pooling[0]]  # SSCL, a pooler averaging layers
        self.hidden_states = any(getattr(part, "hidden_states", False) for part in layers)
        theirs = {id(p) for p in model.parameters()}
        own = own_modules(self.head, theirs, "head")
        for name, part in self.parts.items():
            own |= own_modules(part, theirs, f"parts.{name}")
        self._own = [p for module in own.values() for p in module.parameters()]
        mine = theirs | {id(p) for p in self._own}
        left = [n for n, p in self.named_parameters() if p.requires_grad and id(p) not in mine]
        if left:
            raise TypeError(
                f"{left}: trainable weights of a module that also keeps frozen weights or the "
                "loss's state; give them a submodule of their own"
            )
        self._own_names = tuple(f"{name}." for name in own)
        if own:
            model.append(TrainedParts(own))

    def own_parameters(self) -> list[nn.Parameter]:
        """The loss's own trainable parameters (the head's, the parts': PaSeR's decoder), which
        it put in the model (`TrainedParts`)."""
        return self._own

    @property
    def contrastive(self) -> bool:
        return any(part.contrastive for part in self.parts.values())

    def batch_inputs(self) -> dict[str, BatchInputs]:
        """What each part prepares per batch from the texts (PaSeR), by part name: the data
        collator makes these off the step, in the order of `forward`'s extra features."""
        found = {name: part.batch_inputs() for name, part in self.parts.items()}
        return {name: inputs for name, inputs in found.items() if inputs is not None}

    @property
    def generator(self) -> torch.Generator:
        """The parts' random draws, on the model's device (made at the first use, once the
        trainer has placed the model), seeded with `seed` or resumed."""
        device = next(iter(self._transformer[0].parameters())).device
        if self._generator is None or self._generator.device != device:
            self._generator = torch.Generator(device).manual_seed(self.seed)
            if self._generator_state is not None:
                self._generator.set_state(self._generator_state)
        return self._generator

    def get_extra_state(self) -> dict[str, Any]:
        return {"step": self.step, "generator": self.generator.get_state()}

    def set_extra_state(self, state: dict[str, Any]) -> None:
        self.step = int(state["step"])
        self._generator, self._generator_state = None, state["generator"]

    def state(self) -> dict[str, Any]:
        """What a checkpoint keeps of the loss beside the model (whose checkpoint has its
        weights and the loss's own, `TrainedParts`): buffers and random draws, so a resumed run
        continues with the same ones."""
        return {k: v for k, v in self.state_dict().items() if self.kept(k)}

    def kept(self, key: str) -> bool:
        """Whether the loss's `state` keeps the entry `key` of its state dict."""
        return not key.startswith(("model.", *self._own_names))

    def load_state(self, state: Mapping[str, Any]) -> None:
        missing, unexpected = self.load_state_dict(dict(state), strict=False)
        missing = [key for key in missing if self.kept(key)]
        if missing or unexpected:
            raise KeyError(f"loss state: missing {missing}, unexpected {unexpected}")

    def encode(self, features: dict[str, Any]) -> EncoderOutput:
        """One forward pass of the model being trained (through its DDP or compiled wrapper),
        with every layer's token vectors where a part or the pooler reads them (SSCL)."""
        with every_layer(self._transformer[0], self.hidden_states):
            out = self.model(features)
        hidden = out.get("all_layer_embeddings") or (out["token_embeddings"],)
        return EncoderOutput(out["sentence_embedding"], tuple(hidden), out["attention_mask"])

    def project(self, view: EncoderOutput, layer: int) -> Tensor:
        """Hidden layer `layer` of a view pooled as the last one is (the model's pooling
        modules), then the training head."""
        if layer == -1:
            return self.head(view.pooled)
        below = view.hidden_states[: len(view.hidden_states) + layer + 1]
        features = {
            "token_embeddings": below[-1],
            "all_layer_embeddings": below,
            "attention_mask": view.attention_mask,
        }
        for module in self._pooling[0]:
            features = module(features)
        return self.head(features["sentence_embedding"])

    def forward(
        self, sentence_features: Iterable[dict[str, Any]], labels: Tensor | None = None
    ) -> dict[str, Tensor]:
        """The loss's terms for one batch (`objective`). The first features are the
        sentences; any further ones are the parts' prepared inputs, in the order of
        `batch_inputs`. In training, the parts' state (IS-CSE's buffer) then takes the batch."""
        if self._own and getattr(self.model, "find_unused_parameters", False):
            raise RuntimeError(
                "DDP looks for unused parameters (find_unused_parameters), but the loss's own "
                "weights in the model (TrainedParts) are used outside its forward: train with "
                "ddp_find_unused_parameters=False"
            )
        batch, *extra = sentence_features
        inputs = dict(zip(self.batch_inputs(), extra, strict=False))
        views = Views(batch, self.encode, self.head, self.project, inputs)
        training = self.model.training
        state = TrainState(self.step, self.total_steps, self.generator)
        terms, logs = self.objective(views, state)
        self.last = functools.reduce(operator.add, terms.values()).detach()
        if training:
            self.step += 1
            with torch.no_grad():
                for part in self.parts.values():
                    part.after_step(views)
            self._last = {k: v.detach() for k, v in terms.items()} | dict(logs)
        return terms

    def objective(
        self, views: Views, state: TrainState
    ) -> tuple[dict[str, Tensor], dict[str, Tensor | float]]:
        """The terms of the objective and the parts' diagnostics: `contrastive_loss` (SimCSE's
        InfoNCE with what the parts add to it) and the parts' own terms
        (`iscse/weighted_smoothing`, `paser/generative`, ...)."""
        objective = Objective(views, self.base.temperature)
        for part in self.parts.values():
            part.contribute(objective, views, state)
        terms = {}
        if self.contrastive:
            loss = objective.contrastive_loss()
            for part in self.parts.values():
                loss = part.finish(objective, loss)
            terms["contrastive_loss"] = loss
        return terms | objective.terms, objective.logs

    def logs(self) -> dict[str, float]:
        """The last training step's loss, terms and the parts' diagnostics (reads the device:
        call it where the step is logged). The step's own values, not a mean since the last
        call, so a resumed run logs what an uninterrupted one does."""
        values = {key: float(value) for key, value in self._last.items()}
        return {"loss": float(self.last)} | values if values else {}

    def unstable_params(self) -> list[str]:
        """The params (with values) whose extreme values likely made a run diverge."""
        likely = (
            [f"simcse.temperature ({self.base.temperature:g}) too low"] if self.contrastive else []
        )
        return likely + [
            f"{name}.{key} ({getattr(part.config, key):g})"
            for name, part in self.parts.items()
            for key in part.unstable_params()
        ]

    def save(self, folder: Path) -> None:
        """What the parts keep beside the saved model (PaSeR's decoder)."""
        for part in self.parts.values():
            part.save(folder)


@contextmanager
def every_layer(transformer: nn.Module, wanted: bool) -> Iterator[None]:
    """While the model runs, make sentence-transformers' `Transformer` module hand every
    layer's token vectors (`all_layer_embeddings`) to the pooling modules, where `wanted`.

    It does so only where its backbone's config says `output_hidden_states` (6.1:
    `Transformer.forward`); no argument of a call asks for it (a feature of that name reaches
    the backbone, whose layers are then dropped). So the switch is flipped for this call of the
    model alone, and only for a loss that reads the layers: no other forward ever sees it.
    `tests/test_losses.py::test_no_call_argument_gives_every_layer` fails once the library
    takes such an argument, and this can go.
    """
    if not wanted:
        yield
        return
    config = transformer.auto_model.config
    before, config.output_hidden_states = config.output_hidden_states, True
    try:
        yield
    finally:
        config.output_hidden_states = before


class OneMethodLoss(MethodLoss, Generic[C]):
    """The loss of one method, its section given typed: `config` (the method's params
    dataclass, the paper's defaults where None) and SimCSE's base (`simcse`, its temperature).
    Each method's file defines its own (`SSCLLoss(model, SSCLConfig(layers=[-2, -3]))`); a
    config is checked as params.yaml's section is."""

    method: ClassVar[str]

    def __init__(
        self,
        model: SentenceTransformer,
        config: C | None = None,
        *,
        simcse: SimCSEConfig | None = None,
        seed: int = 0,
        mlp_head: bool = True,
        total_steps: int | None = None,
    ) -> None:
        sections: dict[str, Any] = {"simcse": simcse or SimCSEConfig()}
        if config is not None:
            sections[self.method] = config
        super().__init__(
            model, self.method, sections, seed=seed, mlp_head=mlp_head, total_steps=total_steps
        )


def method_losses() -> dict[str, type[OneMethodLoss]]:
    """Each registered method's loss class (a `OneMethodLoss` in its file), by method name."""
    METHODS.import_all()
    return {cls.method: cls for cls in OneMethodLoss.__subclasses__()}


def method_loss(
    spec: str,
    model: SentenceTransformer,
    params: Mapping[str, Any] | None = None,
    **options: Any,
) -> MethodLoss:
    """The loss of any method spec, `+` joins included, with the params.yaml sections in
    `params` (defaults where absent); `options`: `seed`, `mlp_head`, `total_steps`."""
    names, params = parse_spec(spec), dict(params or {})
    if len(names) > 1:
        return MethodLoss(model, spec, params, **options)
    name = names[0]
    config = section(params, name, METHODS[name].config)
    base = section(params, "simcse", SimCSEConfig)
    return method_losses()[name](model, config, simcse=base, **options)
