"""What every command line shares: its parser, timestamped logging and one clear error with a
non-zero exit.

Each option that takes a path, a model or a revision is declared with its kind (`Parser.input`,
`Parser.output`, `Parser.model`, `Parser.revision`); the kind refuses, in one line, a value that
is empty or only spaces, has spaces at an end or a control character, or looks like an option
(`--out=--metrics`); an input that does not exist; and, once all are parsed, an output that is,
lies inside or holds an input or another output. `tests/test_cli.py` walks every command's
options.
"""

from __future__ import annotations

import argparse
import errno
import itertools
import logging
import math
import sys
import unicodedata
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Literal, NoReturn

from sentemb.clock import stage_clock
from sentemb.config import UserError

LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"  # 2026-11-23 10:58:25 INFO train: …
DATE_FORMAT = "%Y-%m-%d %H:%M:%S"
# An option's kind: an input that exists (a file, a folder or either), an output written whole
# (a file or a folder), a folder of outputs, a model, a revision.
Kind = Literal["file", "folder", "path", "output", "outputs", "model", "revision"]
INPUTS = {False: "file", True: "folder", None: "path"}


# The params that size what a stage holds in memory.
SIZES = (
    "model.batch_size, model.max_length, train.batch_size, train.max_length, data.corpus_size, "
    "iscse.buffer_size, dclr.noise_ratio, refine.corpus_size, refine.pairs, refine.valid_pairs, "
    "eval.retrieval.query_chunk, eval.retrieval.chunk_cells, compare.resamples"
)
# What torch's RuntimeErrors say of a failed allocation: on a CPU, by CUDA, by cuBLAS.
ALLOCATION_FAILED = ("can't allocate memory", "out of memory", "ALLOC_FAILED")


def out_of_memory(err: BaseException) -> bool:
    """A failed allocation: Python's or NumPy's `MemoryError`, the kernel's ENOMEM (a fork or a
    map it refuses), torch's on a CPU (`DefaultCPUAllocator: can't allocate memory`) or a GPU
    (`OutOfMemoryError`, `CUDA error: out of memory`, `CUBLAS_STATUS_ALLOC_FAILED`)."""
    return (
        isinstance(err, MemoryError)
        or (isinstance(err, OSError) and err.errno == errno.ENOMEM)
        or type(err).__name__ == "OutOfMemoryError"
        or (isinstance(err, RuntimeError) and any(m in str(err) for m in ALLOCATION_FAILED))
    )


def run_stage(main: Callable[[], None]) -> None:
    """Run a stage's `main`; a user-facing error (`UserError`, an `OSError` such as a full disk,
    an allocation larger than the machine has) is printed once and exits with status 1. (Memory
    the kernel grants and then cannot back ends the process with SIGKILL: no message can.)"""
    logging.basicConfig(level=logging.INFO, format=LOG_FORMAT, datefmt=DATE_FORMAT)
    try:
        with stage_clock():
            main()
    except (UserError, OSError, MemoryError, RuntimeError) as err:
        if out_of_memory(err):
            said = " ".join(str(err).split())[:300]
            print(
                f"error: out of memory ({type(err).__name__}: {said}): where a size param asks "
                f"for more than this machine holds, lower it in params.yaml ({SIZES})",
                file=sys.stderr,
            )
        elif isinstance(err, (UserError, OSError)):
            print(f"error: {err}", file=sys.stderr)
        else:
            raise
        sys.exit(1)


def text(value: str, what: str) -> str:
    """`value` when it can name a `what`; else `argparse.ArgumentTypeError` saying why."""
    if not value.strip():
        raise argparse.ArgumentTypeError(f"an empty {what}")
    if value != value.strip():
        raise argparse.ArgumentTypeError(f"{value!r}: a {what} with spaces at an end")
    if any(unicodedata.category(c) in ("Cc", "Zl", "Zp") for c in value):
        raise argparse.ArgumentTypeError(f"{value!r}: a {what} with a control character")
    if value.startswith("-"):
        raise argparse.ArgumentTypeError(
            f"{value!r} looks like an option, not a {what} (a path that starts with '-': ./{value})"
        )
    return value


def points(value: str) -> float:
    """The `type` of a noise level: a finite number of score points >= 0."""
    try:
        number = float(value)
    except ValueError:
        number = math.nan
    if not 0 <= number < math.inf:
        raise argparse.ArgumentTypeError(f"must be a finite number >= 0, got {value!r}")
    return number


def existing(folder: bool | None) -> Callable[[str], Path]:
    """The `type` of an input: a file (`folder=False`), a folder (True) or either (None)."""
    what = INPUTS[folder]

    def check(value: str) -> Path:
        path = Path(text(value, f"{what} path"))
        if not path.exists():
            raise argparse.ArgumentTypeError(f"{value}: no such {what}")
        if folder is not None and path.is_dir() != folder:
            raise argparse.ArgumentTypeError(
                f"{value}: a {'file' if folder else 'folder'}, not a {what}"
            )
        return path

    return check


def program() -> str:
    """The command line that started this process, as `--help` shows it: `python -m
    sentemb.review.compare`, `python stages/train.py` (argparse alone says `compare.py`)."""
    spec = getattr(sys.modules["__main__"], "__spec__", None)
    return f"python -m {spec.name}" if spec else f"python {sys.argv[0]}"


class Parser(argparse.ArgumentParser):
    """`argparse` with kinds for the options that name paths, models and revisions, and usage
    errors in one line (`error: argument --out: …`, status 2)."""

    def __init__(self, description: str | None = None, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", argparse.RawDescriptionHelpFormatter)
        if "prog" not in kwargs:
            kwargs["prog"] = program()
        super().__init__(description=description, **kwargs)
        self.kinds: dict[str, Kind] = {}  # an option's dest -> its kind
        self.sometimes: set[str] = set()  # inputs that only some params read

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"error: {message}\n")

    def _add(self, kind: Kind, flags: Sequence[str], **kwargs: Any) -> argparse.Action:
        action = self.add_argument(*flags, **kwargs)
        self.kinds[action.dest] = kind
        return action

    def input(
        self, *flags: str, folder: bool | None = None, always: bool = True, **kwargs: Any
    ) -> argparse.Action:
        """A file (`folder=False`), folder (True) or either (None) that must exist; one that
        only some params read (`always=False`) is checked by its reader, if it is read."""
        kind = INPUTS[folder]
        if always:
            return self._add(kind, flags, type=existing(folder), **kwargs)
        self.sometimes.add(flags[-1])
        return self._add(kind, flags, type=lambda v: Path(text(v, f"{kind} path")), **kwargs)

    def output(self, *flags: str, **kwargs: Any) -> argparse.Action:
        """A path the command writes whole: a file, or a folder it replaces."""
        return self._add("output", flags, type=lambda v: Path(text(v, "path")), **kwargs)

    def outputs(self, *flags: str, **kwargs: Any) -> argparse.Action:
        """A folder the command writes files into (metrics, plots), keeping the others."""
        return self._add("outputs", flags, type=lambda v: Path(text(v, "path")), **kwargs)

    def model(self, *flags: str, **kwargs: Any) -> argparse.Action:
        """A model: a Hugging Face hub name or a local folder (checked where it loads)."""
        return self._add("model", flags, type=lambda v: text(v, "model name or folder"), **kwargs)

    def revision(self, *flags: str, **kwargs: Any) -> argparse.Action:
        """A git revision or DVC experiment name (checked by the tool that reads it)."""
        return self._add("revision", flags, type=lambda v: text(v, "revision"), **kwargs)

    def parse_args(self, args: Sequence[str] | None = None, namespace: Any = None) -> Any:
        parsed = super().parse_args(args, namespace)
        self.check_overlap(parsed)
        return parsed

    def check_overlap(self, parsed: argparse.Namespace) -> None:
        """Refuse a path written that is a path read or another one written, or lies inside a
        folder read (writing would change what the command reads) or inside a folder output
        replaced whole; and a file or folder replaced whole that holds another path named."""
        flags = {a.dest: (a.option_strings or [a.dest])[-1] for a in self._actions}
        for dest in self.kinds:  # argparse reads `--out=--` as an empty list
            if isinstance(getattr(parsed, dest, None), list):
                self.error(f"argument {flags[dest]}: expected one value")
        named = [
            (dest, kind, value, Path(value).resolve())
            for dest, kind in self.kinds.items()
            if (value := getattr(parsed, dest, None)) is not None
            and (kind != "model" or Path(value).exists())  # a hub name is no path
        ]
        written = ("output", "outputs")
        for (dest, kind, value, path), (
            other,
            other_kind,
            other_value,
            there,
        ) in itertools.permutations(named, 2):
            if kind not in written:
                continue
            if path == there:
                relation = "is"
            elif there in path.parents and other_kind != "outputs":
                relation = "lies inside"
            elif path in there.parents and kind == "output":
                relation = "holds"
            else:
                continue
            what = "another output" if other_kind in written else "an input"
            self.error(
                f"argument {flags[dest]}: {value} {relation} {what}, "
                f"{flags[other]} {other_value}: choose another path"
            )


def run(main: Callable[[], None]) -> None:
    """`run_stage(main)`, and Ctrl-C ends it with status 130 and no traceback."""
    try:
        run_stage(main)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        sys.exit(130)
