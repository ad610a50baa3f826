"""Every method's gradient against central finite differences of the same loss (issue 67).

A loss can be right to the last digit and still train the wrong thing: SSCL's anchors were once
cached without a graph, so the anchor side of InfoNCE got no gradient while every value test
passed. Here autograd's gradient of the training loss, with respect to every trainable weight
(the encoder, SimCSE's head, a part's own modules), is checked against
``(L(θ + εv) - L(θ - εv)) / 2ε`` along a random direction ``v`` of each group of weights: a
reference that shares nothing with the backward pass.

The cases come from the registry: every method alone, every ordered two-part join (the order
decides which part reads the views first), and the variants of `VARIANTS` that change the
objective. The model is a 3-layer random BERT in fp64, dropout off, initialised wide enough that
its [CLS] vectors differ (at BERT's default init they are nearly equal, DCLR then drops every
negative and any gradient test passes: `test_the_sentences_are_told_apart` holds that).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import torch

from sentemb.losses import MethodLoss, method_loss
from sentemb.methods import dclr
from sentemb.registry import METHODS

from support.models import random_bert
from support.training import paser_params

EPS = 1e-5  # central differences in fp64: truncation ~ε², rounding ~1e-16/ε
RTOL, ATOL = 1e-6, 1e-9
SENTENCES = [  # eight sentences of different words and lengths
    "the cat sat on the warm mat",
    "stock markets fell sharply after the announcement",
    "she plays the violin in a small orchestra",
    "heavy rain flooded the northern valley roads overnight",
    "a new vaccine was approved",
    "children built a sandcastle near the old pier",
    "the committee postponed its final vote until march",
    "quantum computers may break current encryption schemes",
]
TOTAL_STEPS = 20  # IS-CSE's cosine α reads the run's length; the loss stands at step 5

# the switches that change an objective, by method; a method not named here runs its defaults
VARIANTS: dict[str, list[dict]] = {
    "sscl": [
        {"variant": "batch", "average_with_simcse": True},
        {"variant": "batch", "average_with_simcse": False},
        {"variant": "self", "average_with_simcse": False},
        {"variant": "batch", "layers": [-2, -3]},
    ],
    "iscse": [
        {"retrieval": "knn"},
        {"retrieval": "kmeans"},
        {"alpha_schedule": "cosine"},
    ],
    "dclr": [
        {"noise_ratio": 0.0},
        {"noise_ratio": 1.0, "ascent_steps": 0},
        {"noise_ratio": 1.0, "ascent_steps": 4},
    ],
    "paser": [
        {"mlm_weight": 1.0, "generative_weight": 1.0},
        {"mlm_weight": 0.0},
        {"generative_weight": 0.0},
    ],
}
SMALL = {  # sizes that fit a batch of 8 sentences of a 16-dim model
    "iscse": {"buffer_size": 24, "k": 4, "clusters": 3, "kmeans_iterations": 3},
    "paser": {"decoder_layers": 1, "max_target_length": 8},
}


def cases() -> Iterator[tuple[str, dict]]:
    """(spec, sections): each method with each of its variants, every ordered two-part join
    with the parts' defaults, and the documented join `iscse+dclr` with each DCLR variant."""
    for name in METHODS:
        for variant in VARIANTS.get(name, [{}]):
            yield name, {name: variant}
    for first, second in itertools.permutations(METHODS, 2):
        yield f"{first}+{second}", {}
    for variant in VARIANTS["dclr"]:
        yield "iscse+dclr", {"dclr": variant}


CASES = list(cases())


def case_id(case: tuple[str, dict]) -> str:
    spec, sections = case
    switches = [f"{k}={v}" for section in sections.values() for k, v in section.items()]
    return "-".join([spec, *switches]).replace(" ", "")


@pytest.fixture(scope="module")
def wide_model_dir(tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 3-layer, 16-dim random BERT, no dropout, weights drawn with std 0.5 (not 0.02): the
    [CLS] vectors of different sentences differ. The tiny model's tokenizer."""
    return random_bert(
        tmp_path_factory.mktemp("wide-bert"),
        tiny_model_dir,
        seed=1,
        hidden_size=16,
        num_hidden_layers=3,
        num_attention_heads=2,
        intermediate_size=32,
        max_position_embeddings=64,
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
        initializer_range=0.5,
    )


@pytest.fixture(scope="module")
def phrases(tmp_path_factory: pytest.TempPathFactory) -> dict:
    return paser_params(tmp_path_factory.mktemp("phrases"), SENTENCES)


def build(folder: Path, spec: str, sections: dict, phrases: dict) -> MethodLoss:
    """The loss of `spec` on a fresh fp64 copy of the model, in eval mode (no dropout, no
    buffer update), standing at step 5 of 20; IS-CSE's buffer full of random unit rows."""
    from sentemb.st_model import st_model

    model = st_model(str(folder), "cls_before_pooler", 32, device="cpu")
    params = {name: dict(values) for name, values in SMALL.items()}
    params["paser"] |= {"phrases": phrases["phrases"]}
    for name, values in sections.items():
        params[name] = params.get(name, {}) | values
    loss = method_loss(spec, model, params, seed=3, total_steps=TOTAL_STEPS)
    loss.double().eval()
    loss.step = 5
    if "iscse" in loss.parts:
        iscse = loss.parts["iscse"]
        rows = torch.randn(iscse.buffer.shape, generator=torch.Generator().manual_seed(4))
        iscse.buffer.copy_(torch.nn.functional.normalize(rows.double(), dim=-1))
        iscse.filled = iscse.buffer.shape[0]
    return loss


def loss_function(loss: MethodLoss) -> Callable[[], torch.Tensor]:
    """The training loss of a fixed batch, as the trainer sums its terms; every call draws the
    parts' randomness (DCLR's noise, PaSeR's masks, IS-CSE's K-means start) from the same
    generator state, so the loss is a function of the weights alone."""
    features = loss.model.tokenize(SENTENCES)
    start = loss.get_extra_state()

    def value() -> torch.Tensor:
        loss.set_extra_state(start)
        terms = loss([dict(features)])
        return sum(terms.values())

    return value


def groups(loss: MethodLoss) -> dict[str, list[torch.nn.Parameter]]:
    """The trainable weights by owner: the encoder, the head, each part's own modules."""
    found = {
        "encoder": [p for p in loss.model.parameters() if p.requires_grad],
        "head": list(loss.head.parameters()),
        **{
            name: [p for p in part.parameters() if p.requires_grad]
            for name, part in loss.parts.items()
        },
    }
    return {name: params for name, params in found.items() if params}


def directional(value: Callable[[], torch.Tensor], params: list, direction: list) -> float:
    """``(L(θ + εv) - L(θ - εv)) / 2ε`` along `direction`, the weights restored after."""
    results = []
    with torch.no_grad():
        for sign in (1.0, -1.0):
            for p, v in zip(params, direction, strict=True):
                p.add_(v, alpha=sign * EPS)
            results.append(float(value()))
            for p, v in zip(params, direction, strict=True):
                p.sub_(v, alpha=sign * EPS)
    return (results[0] - results[1]) / (2 * EPS)


@pytest.fixture
def frozen_noise(monkeypatch: pytest.MonkeyPatch) -> None:
    """DCLR's noise after its ascent, held at the first call's: the paper detaches it (DCLR
    note 1), so it is a constant of the loss, while its ascent reads the anchors; finite
    differences would otherwise see the noise move with the weights."""
    ascent, kept = dclr.non_uniformity_ascent, []

    def once(noise: torch.Tensor, anchors: torch.Tensor, **kwargs: object) -> torch.Tensor:
        if not kept:
            kept.append(ascent(noise, anchors, **kwargs))
        return kept[0].clone()

    monkeypatch.setattr(dclr, "non_uniformity_ascent", once)


@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_gradient_equals_finite_differences(
    wide_model_dir: Path, phrases: dict, frozen_noise: None, case: tuple[str, dict]
) -> None:
    spec, sections = case
    loss = build(wide_model_dir, spec, sections, phrases)
    value = loss_function(loss)
    found = groups(loss)
    every = [p for params in found.values() for p in params]
    for p in every:
        p.grad = None
    value().backward()
    generator = torch.Generator().manual_seed(7)
    checked = {}
    for name, params in found.items():
        direction = [torch.randn(p.shape, generator=generator, dtype=p.dtype) for p in params]
        norm = torch.sqrt(sum((v * v).sum() for v in direction))
        direction = [v / norm for v in direction]
        autograd = sum(
            float((p.grad * v).sum())
            for p, v in zip(params, direction, strict=True)
            if p.grad is not None
        )
        numeric = directional(value, params, direction)
        checked[name] = (autograd, numeric)
    wrong = {
        name: pair
        for name, pair in checked.items()
        if abs(pair[0] - pair[1]) > ATOL + RTOL * max(abs(pair[0]), abs(pair[1]))
    }
    assert not wrong, f"{spec} {sections}: autograd vs finite differences by group: {wrong}"


def test_the_cases_cover_every_method_and_join() -> None:
    """A new method file is tested without editing this one: alone, and joined both ways."""
    specs = {spec for spec, _ in CASES}
    assert set(METHODS) <= specs
    assert {f"{a}+{b}" for a, b in itertools.permutations(METHODS, 2)} <= specs
    assert set(VARIANTS) <= set(METHODS)


def test_the_sentences_are_told_apart(wide_model_dir: Path, phrases: dict) -> None:
    """The model's [CLS] vectors differ: DCLR's frozen copy drops only some negatives (φ 0.9),
    so its weights shape the gradient the tests above check."""
    loss = build(wide_model_dir, "dclr", {}, phrases)
    features = loss.model.tokenize(SENTENCES)
    with torch.no_grad():
        vectors = torch.nn.functional.normalize(loss.encode(features).pooled, dim=-1)
    cosines = vectors @ vectors.T
    off_diagonal = cosines[~torch.eye(8, dtype=torch.bool)]
    assert float(off_diagonal.max()) < 0.99
    assert float((off_diagonal < 0.9).double().mean()) > 0.5


CONTRASTIVE = sorted({spec for spec, _ in CASES if spec != "paser"})


@pytest.mark.parametrize("spec", CONTRASTIVE)
def test_a_training_forward_leaves_the_views_with_their_graph(
    wide_model_dir: Path, phrases: dict, spec: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Whichever part reads the anchors and positives first (SSCL under `no_grad` for its log,
    DCLR for its complementary model), a training forward leaves them with their graph."""
    loss = build(wide_model_dir, spec, {}, phrases)
    loss.train()
    seen = []
    objective = loss.objective

    def keep(views, state):
        seen.append(views)
        return objective(views, state)

    monkeypatch.setattr(loss, "objective", keep)
    loss([dict(loss.model.tokenize(SENTENCES))])
    assert seen[0].anchors.requires_grad and seen[0].positives.requires_grad
