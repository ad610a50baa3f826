"""Every command's options that name a path, a model or a revision: each has a kind
(`sentemb.cli.Parser`), and every kind refuses empty, blank, option-like and control-character
values, missing inputs and outputs that overlap an input or another output, in one line."""

from __future__ import annotations

import argparse
import contextlib
import errno
import functools
import io
import re
import runpy
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from sentemb import cli
from sentemb.cli import Parser
from sentemb.config import load_params

from support import REPO
from support.stages import run_stage

SRC = REPO / "src" / "sentemb"
MAIN = 'if __name__ == "__main__":'
# Every command line: the stages and the modules run with `python -m` (but `progress`, which
# hands its arguments to `dvc repro`).
COMMANDS = sorted(
    [*(REPO / "stages").glob("*.py")]
    + [p for p in SRC.glob("*.py") if MAIN in p.read_text() and p.stem != "progress"]
)
# Options that name no path, model or revision: a choice, a number or free text.
PLAIN = {"help", "suites", "method", "seed", "noise", "language", "sentences", "tasks", "all"}
PLAIN |= {"command", "targets"}  # remote: passed on to `dvc pull`
HOSTILE = ["", "   ", "x ", " x", "-x", "--metrics", "a\nb", "a\tb", "a\x00b"]


def build(command: Path) -> Parser:
    return runpy.run_path(str(command), run_name="cli")["parser"]()


def valid(parser: Parser, dest: str, folder: Path) -> str:
    """A value of `dest`'s kind that passes (an input is made under `folder`)."""
    kind = parser.kinds.get(dest)
    path = folder / dest
    if kind in ("folder", "path"):
        path.mkdir(exist_ok=True)
    elif kind == "file":
        path.write_text("x")
    return {"model": "org/model", "revision": "HEAD"}.get(kind or "", str(path))


def required(parser: Parser, folder: Path, leave: str = "") -> list[str]:
    """Valid values of every option with a kind and every required one (all but `leave`), so
    that no default (`data/raw`) is read from the working folder; positionals come last."""
    args: list[str] = []
    positionals: list[str] = []
    later = False  # positionals after `leave` are left out: they would take its place
    for action in parser._actions:
        later = later or (action.dest == leave and not action.option_strings)
        positional = not action.option_strings
        wanted = (
            action.required or (positional and action.nargs == "+") or action.dest in parser.kinds
        )
        if action.dest == leave or not wanted or (later and not action.option_strings):
            continue
        value = "1" if action.type is int else valid(parser, action.dest, folder)
        if not positional:
            args += [action.option_strings[-1], value]
        else:
            positionals.append(value)
    return args + positionals


def refusal(parser: Parser, args: list[str]) -> str:
    """The one stderr line of a parse that must fail with status 2."""
    stderr = io.StringIO()
    with contextlib.redirect_stderr(stderr), pytest.raises(SystemExit) as exit:
        parser.parse_args(args)
    assert exit.value.code == 2, args
    lines = stderr.getvalue().splitlines()
    assert len(lines) == 1, lines
    return lines[0]


def options(kinds: tuple[str, ...]) -> list[tuple[Path, str, str]]:
    """(command, dest, flag) of every option of those `kinds`."""
    found = []
    for command in COMMANDS:
        parser = build(command)
        for action in parser._actions:
            if parser.kinds.get(action.dest) in kinds:
                flag = (action.option_strings or [action.dest])[-1]
                found.append((command, action.dest, flag))
    return found


NAMED = options(("file", "folder", "path", "output", "outputs", "model", "revision"))
IDS = [f"{c.stem}:{flag}" for c, _, flag in NAMED]


@pytest.mark.parametrize("command", COMMANDS, ids=[c.stem for c in COMMANDS])
def test_every_option_of_every_command_has_a_kind(command: Path) -> None:
    """A new path option added with a bare `add_argument` would take anything: the class is
    closed by requiring a kind for every option but numbers, choices and free text."""
    parser = build(command)
    assert isinstance(parser, Parser)
    bare = [a.dest for a in parser._actions if a.dest not in parser.kinds and a.dest not in PLAIN]
    assert not bare, f"{command.name}: options without a kind: {bare}"


@pytest.mark.parametrize(("command", "dest", "flag"), NAMED, ids=IDS)
@settings(max_examples=20, deadline=None)
@given(value=st.sampled_from(HOSTILE) | st.text(min_size=1).map(lambda t: f"-{t}"))
def test_a_hostile_value_is_one_line_naming_the_option(
    command: Path, dest: str, flag: str, value: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    parser = build(command)
    folder = tmp_path_factory.mktemp("cli")
    args = [
        *required(parser, folder, leave=dest),
        f"{flag}={value}" if flag.startswith("-") else value,
    ]
    if not flag.startswith("-") and value.startswith("-"):
        args = [*args[:-1], "--", value]  # a positional that starts with '-'
    line = refusal(parser, args)
    assert line.startswith(f"error: argument {flag}: "), line
    assert "Traceback" not in line


@pytest.mark.parametrize(
    ("command", "dest", "flag"), options(("file", "folder", "path")), ids=lambda v: str(v)
)
def test_a_missing_input_or_one_of_the_other_kind_is_refused(
    command: Path, dest: str, flag: str, tmp_path: Path
) -> None:
    parser = build(command)
    if flag in parser.sometimes:
        pytest.skip(f"{flag} is read by some params only: its reader names it when missing")
    args = required(parser, tmp_path, leave=dest)
    line = refusal(parser, [*args, flag, str(tmp_path / "absent")])
    assert line == f"error: argument {flag}: {tmp_path / 'absent'}: no such {parser.kinds[dest]}"
    other = tmp_path / "other"
    if parser.kinds[dest] == "file":
        other.mkdir()
        assert refusal(parser, [*args, flag, str(other)]).endswith("a folder, not a file")
    elif parser.kinds[dest] == "folder":
        other.write_text("x")
        assert refusal(parser, [*args, flag, str(other)]).endswith("a file, not a folder")


def overlaps() -> list[tuple[Path, str, str]]:
    """(command, written flag, other flag) for every output and every other path option of the
    same command."""
    found = []
    for command in COMMANDS:
        parser = build(command)
        flags = {a.dest: (a.option_strings or [a.dest])[-1] for a in parser._actions}
        for dest, kind in parser.kinds.items():
            if kind not in WRITTEN:
                continue
            for other, other_kind in parser.kinds.items():
                if other != dest and other_kind != "revision":
                    found.append((command, flags[dest], flags[other]))
    return found


WRITTEN = ("output", "outputs")


def forbidden(kind: str, other_kind: str, relation: str) -> bool:
    """The rule: a path written is no other path; it lies inside no input and no folder
    replaced whole; a file or folder replaced whole holds no other path."""
    return (
        relation == "is"
        or (relation == "lies inside" and other_kind != "outputs")
        or (relation == "holds" and kind == "output")
    )


@pytest.mark.parametrize("relation", ["is", "lies inside", "holds"])
@pytest.mark.parametrize(("command", "output", "other"), overlaps(), ids=lambda v: str(v))
def test_an_output_overlapping_an_input_or_another_output_is_refused(
    command: Path, output: str, other: str, relation: str, tmp_path: Path
) -> None:
    """`refine --out models/x/refined` wrote inside its input, `evaluate --out-dir data/raw`
    into the data it reads, `train --out m --metrics m/train.json` a file its folder output
    then replaced; a folder that only receives files (`--out-dir`, `--plots`) may hold others."""
    parser = build(command)
    dests = {(a.option_strings or [a.dest])[-1]: a.dest for a in parser._actions}
    kind, other_kind = parser.kinds[dests[output]], parser.kinds[dests[other]]
    if other_kind == "file" and relation == "lies inside":
        pytest.skip("nothing lies inside a file")
    base = tmp_path / "x" / "base"
    base.parent.mkdir()
    if other_kind == "file":
        base.write_text("x")
    else:
        base.mkdir()
    target = {"is": base, "lies inside": base / "sub", "holds": base.parent}[relation]
    (tmp_path / "args").mkdir()
    args = [*required(parser, tmp_path / "args", leave=dests[output]), other, str(base)]
    args += [output, str(target)]
    if not forbidden(kind, other_kind, relation):
        parser.parse_args(args)
        return
    line = refusal(parser, args)
    assert line.startswith("error: argument ") and line.endswith(": choose another path"), line
    for flag in (output, other):
        assert re.search(rf"(argument |, ){re.escape(flag)}[: ]", line), line


def test_a_stage_given_an_empty_model_scores_nothing(tmp_path: Path) -> None:
    """`evaluate --model ""` scored the params' default model instead of refusing."""
    done = run_stage("evaluate.py", ["--model", "", "--out-dir", "out"], tmp_path)
    assert done.returncode == 2
    assert done.stderr.strip() == "error: argument --model: an empty model name or folder"
    assert not (tmp_path / "out").exists()


def test_the_parser_refuses_what_argparse_would_take(tmp_path: Path) -> None:
    """Plain argparse takes each of these as a value."""
    plain = argparse.ArgumentParser()
    plain.add_argument("--out")
    for value in ("", "--metrics", " x"):
        assert plain.parse_args([f"--out={value}"]).out == value


@pytest.mark.parametrize(
    ("spec", "argv0", "usage"),
    [
        (
            "sentemb.review.compare",
            "/x/src/sentemb/review/compare.py",
            "python -m sentemb.review.compare",
        ),
        (None, "stages/train.py", "python stages/train.py"),
    ],
)
def test_help_names_the_command_as_it_is_typed(
    monkeypatch: pytest.MonkeyPatch, spec: str | None, argv0: str, usage: str
) -> None:
    """`--help` starts `usage: python -m sentemb.review.compare`, not argparse's `compare.py`, which
    is no command a user can type."""
    main = argparse.Namespace(__spec__=argparse.Namespace(name=spec) if spec else None)
    monkeypatch.setitem(sys.modules, "__main__", main)
    monkeypatch.setattr("sys.argv", [argv0, "--help"])
    assert Parser("a command").format_usage() == f"usage: {usage} [-h]\n"


def raise_cuda_oom() -> None:
    raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 20.00 GiB")


def raise_cuda_error() -> None:
    raise RuntimeError("CUDA error: out of memory")


def raise_cublas_error() -> None:
    raise RuntimeError("CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`")


def raise_enomem() -> None:
    raise OSError(errno.ENOMEM, "Cannot allocate memory")


def raise_a_bug() -> None:
    raise RuntimeError("a bug")


@pytest.mark.parametrize(
    "allocate",
    [
        # 1 EiB: more than any x86-64 or arm64 address space, whatever the overcommit policy
        lambda: torch.empty(2**60, dtype=torch.uint8),
        lambda: np.empty(2**60, dtype=np.uint8),
        raise_cuda_oom,
        raise_cuda_error,
        raise_cublas_error,
        raise_enomem,
    ],
    ids=["torch-cpu", "numpy", "torch-cuda", "cuda-error", "cublas", "enomem"],
)
def test_an_allocation_larger_than_the_machine_is_one_error_naming_the_size_params(
    allocate: Callable[[], object], capsys: pytest.CaptureFixture[str]
) -> None:
    """A batch size under its cap that no memory holds (`train.batch_size: 100000000`) was a
    C++ traceback; now one line naming the params that size memory, status 1."""
    with pytest.raises(SystemExit) as exit:
        cli.run_stage(allocate)
    assert exit.value.code == 1
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: out of memory ("), lines
    assert cli.SIZES in lines[0]


def test_the_size_params_named_are_params() -> None:
    """Each name in the out-of-memory error is a key of params.yaml (a rename would leave it)."""
    params = load_params(REPO / "params.yaml")
    for name in cli.SIZES.split(", "):
        *sections, key = name.split(".")
        assert key in functools.reduce(dict.__getitem__, sections, params), name


def test_any_other_runtime_error_is_a_traceback() -> None:
    """Only a failed allocation is said in one line: any other RuntimeError is a bug to see."""
    with pytest.raises(RuntimeError, match="a bug"):
        cli.run_stage(raise_a_bug)
