"""The registry of refinements: one file each with its params sub-section, and the `refine`
section's errors."""

from __future__ import annotations

import dataclasses

import pytest

from sentemb.config import ConfigError, read_yaml, section
from sentemb.refine.config import RefineConfig
from sentemb.registry import REFINEMENTS

from support import REPO

# --- the registry: a refinement is one file with its params sub-section ----------------------


def test_refinements_are_the_package_files_each_with_its_params_section() -> None:
    assert set(REFINEMENTS) == set(REFINEMENTS.names())
    sections = {f.name: f.type for f in dataclasses.fields(RefineConfig)}
    params = read_yaml(REPO / "params.yaml")["refine"]
    for name, entry in REFINEMENTS.items():
        assert (entry.cls.name, entry.cls.__module__) == (name, f"sentemb.refine.{name}")
        assert sections[name] is entry.config  # `refine.<name>`: the class it registered
        assert name in params
    assert section({"refine": params}, "refine", RefineConfig).methods == params["methods"]


def test_unknown_refinement_is_one_error_naming_the_known_ones() -> None:
    with pytest.raises(ConfigError) as caught:
        section({"refine": {"methods": ["repal", "whiten", "pca"]}}, "refine", RefineConfig)
    assert str(caught.value) == (
        f"refine.methods: unknown ['whiten', 'pca']; the refinements are {list(REFINEMENTS)}"
    )
    with pytest.raises(ConfigError, match=r"refine: unknown key\(s\) \['whitenin'\]; known keys"):
        section({"refine": {"whitenin": {"dim": 8}}}, "refine", RefineConfig)
