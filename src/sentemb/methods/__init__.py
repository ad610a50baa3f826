"""Training methods: one file each, registered by name; `functional` holds the maths they share.

Every module of this package is imported here, so a new method file registers itself with
`register_method` (no list of methods to keep by hand).
"""

import importlib
import pkgutil

from sentemb.methods.base import METHODS, CombinedMethod

for _module in pkgutil.iter_modules(__path__):
    importlib.import_module(f"{__name__}.{_module.name}")

__all__ = ["METHODS", "CombinedMethod"]
