"""The one source of names for the extension points that are files: methods, refinements and
evaluation suites (fairseq's registry shape).

Each `Registry` maps a name to the class registered under it with its params dataclass: a file
of the package decorates its class with `register(name, config)`, and the first read of the
registry imports every module of the package but the shared ones, so a new file registers itself
and nothing else is edited. A module registers the class named after its file, so the names are
also read, without importing anything (`names`), by the params check of `config`. Everything
else (the stages, reports, the leaderboard, the tests) reads the registry.

Poolers are no registry: see `sentemb.pooling`.
"""

from __future__ import annotations

import importlib
import importlib.util
import pkgutil
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

T = TypeVar("T", bound=type)


@dataclass(frozen=True)
class Entry:
    """A registered class: its name (its file's and its params section's), the class, the
    dataclass its params section is read into, and its place among the others (`order`)."""

    name: str
    cls: Any
    config: type
    order: int = 0


class Registry(Mapping[str, Entry]):
    """Name -> `Entry` for the modules of `package`; the modules named in `shared` (the
    interface and the code the entries share) register nothing. Read in `order`, then by name.
    """

    def __init__(self, kind: str, package: str, shared: tuple[str, ...]) -> None:
        self.kind, self.package, self.shared = kind, package, shared
        self.entries: dict[str, Entry] = {}  # filled by `register`; read through the mapping
        self.imported = False

    def register(self, name: str, config: type, order: int = 0) -> Callable[[T], T]:
        """Class decorator: register the class as `name` with its params dataclass `config`
        (and sets its `name`)."""

        def register(cls: T) -> T:
            cls.name = name
            self.entries[name] = Entry(name, cls, config, order)
            return cls

        return register

    def names(self) -> tuple[str, ...]:
        """The registered names as the package's files give them, sorted, importing none."""
        folders = importlib.util.find_spec(self.package).submodule_search_locations
        modules = pkgutil.iter_modules(folders)
        return tuple(sorted(m.name for m in modules if m.name not in self.shared))

    def import_all(self) -> None:
        """Import every module of the package that registers one (once): each registers itself.
        A module that fails to import fails every read, never leaves a registry short of it."""
        if not self.imported:
            for name in self.names():
                importlib.import_module(f"{self.package}.{name}")
            self.imported = True

    def __getitem__(self, name: str) -> Entry:
        self.import_all()
        return self.entries[name]

    def __iter__(self) -> Iterator[str]:
        self.import_all()
        ordered = sorted(self.entries.values(), key=lambda e: (e.order, e.name))
        return iter([entry.name for entry in ordered])

    def __len__(self) -> int:
        self.import_all()
        return len(self.entries)


METHODS = Registry("method", "sentemb.methods", shared=("base", "functional"))
REFINEMENTS = Registry("refinement", "sentemb.refine", ("base", "config", "fit", "store", "wrap"))
SUITES = Registry("suite", "sentemb.evaluation", ("base", "classify", "encoders", "mteb_bridge"))

register_method = METHODS.register
register_refinement = REFINEMENTS.register
register_suite = SUITES.register
