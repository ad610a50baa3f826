"""Git, run as a subprocess: the one place the project calls it."""

from __future__ import annotations

import subprocess
from pathlib import Path

SECONDS = 30  # a git command that runs longer (a hung credential prompt, a lock) has failed


def run(*args: str, cwd: str | Path | None = None) -> subprocess.CompletedProcess[bytes]:
    """Git's run of `args` in `cwd`, its output captured as bytes; a git that is missing or
    hangs past `SECONDS` reads as a failed run (return code 127), never an exception."""
    command = ["git", *args]
    try:
        return subprocess.run(command, cwd=cwd, capture_output=True, timeout=SECONDS)
    except (OSError, subprocess.TimeoutExpired) as err:
        return subprocess.CompletedProcess(command, 127, b"", str(err).encode())


def succeeds(*args: str, cwd: str | Path | None = None) -> bool:
    """Whether git exits 0 for `args` in `cwd` (a question such as ``merge-base --is-ancestor``)."""
    return run(*args, cwd=cwd).returncode == 0


def output(*args: str, cwd: str | Path | None = None, strip: bool = True) -> str | None:
    """Git's standard output for `args` in `cwd` as text, or None where git fails."""
    done = run(*args, cwd=cwd)
    if done.returncode != 0:
        return None
    text = done.stdout.decode(errors="replace")
    return text.strip() if strip else text
