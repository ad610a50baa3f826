"""Fetch every dataset from the offline mirror or its public URL, verified by sha256.

A file is taken from the mirror when it exists there under the archive's layout, otherwise
downloaded. Each file is checked against its known sha256 (the mirror's `SHA256SUMS`, shipped as
`checksums.json`) where the content is known, otherwise against the sha256 recorded the first
time it was downloaded. What is recorded about a file is its sha256 only, never where it came
from, so `data/raw` is the same bytes wherever the mirror lives.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import sys
import tarfile
import urllib.request
import zipfile
from collections.abc import Iterable
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Annotated

from sentemb.config import Count, Range, UserError
from sentemb.data.readers import sts_sentences
from sentemb.data.sources import DATASETS, STS_SUBSETS, Dataset, RemoteFile
from sentemb.io import atomic_path, write_json

log = logging.getLogger(__name__)
MANIFEST = "MANIFEST.json"  # in the download stage's output: each dataset's files and sha256s
STS_CORPUS = "corpus/sts.txt"  # the STS sets' sentences, a built-in corpus (`train.corpus`)
STS_CORPUS_SETS = (*STS_SUBSETS, "STSBenchmark", "SICK")


@dataclass
class DataConfig:
    """Params section `data`."""

    mirror: str = "../shared/datasets"
    nltk_data: str = "../shared/nltk_data"
    corpus_size: Count = 1_000_000
    # seconds per request; past a day a typo (1e10 overflows the socket's clock)
    timeout: Annotated[float, Range(0, 86_400, open_low=True, why="seconds")] = 60.0
    datasets: list[str] | None = None

    def validate(self) -> list[str]:
        if self.datasets == []:
            return ["datasets: [] names no dataset; null downloads them all"]
        return []


def repo_path(value: str, params_file: Path) -> Path:
    """A path param as absolute: a relative one is taken from the repository's root, which is
    `$DVC_ROOT` under DVC (the real workspace, also for an experiment queued into a temporary
    copy of it) and else the params file's folder."""
    root = os.environ.get("DVC_ROOT") or params_file.resolve().parent
    return (Path(root) / Path(value).expanduser()).resolve()


def use_nltk_data(config: DataConfig, params_file: Path) -> None:
    """Let NLTK find its data in `data.nltk_data` too (when that folder exists; NLTK downloads
    what no folder has), in this process and the ones it starts."""
    folder = repo_path(config.nltk_data, params_file)
    if not folder.is_dir():
        return
    paths = [p for p in os.environ.get("NLTK_DATA", "").split(os.pathsep) if p]
    if str(folder) not in paths:
        os.environ["NLTK_DATA"] = os.pathsep.join([*paths, str(folder)])
    nltk_data = sys.modules.get("nltk.data")
    if nltk_data is not None and str(folder) not in nltk_data.path:
        nltk_data.path.append(str(folder))


class DataUnavailable(UserError, RuntimeError):
    """A dataset is neither in the mirror nor downloadable. The message names this machine's
    mirror and network error; `reason` says the same without them (it goes into MANIFEST.json)."""

    def __init__(self, message: str, reason: str | None = None) -> None:
        super().__init__(message)
        self.reason = message if reason is None else reason


class ChecksumMismatch(UserError, RuntimeError):
    """A file's content differs from its known or recorded sha256."""


def known_checksums() -> dict[str, str]:
    """sha256 of every file whose content is known (the mirror's SHA256SUMS)."""
    text = resources.files("sentemb.data").joinpath("checksums.json").read_text(encoding="utf-8")
    return json.loads(text)


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def verify(path: Path, expected: str, name: str) -> None:
    """Raise `ChecksumMismatch` naming the file and both hashes when `path` is not `expected`."""
    actual = sha256_of(path)
    if actual != expected:
        raise ChecksumMismatch(f"{name}: sha256 mismatch: expected {expected}, got {actual}")


class Fetcher:
    """Materialises dataset files under `root` from `mirror` or the network."""

    def __init__(
        self, root: Path, mirror: Path, recorded: dict[str, str], cache: Path, timeout: float
    ) -> None:
        self.root, self.mirror, self.recorded = root, mirror, recorded
        self.cache, self.timeout = cache, timeout
        self.known = known_checksums()

    def fetch(self, dataset: Dataset) -> dict[str, str]:
        """Fetch all files of `dataset`; returns the sha256 of each, by path."""
        return {f.path: self._fetch_file(dataset.name, f) for f in dataset.files}

    def exists(self, dataset: Dataset) -> bool:
        """Whether every file of `dataset` is known to exist: the mirror holds it (a known
        sha256) or an earlier download fetched it (a recorded sha256)."""
        return all(
            any(p in self.known or p in self.recorded for p in (f.path, *f.mirror_alternatives))
            for f in dataset.files
        )

    def _fetch_file(self, name: str, remote: RemoteFile) -> str:
        target = self.root / remote.path
        for rel in (remote.path, *remote.mirror_alternatives):
            candidate = self.mirror / rel
            if candidate.is_file():
                expected = self.known.get(rel)
                if expected is None:
                    raise ChecksumMismatch(f"{candidate}: no known sha256 for this mirror file")
                verify(candidate, expected, str(candidate))
                with atomic_path(target) as tmp:
                    shutil.copyfile(candidate, tmp)
                log.info("%s: from %s", remote.path, candidate)
                return expected
        try:
            self._download(remote, target)
        except OSError as err:
            raise DataUnavailable(
                f"{name}: {remote.path} is not in the mirror ({self.mirror / remote.path}) "
                f"and could not be downloaded from {remote.url}: {err}",
                reason=f"{name}: {remote.path} is in neither the mirror nor at {remote.url}",
            ) from err
        expected = self.known.get(remote.path) if remote.public_matches_mirror else None
        expected = expected or self.recorded.get(remote.path)
        if expected is None:
            expected = self.recorded[remote.path] = sha256_of(target)
            log.info("recorded sha256 of %s on first download: %s", remote.path, expected)
        else:
            verify(target, expected, f"{target} (from {remote.url})")
        return expected

    def _download(self, remote: RemoteFile, target: Path) -> None:
        if remote.member is None:
            with atomic_path(target) as tmp:
                self._get(remote.url, tmp)
            return
        archive = self.cache / Path(remote.url).name
        if not archive.exists():
            with atomic_path(archive) as tmp:
                self._get(remote.url, tmp)
        with atomic_path(target) as tmp, tmp.open("wb") as out:
            out.write(_read_member(archive, remote.member))

    def _get(self, url: str, dest: Path) -> None:
        log.info("downloading %s", url)
        with urllib.request.urlopen(url, timeout=self.timeout) as response, dest.open("wb") as f:
            shutil.copyfileobj(response, f)


def _read_member(archive: Path, member: str) -> bytes:
    """The bytes of the archive member whose path ends with `member`."""
    if zipfile.is_zipfile(archive):
        with zipfile.ZipFile(archive) as zf:
            for info in zf.infolist():
                if info.filename.endswith(member):
                    return zf.read(info)
    else:
        with tarfile.open(archive) as tf:
            for info in tf.getmembers():
                if info.isfile() and info.name.endswith(member):
                    data = tf.extractfile(info)
                    if data is not None:
                        return data.read()
    raise FileNotFoundError(f"{member} not found in archive {archive}")


def write_sts_corpus(root: Path, present: Iterable[str]) -> None:
    """`corpus/sts.txt`, the built-in STS corpus (`readers.sts_sentences`), when every STS set
    is present."""
    if set(STS_CORPUS_SETS) <= set(present):
        text = "".join(s + "\n" for s in sts_sentences(root))
        (root / STS_CORPUS).parent.mkdir(parents=True, exist_ok=True)
        (root / STS_CORPUS).write_text(text, encoding="utf-8")


def present_before(out: Path) -> set[str]:
    """The datasets the earlier `out/MANIFEST.json` lists as present (none without one)."""
    try:
        return set(json.loads((out / MANIFEST).read_text(encoding="utf-8"))["datasets"])
    except (OSError, ValueError, KeyError, TypeError):
        return set()


def download(
    config: DataConfig, out: Path, mirror: Path, recorded: dict[str, str], cache: Path
) -> dict:
    """Every dataset of `config.datasets` (all by default) into `out`, replaced atomically, with
    its `MANIFEST.json`; returns the manifest. `recorded` (the sha256s of first downloads) is
    updated in place. A dataset known to exist (the mirror holds it, an earlier download fetched
    it, or the earlier `out` had it) that cannot be had now is one `DataUnavailable` before
    `out` is touched; one only the network has and never had goes under `missing`."""
    names = config.datasets or list(DATASETS)
    unknown = sorted(set(names) - set(DATASETS))
    if unknown:
        raise DataUnavailable(f"data.datasets: unknown {unknown}; known {list(DATASETS)}")
    manifest: dict = {"datasets": {}, "missing": {}}
    before = present_before(out)
    with atomic_path(out, folder=True) as root:
        fetcher = Fetcher(root, mirror, recorded, cache, config.timeout)
        expected = {n for n in names if n in before or fetcher.exists(DATASETS[n])}
        lost: dict[str, DataUnavailable] = {}
        for name in names:
            try:
                manifest["datasets"][name] = fetcher.fetch(DATASETS[name])
            except DataUnavailable as err:
                log.warning("%s", err)
                manifest["missing"][name] = err.reason
                if name in expected:
                    lost[name] = err
        if lost:
            raise unavailable(lost, mirror, out)
        write_sts_corpus(root, manifest["datasets"])
        write_json(root / MANIFEST, manifest)
    return manifest


def unavailable(lost: dict[str, DataUnavailable], mirror: Path, out: Path) -> DataUnavailable:
    """One error for the datasets known to exist that could not be had, before `out` is touched."""
    listed = ", ".join(f"{n} (the training corpus)" if n == "wiki1m" else n for n in lost)
    return DataUnavailable(
        f"data.mirror: {len(lost)} dataset(s) that the mirror holds or an earlier download "
        f"fetched could not be had: {listed} (first: {next(iter(lost.values()))}); nothing "
        f"was written, {out} is as it was. Point data.mirror at the offline mirror (now "
        f"{mirror}), go online, or leave them out of data.datasets"
    )
