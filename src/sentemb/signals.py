"""SIGTERM as an exception, so a stage stopped by `kill`, a job scheduler or torchrun unwinds
like Ctrl-C: its cleanups run and it exits with status 143 (128 + 15)."""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from typing import Any


class Terminated(SystemExit):
    """SIGTERM arrived: unwinds the stage like Ctrl-C, then exits with status 128 + 15, quietly."""

    def __init__(self) -> None:
        super().__init__(128 + signal.SIGTERM)


def _raise_terminated(signum: int, frame: Any) -> None:
    raise Terminated


@contextlib.contextmanager
def sigterm_raises() -> Iterator[None]:
    """While inside, SIGTERM raises `Terminated` (in the main thread, where Python runs signal
    handlers) unless someone else already handles it; the earlier handler is restored after."""
    if (
        threading.current_thread() is not threading.main_thread()
        or signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL
    ):
        yield
        return
    signal.signal(signal.SIGTERM, _raise_terminated)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
