"""The registries (`sentemb.registry`) are the one source of names of methods, refinements and
suites: each module of a package but the shared ones registers the class named after its file,
with its params dataclass, and the names read without importing are the registered ones."""

from __future__ import annotations

import importlib
import pkgutil

import pytest

from sentemb import registry
from sentemb.registry import Registry

REGISTRIES = {name: r for name, r in vars(registry).items() if isinstance(r, Registry)}


def test_the_registries() -> None:
    assert sorted(REGISTRIES) == ["METHODS", "REFINEMENTS", "SUITES"]


@pytest.mark.parametrize("name", sorted(REGISTRIES))
def test_each_module_registers_the_class_named_after_it(name: str) -> None:
    found = REGISTRIES[name]
    package = importlib.import_module(found.package)
    modules = {m.name for m in pkgutil.iter_modules(package.__path__)}
    assert set(found.shared) <= modules  # no stale shared name
    assert set(found) == set(found.names()) == modules - set(found.shared)
    for key, entry in found.items():
        assert (entry.name, entry.cls.name) == (key, key)
        assert entry.cls.__module__ == f"{found.package}.{key}"
        assert callable(entry.config)  # its params section's dataclass


def test_every_method_section_is_a_method_config() -> None:
    """The run checks every method's section through `MethodConfig.run_problems`: a section
    that is no `MethodConfig` would have no such check to call."""
    from sentemb.methods.base import Method, MethodConfig
    from sentemb.registry import METHODS

    for entry in METHODS.values():
        assert issubclass(entry.config, MethodConfig), entry.name
        assert issubclass(entry.cls, Method), entry.name
