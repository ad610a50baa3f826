"""A fitted refinement on disk: JSON numbers and safetensors (no pickle) in one folder, with the
identity of the model each language's fits were made on, refused around any other model."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from pathlib import Path

import numpy as np

from sentemb.config import ConfigError, from_dict
from sentemb.identity import ModelIdentity
from sentemb.io import atomic_path
from sentemb.phrases import IDF_FILE, IdfTable, read_idf, write_idf
from sentemb.refine.base import Fitted, RefinementMismatch
from sentemb.refine.config import RefineConfig, SharedRefineConfig
from sentemb.registry import REFINEMENTS

STATE_FILE = "refinement.json"
TENSOR_FILE = "refinement.safetensors"


def save_refinement(
    folder: Path,
    config: SharedRefineConfig,
    fitted: Mapping[str, Fitted],
    idf: IdfTable | None,
    models: Mapping[str, ModelIdentity],
) -> None:
    """Write the fits (JSON + safetensors, no pickle) in one atomic rename, with the identity
    of the encoder each language's fits were made on (`models`: english, chinese).
    """
    from safetensors.numpy import save_file

    scopes: dict[str, dict[str, float]] = {}
    tensors: dict[str, np.ndarray] = {}
    for scope, fits in fitted.items():
        scopes[scope] = {}
        for name, entry in REFINEMENTS.items():  # one order, whatever `refine.methods` says
            if name in fits:
                scalars, arrays = entry.cls.save(fits[name])
                scopes[scope] |= scalars
                tensors |= {f"{scope}/{key}": value for key, value in arrays.items()}
    with atomic_path(folder, folder=True) as tmp:
        tmp.mkdir()
        state = {
            "config": dataclasses.asdict(config),
            "models": {language: dataclasses.asdict(m) for language, m in models.items()},
            "scopes": scopes,
        }
        (tmp / STATE_FILE).write_text(json.dumps(state, indent=1) + "\n", encoding="utf-8")
        save_file({k: np.ascontiguousarray(v) for k, v in tensors.items()}, tmp / TENSOR_FILE)
        if idf is not None:
            write_idf(tmp, idf)


def load_refinement(
    folder: Path, models: Mapping[str, ModelIdentity]
) -> tuple[SharedRefineConfig, dict[str, Fitted], dict[str, float] | None]:
    """Read what `save_refinement` wrote, for the encoders `models` (by language) it will refine.

    The config is checked like a params section. A refinement fitted on another model (other
    weights, pooler or width) than one of `models`, or recording none, is `RefinementMismatch`;
    tensors whose width is not the recorded model's are refused as damaged.
    """
    from safetensors.numpy import load_file

    damaged = f"{folder}: not a refinement written by the refine stage"
    try:
        state = json.loads((folder / STATE_FILE).read_text(encoding="utf-8"))
        tensors = load_file(folder / TENSOR_FILE)
        recorded = {k: ModelIdentity(**v) for k, v in state.get("models", {}).items()}
        scopes = dict(state["scopes"])
        config_values = state["config"]
    except (OSError, ValueError, TypeError, KeyError) as err:
        raise ConfigError(f"{damaged}: {type(err).__name__}: {err}") from err
    config = from_dict(RefineConfig, config_values, f"{folder / STATE_FILE}: config")
    for language, given in models.items():
        if language not in recorded:
            raise RefinementMismatch(
                f"{folder}: records no model its {language} fits were made on (written before "
                "refinements recorded one); re-run the refine stage"
            )
        if not recorded[language].same_vectors(given):
            raise RefinementMismatch(
                f"{folder}: its {language} refinement was fitted on {recorded[language]}, not "
                f"on {given}; re-run the refine stage with --model {given.model}"
            )
    for key, tensor in tensors.items():
        model = recorded.get(key.split("/")[0])
        if model is not None and tensor.shape[:1] != (model.dim,):
            raise ConfigError(
                f"{damaged}: {key} has shape {tensor.shape}, but the model it records gives "
                f"{model.dim}-dim vectors; re-run the refine stage"
            )
    fitted: dict[str, Fitted] = {}
    try:
        for scope, scalars in scopes.items():
            prefix = f"{scope}/"
            arrays = {k[len(prefix) :]: v for k, v in tensors.items() if k.startswith(prefix)}
            fitted[scope] = {n: REFINEMENTS[n].cls.load(scalars, arrays) for n in config.methods}
    except (ValueError, TypeError, KeyError) as err:
        raise ConfigError(f"{damaged}: {type(err).__name__}: {err}") from err
    idf = read_idf(folder) if (folder / IDF_FILE).is_file() else None
    return config, fitted, idf
