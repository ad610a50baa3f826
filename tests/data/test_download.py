"""Fetching from the mirror with sha256 checks; unavailable data names dataset, URL and mirror."""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

import pytest

from sentemb.data.download import (
    ChecksumMismatch,
    DataUnavailable,
    Fetcher,
    known_checksums,
    sha256_of,
)
from sentemb.data.sources import DATASETS
from sentemb.training.config import WIKI


def fetcher(root: Path, mirror: Path, recorded: dict | None = None) -> Fetcher:
    return Fetcher(root, mirror, {} if recorded is None else recorded, root / "cache", timeout=1)


def test_known_checksums_cover_every_mirror_file(mirror: Path) -> None:
    listed = {
        line.split(None, 1)[1].strip().removeprefix("./")
        for line in (mirror / "SHA256SUMS").read_text().splitlines()
    }
    assert set(known_checksums()) == listed


def test_fetch_from_mirror_verifies_and_copies(tmp_path: Path, mirror: Path) -> None:
    files = fetcher(tmp_path / "raw", mirror).fetch(DATASETS["STS13"])
    assert len(files) == 6
    for rel, sha256 in files.items():  # the sha256 only: not where the mirror lives
        assert sha256_of(tmp_path / "raw" / rel) == sha256 == known_checksums()[rel]


def test_corpus_head_is_taken_from_mirror(tmp_path: Path, mirror: Path) -> None:
    files = fetcher(tmp_path / "raw", mirror).fetch(DATASETS["wiki1m"])
    (rel,) = files
    head = mirror / "corpus" / "wiki1m_for_simcse.head.txt"
    assert (tmp_path / "raw" / rel).read_bytes() == head.read_bytes()
    assert f"data/raw/{rel}" == WIKI  # the default train.corpus


def test_tampered_mirror_file_is_refused(tmp_path: Path, mirror: Path) -> None:
    fake = tmp_path / "mirror"
    rel = "senteval/data/downstream/STS/STS13-en-test"
    shutil.copytree(mirror / rel, fake / rel)
    target = fake / rel / "STS.gs.FNWN.txt"
    target.write_text(target.read_text().replace("0.8", "4.8", 1))
    with pytest.raises(ChecksumMismatch) as err:
        fetcher(tmp_path / "raw", fake).fetch(DATASETS["STS13"])
    message = str(err.value)
    expected = known_checksums()[f"{rel}/STS.gs.FNWN.txt"]
    actual = hashlib.sha256(target.read_bytes()).hexdigest()
    assert "STS.gs.FNWN.txt" in message and f"expected {expected}, got {actual}" in message
    assert not (tmp_path / "raw" / rel / "STS.gs.FNWN.txt").exists()


def test_unavailable_names_dataset_url_and_mirror(tmp_path: Path, monkeypatch) -> None:
    def offline(url, timeout):
        raise OSError("network unreachable")

    monkeypatch.setattr("urllib.request.urlopen", offline)
    with pytest.raises(DataUnavailable) as err:
        fetcher(tmp_path / "raw", tmp_path / "no-mirror").fetch(DATASETS["QQP"])
    message = str(err.value)
    assert message.startswith("QQP:")
    assert "QQP-clean.zip" in message and str(tmp_path / "no-mirror") in message
    assert "network unreachable" in message
    # the reason kept in MANIFEST.json names neither this machine's mirror nor its network error
    assert err.value.reason == (
        "QQP: qqp/train.tsv is in neither the mirror nor at "
        "https://dl.fbaipublicfiles.com/glue/data/QQP-clean.zip"
    )


def test_datasets_known_to_exist(tmp_path: Path) -> None:
    """Every dataset the mirror holds must be had; QQP and AskUbuntu only once downloaded."""
    only_online = {"QQP", "AskUbuntu"}
    found = fetcher(tmp_path, tmp_path / "no-mirror")
    assert {n for n, d in DATASETS.items() if not found.exists(d)} == only_online
    recorded = {f.path: "0" * 64 for f in DATASETS["AskUbuntu"].files}
    assert fetcher(tmp_path, tmp_path / "no-mirror", recorded).exists(DATASETS["AskUbuntu"])


def test_download_records_sha256_then_verifies_it(tmp_path: Path, monkeypatch) -> None:
    payload = {"content": b"1\tq1\tq2\n"}

    class Response:
        def __init__(self, url, timeout):
            self.data = payload["content"]

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

        def read(self, n=-1):
            data, self.data = self.data, b""
            return data

    monkeypatch.setattr("urllib.request.urlopen", Response)
    recorded: dict[str, str] = {}
    fetcher(tmp_path / "a", tmp_path / "none", recorded).fetch(DATASETS["AskUbuntu"])
    assert set(recorded) == {f.path for f in DATASETS["AskUbuntu"].files}
    payload["content"] = b"changed upstream\n"
    with pytest.raises(ChecksumMismatch, match="expected"):
        fetcher(tmp_path / "b", tmp_path / "none", recorded).fetch(DATASETS["AskUbuntu"])
