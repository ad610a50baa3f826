"""The bounds of the params that cannot train outside them: each just inside passes, just
outside is one `ConfigError` naming the param and the bound, before anything trains."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sentemb.config import ConfigError, section
from sentemb.methods.base import SimCSEConfig
from sentemb.methods.dclr import DCLRConfig
from sentemb.methods.iscse import ISCSEConfig
from sentemb.training.config import MAX_DECAY, TrainConfig
from sentemb.training.run import check_params


def below(value: float) -> float:
    return math.nextafter(value, -math.inf)


def above(value: float) -> float:
    return math.nextafter(value, math.inf)


# (section, its dataclass, key, the ends of its range, the bound as the error says it)
TEMPERATURES = [
    ("simcse", SimCSEConfig, "temperature", (1e-3, 1.0), "must be in [0.001, 1]"),
    ("dclr", DCLRConfig, "noise_temperature", (1e-3, 1.0), "must be in [0.001, 1]"),
    ("iscse", ISCSEConfig, "beta", (1e-3, None), "must be >= 0.001"),
]


@pytest.mark.parametrize(
    ("name", "cls", "key", "ends", "bound"),
    TEMPERATURES,
    ids=[f"{t[0]}.{t[2]}" for t in TEMPERATURES],
)
def test_a_temperature_just_inside_passes_and_just_outside_is_refused(
    name: str, cls: type, key: str, ends: tuple[float, float | None], bound: str
) -> None:
    low, high = ends
    outside = [below(low), 1e-300] + ([above(high), 1e300] if high is not None else [])
    for value in [low] + ([high] if high is not None else []):
        assert getattr(section({name: {key: value}}, name, cls), key) == value
    for value in outside:
        with pytest.raises(ConfigError) as err:
            section({name: {key: value}}, name, cls)
        assert str(err.value).startswith(f"{name}.{key}: {bound}"), str(err.value)


@settings(max_examples=200, deadline=None)
@given(
    learning_rate=st.floats(1e-12, 1e3, exclude_min=True),
    weight_decay=st.floats(0, 1e300),
)
def test_weight_decay_times_learning_rate_is_at_most_the_bound(
    learning_rate: float, weight_decay: float
) -> None:
    """AdamW multiplies every weight by 1 - learning_rate x weight_decay each step: a product
    past `MAX_DECAY` is refused naming both params, any other is accepted."""
    values = {"train": {"learning_rate": learning_rate, "weight_decay": weight_decay}}
    if learning_rate * weight_decay <= MAX_DECAY:
        assert section(values, "train", TrainConfig).weight_decay == weight_decay
        return
    with pytest.raises(ConfigError) as err:
        section(values, "train", TrainConfig)
    message = str(err.value)
    assert message.startswith("train.weight_decay: ") and "train.learning_rate" in message
    assert f"must be <= {MAX_DECAY}" in message


def test_weight_decay_at_the_bound_passes_and_just_past_it_is_refused() -> None:
    assert section({"train": {"learning_rate": 0.5, "weight_decay": 0.02}}, "train", TrainConfig)
    with pytest.raises(ConfigError, match=r"^train\.weight_decay: .* must be <= 0\.01"):
        section(
            {"train": {"learning_rate": 0.5, "weight_decay": above(0.02)}}, "train", TrainConfig
        )


def run(method: str, **sections: dict) -> dict:
    """Params of a run of `method` with `sections`."""
    return {"method": method, "seeds": [1], **sections}


def refusal(params: dict, spec: str) -> str | None:
    """`check_params`' error for a run of `spec` with `params`; None where it passes."""
    try:
        check_params(params, spec)
    except ConfigError as err:
        return str(err)
    return None


@pytest.mark.parametrize(
    ("ratio", "batch_size", "refused"),
    [
        (0.0, 64, False),  # off
        (0.5 / 64, 64, False),  # rounds to one noise negative
        (below(0.5 / 64), 64, True),  # rounds to none
        (1e-9, 64, True),
        (1.0, 64, False),  # the paper's
        ((2**31 - 1) / 64, 64, False),
        (2**31 / 64, 64, True),  # more than torch takes
        (1e300, 64, True),
        (1.7e308, 64, True),  # the product overflows to inf
    ],
)
def test_dclr_noise_ratio_gives_one_noise_negative_per_batch(
    ratio: float, batch_size: int, refused: bool
) -> None:
    message = refusal(
        run("dclr", train={"batch_size": batch_size}, dclr={"noise_ratio": ratio}), "dclr"
    )
    assert (message is not None) is refused
    if message:
        assert message.startswith("dclr.noise_ratio: ") and "train.batch_size 64" in message
        assert "must round to 1 to 2147483647" in message


@pytest.mark.parametrize(
    ("probability", "weight", "refused"),
    [
        (1 / 32, 1.0, False),  # one masked token expected in 32
        (below(1 / 32), 1.0, True),
        (1e-12, 1.0, True),
        (0.15, 1.0, False),  # the default
        (1e-12, 0.0, False),  # MLM off
    ],
)
def test_paser_mlm_probability_masks_a_token_a_sentence(
    probability: float, weight: float, refused: bool
) -> None:
    paser = {"mlm_probability": probability, "mlm_weight": weight}
    message = refusal(run("simcse+paser", train={"max_length": 32}, paser=paser), "simcse+paser")
    assert (message is not None) is refused
    if message:
        assert message.startswith("paser.mlm_probability: ") and "train.max_length 32" in message
        assert "mlm_probability >= 0.0312" in message


def test_bounds_set_by_another_section_bind_only_the_methods_that_run() -> None:
    check_params(
        run("simcse", dclr={"noise_ratio": 1e-9}, paser={"mlm_probability": 1e-9}), "simcse"
    )


@pytest.mark.parametrize(("layers", "refused"), [([-2], None), ([-3], -3), ([-2, -100], -100)])
def test_sscl_layers_are_checked_against_the_model_depth_when_params_are_read(
    tiny_model_dir: Path, layers: list[int], refused: int | None
) -> None:
    """The tiny BERT has 2 hidden layers: -2 is the deepest index SSCL may take; its config
    alone is read (no weights), before the corpus or the model are."""
    params = run("sscl", model={"name_or_path": str(tiny_model_dir)}, sscl={"layers": layers})
    assert refusal(params, "simcse") is None  # not a param of this run's loss
    expected = None
    if refused is not None:
        expected = (
            f"sscl.layers: {refused} is not in [-2, -2]: the model (model.name_or_path: "
            f"{tiny_model_dir}) has 2 hidden layers"
        )
    assert refusal(params, "sscl") == refusal(params, "simcse+sscl") == expected
