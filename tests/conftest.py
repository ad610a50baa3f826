"""Shared fixtures: a tiny random BERT (real MiniLM tokenizer), the offline data mirror, small
real filesystems for faults (a nearly full disk, a read-only folder), and `run_stage`: a stage
script run in this process as `python stages/<script>` would run it, without its seconds of
imports."""

from __future__ import annotations

import contextlib
import importlib
import io
import logging
import os
import runpy
import shutil
import signal
import subprocess
import sys
import traceback
import warnings
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest
import torch

from sentemb.cli import Parser
from sentemb.encoder import Encoder
from sentemb.model_files import resolve_model

REPO = Path(__file__).resolve().parents[1]
MIRROR = (REPO / ".." / "shared" / "datasets").resolve()

if "PYTEST_XDIST_WORKER_COUNT" in os.environ:  # `pytest -n N`: N workers share the cores
    THREADS = max(1, (os.cpu_count() or 1) // int(os.environ["PYTEST_XDIST_WORKER_COUNT"]))
    os.environ["OMP_NUM_THREADS"] = str(THREADS)  # and the stages they start as subprocesses
    torch.set_num_threads(THREADS)


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
    `env` as the environment (default: this one's): its exit status, stdout and stderr.

    Run in this process unless `process`: the stage's log lines, Python's warnings and any
    traceback go to the stderr returned, as a subprocess's would, and this process's working
    folder, environment, argv, logging and warnings are set back after. That saves the 4-5 s of
    imports a new interpreter pays per stage. `process=True` starts a real `python` for tests
    whose subject is the process itself (its hash seed, locale or time zone, a signal)."""
    path = Path(script) if os.sep in script else REPO / "stages" / script
    command = [sys.executable, str(path), *args]
    if process:
        return subprocess.run(
            command, cwd=cwd, env=env, capture_output=True, text=True, timeout=600
        )
    root = logging.getLogger()
    saved = (dict(os.environ), os.getcwd(), sys.argv, list(sys.path), root.handlers, root.level)
    hub = sys.modules.get("huggingface_hub.constants")
    hub_offline = getattr(hub, "HF_HUB_OFFLINE", None)
    stdout, stderr, status = io.StringIO(), io.StringIO(), 0
    try:
        if env is not None:
            os.environ.clear()
            os.environ.update(env)
        os.chdir(cwd)
        sys.argv = [str(path), *args]
        sys.path.insert(0, str(path.parent))  # as `python script` puts the script's folder first
        root.handlers = []  # the stage's logging.basicConfig then logs to `stderr`, as alone
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
                runpy.run_path(str(path), run_name="__main__")
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


@pytest.fixture(scope="session")
def mirror() -> Path:
    if not MIRROR.is_dir():
        pytest.skip(f"offline mirror not found at {MIRROR}")
    return MIRROR


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 2-layer, 32-dim random BERT saved with the real MiniLM tokenizer."""
    from transformers import AutoTokenizer, BertConfig, BertModel

    torch.manual_seed(0)
    config = BertConfig(
        vocab_size=30522,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=128,
    )
    folder = tmp_path_factory.mktemp("tiny-bert")
    BertModel(config).save_pretrained(folder)
    AutoTokenizer.from_pretrained(
        resolve_model("sentence-transformers/all-MiniLM-L6-v2")
    ).save_pretrained(folder)
    return folder


@pytest.fixture
def terminal_sigint() -> Iterator[None]:
    """SIGINT handled as in a terminal's job, for tests that send Ctrl-C to a child: a test run
    started in the background (`cmd &`, nohup) has SIGINT ignored, and its children inherit
    that and never see the signal."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


@pytest.fixture
def tiny_encoder(tiny_model_dir: Path) -> Encoder:
    return Encoder.from_pretrained(str(tiny_model_dir), pooler="cls_before_pooler")


@contextlib.contextmanager
def mounted_tmpfs(folder: Path, size: str) -> Iterator[Path]:
    """A real small filesystem at `folder` (needs root and `mount`); skip the test without."""
    folder.mkdir(parents=True, exist_ok=True)
    mount = ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(folder)]
    if os.geteuid() != 0 or subprocess.run(mount, capture_output=True).returncode != 0:
        pytest.skip("cannot mount a tmpfs here (needs root)")
    try:
        yield folder
    finally:
        subprocess.run(["umount", "-l", str(folder)], check=True)


@pytest.fixture
def full_disk(tmp_path: Path) -> Iterator[Path]:
    """A folder on a 4 MiB filesystem with 64 KiB left free."""
    with mounted_tmpfs(tmp_path / "disk", "4m") as folder:
        free = shutil.disk_usage(folder).free
        (folder / "filler").write_bytes(b"\0" * (free - (64 << 10)))
        yield folder


@pytest.fixture
def read_only(tmp_path: Path) -> Iterator[Path]:
    """A folder holding `earlier.json`, then made read-only (a read-only mount under root)."""
    folder = tmp_path / "ro"
    if os.geteuid() != 0:
        folder.mkdir()
        (folder / "earlier.json").write_text("{}\n")
        folder.chmod(0o555)
        yield folder
        folder.chmod(0o755)
        return
    with mounted_tmpfs(folder, "1m"):
        (folder / "earlier.json").write_text("{}\n")
        subprocess.run(["mount", "-o", "remount,ro", str(folder)], check=True)
        yield folder
