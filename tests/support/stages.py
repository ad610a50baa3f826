"""Stage scripts and commands run in this process as `python stages/<script>` and `python -m`
would run them (`run_stage`, `run_module`), without their seconds of imports, and what they are
given: a params file, a data folder, the inputs a command reads. Their errors are read with
`last_error`."""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import io
import json
import logging
import os
import runpy
import shutil
import subprocess
import sys
import traceback
import unittest.mock
import urllib.request
import warnings
from collections.abc import Callable, Mapping
from pathlib import Path

import yaml

from sentemb.cli import Parser, run
from sentemb.config import read_yaml
from sentemb.data.sources import DATASETS

from support import REPO

DOWNLOADED = ["wiki1m", "STS13", "STSBenchmark", "QQP"]  # the `downloaded` fixture's; QQP is not
# in the mirror
LINKED_CORPUS = "corpus/wiki1m_for_simcse.txt"  # in `linked_data`: the mirror's head, no blanks, so
# also what the corpus stage keeps of it (the stages' `--corpus`)


def show_warning(
    message: Warning | str,
    category: type[Warning],
    filename: str,
    lineno: int,
    file: object = None,
    line: str | None = None,
) -> None:
    """Print a warning to the current `sys.stderr`, as Python does outside pytest."""
    sys.stderr.write(warnings.formatwarning(message, category, filename, lineno, line))


def run_stage(
    script: str,
    args: list[str],
    cwd: Path,
    env: Mapping[str, str] | None = None,
    *,
    process: bool = False,
) -> subprocess.CompletedProcess[str]:
    """`python stages/<script> <args>` (or `script` itself when it is a path) in `cwd` with
    `env` as the environment (default: this one's): its exit status, stdout and stderr, run as
    `run_command` does."""
    path = Path(script) if os.sep in script else REPO / "stages" / script
    return run_command(
        [str(path), *args],
        lambda: runpy.run_path(str(path), run_name="__main__"),
        cwd,
        env,
        process=process,
        first_on_path=path.parent,  # as `python script` puts the script's folder first
    )


def run_module(
    module: str,
    args: list[str],
    cwd: Path,
    env: Mapping[str, str] | None = None,
    *,
    process: bool = False,
) -> subprocess.CompletedProcess[str]:
    """`python -m <module> <args>` (a command whose `__main__` runs `cli.run(main)`) in `cwd`,
    run as `run_command` does."""
    spec = importlib.util.find_spec(module)
    assert spec is not None and spec.origin is not None, module

    def main() -> None:
        command = importlib.import_module(module)
        with unittest.mock.patch.dict(sys.modules, {"__main__": command}):  # `cli.program()`
            run(command.main)

    return run_command(
        [spec.origin, *args],
        main,
        cwd,
        env,
        process=process,
        python_args=["-m", module],
    )


def run_command(
    argv: list[str],
    main: Callable[[], object],
    cwd: Path,
    env: Mapping[str, str] | None,
    *,
    process: bool,
    first_on_path: Path | None = None,
    python_args: list[str] | None = None,
) -> subprocess.CompletedProcess[str]:
    """`main` with `sys.argv` as `argv`: its exit status, stdout and stderr.

    Run in this process unless `process`: the command's log lines, Python's warnings and any
    traceback go to the stderr returned, as a subprocess's would, and this process's working
    folder, environment, argv, logging, warnings and urllib opener are set back after. That
    saves the 4-5 s of imports a new interpreter pays per command. `process=True` starts a real
    `python` (with `python_args`, else `argv[0]`) for tests whose subject is the process itself
    (its hash seed, locale or time zone, a signal)."""
    command = [sys.executable, *(python_args or argv[:1]), *argv[1:]]
    if process:
        return subprocess.run(
            command, cwd=cwd, env=env, capture_output=True, text=True, timeout=600
        )
    root = logging.getLogger()
    saved = (dict(os.environ), os.getcwd(), sys.argv, list(sys.path), root.handlers, root.level)
    hub = sys.modules.get("huggingface_hub.constants")
    hub_offline = getattr(hub, "HF_HUB_OFFLINE", None)
    opener = urllib.request._opener  # urlopen keeps the proxies of its first call's environment
    stdout, stderr, status = io.StringIO(), io.StringIO(), 0
    try:
        if env is not None:
            os.environ.clear()
            os.environ.update(env)
        os.chdir(cwd)
        urllib.request.install_opener(None)  # the command's urlopen reads its own environment
        sys.argv = list(argv)
        if first_on_path is not None:
            sys.path.insert(0, str(first_on_path))
        root.handlers = []  # the command's logging.basicConfig then logs to `stderr`, as alone
        with (
            contextlib.redirect_stdout(stdout),
            contextlib.redirect_stderr(stderr),
            warnings.catch_warnings(),
        ):
            warnings.resetwarnings()  # Python's defaults, printed to stderr (not pytest's)
            for category in (DeprecationWarning, PendingDeprecationWarning, ImportWarning):
                warnings.simplefilter("ignore", category)
            warnings.simplefilter("ignore", ResourceWarning)
            warnings.showwarning = show_warning
            try:
                main()
            except SystemExit as exit:
                if isinstance(exit.code, int) or exit.code is None:
                    status = exit.code or 0
                else:  # sys.exit("message"): printed, status 1
                    print(exit.code, file=sys.stderr)
                    status = 1
            except Exception:  # uncaught: a traceback and status 1, as the interpreter does
                traceback.print_exc()
                status = 1
    finally:
        for handler in root.handlers:
            handler.close()
        environ, cwd_before, sys.argv, sys.path[:], root.handlers, level = saved
        root.setLevel(level)
        os.environ.clear()
        os.environ.update(environ)
        os.chdir(cwd_before)
        if hub is not None:
            hub.HF_HUB_OFFLINE = hub_offline
        urllib.request.install_opener(opener)
    return subprocess.CompletedProcess(command, status, stdout.getvalue(), stderr.getvalue())


def command_parser(argv: list[str]) -> Parser | None:
    """The `parser()` of a command: `["stages/x.py", ...]` (a script) or `["-m", "sentemb.x"]`."""
    if argv[0] == "-m":
        build = getattr(importlib.import_module(argv[1]), "parser", None)
    else:
        build = runpy.run_path(str(REPO / argv[0]), run_name="parser").get("parser")
    parser = build() if build is not None else None
    return parser if isinstance(parser, Parser) else None


def make_inputs(argv: list[str], args: list[str], folder: Path) -> Path:
    """`folder` holding a copy of params.yaml and every input the command reads, given in
    `args` or by default (empty folders; files are params copies): its options can then parse
    there, whatever this checkout holds."""
    parser = command_parser(argv)
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(REPO / "params.yaml", folder / "params.yaml")
    for action in parser._actions if parser is not None else []:
        kind = parser.kinds.get(action.dest)
        given = [args[i + 1] for i, a in enumerate(args[:-1]) if a in action.option_strings]
        for value in [*given, *([action.default] if isinstance(action.default, str) else [])]:
            if kind in ("folder", "path"):
                (folder / value).mkdir(parents=True, exist_ok=True)
            elif kind == "file" and not (folder / value).exists():
                (folder / value).parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(REPO / "params.yaml", folder / value)
    return folder


def write_params(folder: Path, mirror: Path, **sections) -> Path:
    params = read_yaml(REPO / "params.yaml")
    params["data"].update(mirror=str(mirror), corpus_size=500)
    for name, values in sections.items():  # a section's keys updated, a top-level value set
        if isinstance(values, dict):
            params[name].update(values)
        else:
            params[name] = values
    path = folder / "params.yaml"
    path.write_text(yaml.safe_dump(params))
    return path


def train_args(params: Path, work: Path, method: str | None) -> list[str]:
    """`stages/train.py` arguments for `method` (None: params' own), seed 42, keeping every
    output inside `work`."""
    outputs = {"--out": "model", "--metrics": "train.json", "--plots": "plots"}
    args = [*(["--method", method] if method else []), "--seed", "42", "--params", str(params)]
    args += ["--checkpoints", str(work / "checkpoints")]
    for flag, name in outputs.items():
        args += [flag, str(work / name)]
    return args


def tiny_training(
    work: Path, tiny_model_dir: Path, mirror: Path, max_steps: int, **sections
) -> Path:
    """A fresh `work` folder and its params: the tiny model, batch 16, `max_steps` steps."""
    work.mkdir()
    train = {"batch_size": 16, "max_steps": max_steps, "eval_steps": 2, "checkpoint_minutes": 0.0}
    model = {"name_or_path": str(tiny_model_dir)}
    return write_params(work, mirror, model=model, train=train, **sections)


def last_error(result: subprocess.CompletedProcess) -> str:
    """The stage's one error line (exit 1, no traceback)."""
    assert result.returncode == 1, result.stderr[-3000:]
    assert "Traceback" not in result.stderr, result.stderr[-3000:]
    return result.stderr.strip().splitlines()[-1]


def linked_data(root: Path, mirror: Path) -> Path:
    """`root` as the download stage leaves a data folder offline: the mirror's sets and corpus
    (linked, not copied) and a manifest listing them, with QQP and AskUbuntu missing with a
    reason."""
    for folder in ("senteval", "senteval_cn"):
        (root / folder).symlink_to(mirror / folder)
    (root / "corpus").mkdir()
    (root / LINKED_CORPUS).symlink_to(mirror / "corpus/wiki1m_for_simcse.head.txt")
    present = {
        name: {}
        for name, dataset in DATASETS.items()
        if all((root / f.path).is_file() for f in dataset.files)
    }
    missing = {name: f"{name}: not in the mirror" for name in DATASETS if name not in present}
    manifest = {"datasets": present, "missing": missing}
    (root / "MANIFEST.json").write_text(json.dumps(manifest))
    return root


def snapshot(folder: Path) -> dict[str, bytes]:
    """Every file under `folder` (links as their target's name) by relative path."""
    return {
        p.relative_to(folder).as_posix(): str(p.readlink()).encode()
        if p.is_symlink()
        else p.read_bytes()
        for p in sorted(folder.rglob("*"))
        if p.is_symlink() or p.is_file()
    }


def user_folder(path: Path) -> Path:
    """A folder the user made: files at two depths, nothing the pipeline wrote."""
    (path / "sub").mkdir(parents=True)
    (path / "notes.txt").write_text("mine")
    (path / "sub" / "result.json").write_text("{}")
    return path
