"""The method classes and their composition, against hand-computed values on 3 x 2 tensors."""

from __future__ import annotations

import math

import pytest
import torch

from sentemb.config import ConfigError
from sentemb.encoder import EncoderOutput
from sentemb.losses import MethodLoss
from sentemb.methods.base import TrainState, Views

# unit vectors; cos(anchor_i, positive_j) = [[1, 0, 0], [0, 1, -1], [-1, 0, 0]]
ANCHORS = torch.tensor([[1.0, 0.0], [0.0, 1.0], [-1.0, 0.0]])
POSITIVES = torch.tensor([[1.0, 0.0], [0.0, 1.0], [0.0, -1.0]])
E = math.e
# -log softmax of the diagonal at τ = 1, row by row
SIMCSE = (math.log(E + 2) - 1 + math.log(1 + E + 1 / E) - 1 + math.log(2 + 1 / E)) / 3


def views(intermediate: torch.Tensor | None = None) -> Views:
    """Views whose dropout pair is (ANCHORS, POSITIVES), through an identity head."""
    both = torch.cat([ANCHORS, POSITIVES])
    return Views(
        {},
        lambda batch: EncoderOutput(both, (both,), torch.ones(6, 1)),
        lambda x: x,
        lambda view, layer: intermediate if intermediate is not None else ANCHORS,
    )


def state() -> TrainState:
    return TrainState(0, 10, torch.Generator().manual_seed(0))


class Loss:
    """A method's loss with the objective's terms summed, as the trainer sums them."""

    def __init__(self, loss: MethodLoss) -> None:
        self.inner = loss

    def __call__(self, views: Views, state: TrainState):
        terms, logs = self.inner.objective(views, state)
        return Output(sum(terms.values()), {**{k: float(v) for k, v in terms.items()}, **logs})

    def __getattr__(self, name: str):
        return getattr(self.inner, name)


class Output:
    def __init__(self, loss: torch.Tensor, logs: dict) -> None:
        self.loss, self.logs = loss, {k: float(v) for k, v in logs.items()}


def build(spec: str, tiny_st, **sections: dict) -> Loss:
    return Loss(MethodLoss(tiny_st, spec, {"simcse": {"temperature": 1.0}, **sections}))


def test_simcse_by_hand(tiny_st) -> None:
    output = build("simcse", tiny_st)(views(), state())
    assert output.loss.item() == pytest.approx(SIMCSE, rel=1e-6)


def test_unknown_or_repeated_method_is_an_error(tiny_st) -> None:
    with pytest.raises(ConfigError, match="unknown"):
        build("simcse+dlcr", tiny_st)
    with pytest.raises(ConfigError, match="distinct"):
        build("sscl+sscl", tiny_st)


@pytest.mark.parametrize(
    ("spec", "sections", "message"),
    [
        (
            "iscse",
            {"iscse": {"buffer_size": 8, "k": 16}},
            r"iscse.k: must be in \[1, buffer_size=8\]",
        ),
        ("dclr", {"dclr": {"phi": 1.5}}, r"dclr.phi: must be in \[0, 1\]"),
        (
            "simcse",
            {"simcse": {"temperature": -0.05}},
            r"simcse.temperature: must be in \[0.001, 1\]",
        ),
        ("simcse", {"simcse": {"temperature": float("nan")}}, r"temperature: expected a finite"),
        ("iscse", {"iscse": {"beta": float("nan")}}, r"iscse.beta: expected a finite"),
        (
            "iscse",
            {"iscse": {"alpha_start": 0.05, "alpha_end": 0.005}},
            r"iscse.alpha_end: must be >= alpha_start \(0.05\), got 0.005",
        ),
        ("dclr", {"dclr": {"sigma": 0.0}}, r"dclr.sigma: must be > 0, got 0.0"),
        ("dclr", {"dclr": {"ascent_lr": float("nan")}}, r"dclr.ascent_lr: expected a finite"),
        ("paser", {"paser": {"m": float("nan")}}, r"paser.m: expected a finite number, got nan"),
        ("sscl", {"sscl": {"layr": 4}}, r"sscl: unknown key\(s\) \['layr'\]"),
        ("paser", {"paser": {"decoder_layers": "six"}}, r"paser.decoder_layers: expected int"),
    ],
)
def test_bad_method_params_name_the_param(tiny_st, spec: str, sections: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        build(spec, tiny_st, **sections)


def test_sscl_self_adds_own_intermediate_vector(tiny_st) -> None:
    # own intermediate vector = (0, 1) for every sentence: cos with anchors = [0, 1, 0]
    inter = torch.tensor([[0.0, 1.0]] * 3)
    method = build("sscl", tiny_st, sscl={"variant": "self", "average_with_simcse": False})
    loss = method(views(inter), state()).loss.item()
    expected = (
        math.log(E + 2 + 1) - 1 + math.log(1 + E + 1 / E + E) - 1 + math.log(2 + 1 / E + 1)
    ) / 3
    assert loss == pytest.approx(expected, rel=1e-6)


def test_sscl_batch_average_is_mean_with_and_without(tiny_st) -> None:
    inter = torch.tensor([[0.0, 1.0]] * 3)
    averaged = build("sscl", tiny_st)(views(inter), state()).loss.item()
    alone = build("sscl", tiny_st, sscl={"average_with_simcse": False})
    with_negatives = alone(views(inter), state()).loss.item()
    assert averaged == pytest.approx((with_negatives + SIMCSE) / 2, rel=1e-6)
    # batch variant: 6 shared negatives (both views' vectors, all equal to (0, 1))
    expected = (
        math.log(E + 2 + 6) - 1 + math.log(1 + E + 1 / E + 6 * E) - 1 + math.log(2 + 1 / E + 6)
    ) / 3
    assert with_negatives == pytest.approx(expected, rel=1e-6)


def test_iscse_adds_weighted_smoothing_once_buffer_has_k_rows(tiny_st) -> None:
    method = build("iscse", tiny_st, iscse={"buffer_size": 4, "k": 1, "beta": 1.0})
    first = method(views(), state())
    assert "iscse/weighted_smoothing" not in first.logs
    # the buffer needs 32-dim rows to match the tiny encoder; use 2-dim views' own width
    method.parts["iscse"].buffer = torch.zeros(4, 2)
    method.parts["iscse"].after_step(views())
    second = method(views(), state())
    assert second.logs["iscse/alpha"] == 0.1
    assert second.loss.item() == pytest.approx(
        SIMCSE + 0.1 * second.logs["iscse/smoothing_loss"], rel=1e-6
    )


def test_dclr_zeroes_negatives_the_complementary_model_finds_similar(
    tiny_st, monkeypatch: pytest.MonkeyPatch
) -> None:
    method = build("dclr", tiny_st, dclr={"noise_ratio": 0.0, "phi": 0.9})
    sims = torch.tensor([[1.0, 0.95, 0.0], [0.95, 1.0, 0.0], [0.0, 0.0, 1.0]])
    monkeypatch.setattr(method.parts["dclr"], "_complementary_similarities", lambda v: sims)
    output = method(views(), state())
    # sentences 0 and 1 are false negatives of each other: those two terms leave the denominators
    expected = (math.log(E + 1) - 1 + math.log(E + 1 / E) - 1 + math.log(2 + 1 / E)) / 3
    assert output.loss.item() == pytest.approx(expected, rel=1e-6)
    assert output.logs["dclr/zeroed_share"] == pytest.approx(2 / 6)


def linear_views(weight: torch.Tensor) -> Views:
    """Views of a real batch whose encoder is a linear map (`weight`), through a tanh head."""
    batch = {"input_ids": torch.tensor([[1.0, 2.0], [3.0, -1.0]])}
    encode = lambda features: EncoderOutput(  # noqa: E731
        features["input_ids"] @ weight, (features["input_ids"] @ weight,), torch.ones(4, 1)
    )
    return Views(batch, encode, torch.tanh, lambda view, layer: view.pooled)


READERS = {
    "no_grad": torch.no_grad,
    "inference_mode": torch.inference_mode,
    "autocast off": lambda: torch.autocast("cpu", enabled=False),
}


@pytest.mark.parametrize("reader", READERS.values(), ids=READERS.keys())
@pytest.mark.parametrize("value", ["anchors", "positives", "pair", "encode", "project"])
def test_views_compute_in_the_loss_mode_whoever_reads_first(reader, value: str) -> None:
    """A value first read under `no_grad`, in inference mode or with autocast off (a part's
    log, an fp32 helper) is the one the objective then differentiates: it has the graph and
    the precision of the forward the views were made in (here bf16 autocast with grad)."""
    weight = torch.randn(2, 3, requires_grad=True)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        views = linear_views(weight)
    reads = {
        "anchors": lambda: views.anchors,
        "positives": lambda: views.positives,
        "pair": lambda: views.first.pooled,
        "encode": lambda: views.encode(views.batch).pooled,
        "project": lambda: views.project(views.pair[1], -2),
    }
    with reader():
        first = reads[value]()
    assert first.requires_grad and first.dtype == torch.bfloat16
    assert reads[value]() is first or value in ("encode", "project")
    first.float().sum().backward()
    assert weight.grad is not None and weight.grad.abs().sum() > 0
