"""The fixtures every folder uses: a tiny random BERT (real MiniLM tokenizer), the offline data
mirror, small real filesystems for faults (a nearly full disk, a read-only folder). Helpers that
are not fixtures live in `support/`."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from sentemb.encoder import Encoder
from sentemb.model_files import resolve_model

from support import MIRROR
from support.models import random_bert

if "PYTEST_XDIST_WORKER_COUNT" in os.environ:  # `pytest -n N`: N workers share the cores
    THREADS = max(1, (os.cpu_count() or 1) // int(os.environ["PYTEST_XDIST_WORKER_COUNT"]))
    os.environ["OMP_NUM_THREADS"] = str(THREADS)  # and the stages they start as subprocesses
    torch.set_num_threads(THREADS)


@pytest.hookimpl(trylast=True)  # after `-m` and `-k` deselect
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Modules that hold a `slow` test first, then the most tests first (xdist's own order).
    `make test` hands each module to one worker in this order (`--dist loadscope
    --no-loadscope-reorder`), so no worker starts a minutes-long module while the other ends."""
    tests = Counter(item.path for item in items)
    slow = {item.path for item in items if item.get_closest_marker("slow")}
    items.sort(key=lambda item: (item.path not in slow, -tests[item.path]))


@pytest.fixture(scope="session")
def mirror() -> Path:
    if not MIRROR.is_dir():
        pytest.skip(f"offline mirror not found at {MIRROR}")
    return MIRROR


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 2-layer, 32-dim random BERT saved with the real MiniLM tokenizer."""
    return random_bert(
        tmp_path_factory.mktemp("tiny-bert"),
        resolve_model("sentence-transformers/all-MiniLM-L6-v2"),
        seed=0,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=128,
    )


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


@pytest.fixture
def tiny_st(tiny_model_dir: Path):
    """The tiny BERT as the sentence-transformers model the losses train ([CLS] pooling)."""
    from sentemb.st_model import st_model

    return st_model(str(tiny_model_dir), "cls_before_pooler", 32)


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
