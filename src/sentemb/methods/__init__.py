"""Training methods: one file each, registered by name; `functional` holds the shared maths."""

from sentemb.methods import dclr, iscse, paser, simcse, sscl
from sentemb.methods.base import METHODS, CombinedMethod

__all__ = ["METHODS", "CombinedMethod", "dclr", "iscse", "paser", "simcse", "sscl"]
