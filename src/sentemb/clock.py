"""A stage's wall clock: started by `sentemb.cli.run_stage`, so a metrics file's `seconds`
covers input checks and model loading done before its MLflow run opens; and how a progress
line says the time left."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator

SECONDS = "seconds"  # a metrics file's wall time of its stage: not a result, never compared
_clock: dict[str, float] = {}  # the stage's start, while `stage_clock` runs


def stage_started() -> float:
    """When the running stage started (`time.perf_counter`); now outside `stage_clock`."""
    return _clock.get("started", time.perf_counter())


def time_left(seconds: float) -> str:
    """An estimate of time left as people read it: `~40 s`, `~14 min`, `~3 h`, `~1,500,000 h`."""
    if seconds < 60:
        return f"~{round(seconds)} s left"
    if seconds < 2 * 3600:
        return f"~{round(seconds / 60)} min left"
    return f"~{round(seconds / 3600):,} h left"


@contextlib.contextmanager
def stage_clock() -> Iterator[None]:
    """The stage's wall clock (`stage_started`) runs from here (`sentemb.cli.run_stage`),
    so `seconds` covers input checks and model loading done before the MLflow run opens; a run
    opened outside it starts its own clock."""
    _clock["started"] = time.perf_counter()
    try:
        yield
    finally:
        _clock.pop("started", None)
