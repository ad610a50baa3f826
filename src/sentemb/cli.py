"""What every stage script shares: timestamped logging and one clear error with a non-zero exit."""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable

from sentemb.config import UserError
from sentemb.tracking import stage_clock

LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"  # 2026-11-23 10:58:25 INFO train: …
DATE_FORMAT = "%Y-%m-%d %H:%M:%S"


def run_stage(main: Callable[[], None]) -> None:
    """Run a stage's `main`; a user-facing error (`UserError`, or an `OSError` such as a full
    disk) is printed once and exits with status 1."""
    logging.basicConfig(level=logging.INFO, format=LOG_FORMAT, datefmt=DATE_FORMAT)
    try:
        with stage_clock():
            main()
    except (UserError, OSError) as err:
        print(f"error: {err}", file=sys.stderr)
        sys.exit(1)
