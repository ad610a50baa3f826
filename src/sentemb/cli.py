"""What every stage script shares: logging set-up and one clear error with a non-zero exit."""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable

from sentemb.config import UserError


def run_stage(main: Callable[[], None]) -> None:
    """Run a stage's `main`; a user-facing error (`UserError`, or an `OSError` such as a full
    disk) is printed once and exits with status 1."""
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    try:
        main()
    except (UserError, OSError) as err:
        print(f"error: {err}", file=sys.stderr)
        sys.exit(1)
