"""sentemb.remote: which DVC remotes answer a first contact, and within how long."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from sentemb.remote import (
    MAX_CONTACT_SECONDS,
    NOT_PULLED,
    main,
    remotes,
    unreachable,
    wait_seconds,
)
from sentemb.services import CONNECT_SECONDS

from support.services import remote_of

UNREACHABLE = [
    "local missing folder",
    "file missing folder",
    "http closed port",
    "http unresolvable host",
    "http silent server",
    "https silent server",
    "webdav silent server",
    "ssh closed port",
    "ssh unresolvable host",
    "ssh silent server",
    "s3 closed port",
    "s3 silent server",
]


@pytest.mark.parametrize("kind", UNREACHABLE)
def test_remote_that_does_not_answer_is_unreachable(kind: str, tmp_path: Path) -> None:
    """One attempt (a silent server saw one connection), given up after the remote's own
    `read_timeout` where set (1 s here), else CONNECT_SECONDS."""
    with remote_of(kind, tmp_path) as (config, server):
        why = unreachable({**config, "read_timeout": 1})
    assert why is not None
    if "silent" in kind:
        assert why == "TimeoutError: no answer within 1 s"
    if "folder" in kind:
        assert "no such folder" in why
    if server is not None:
        assert server.connections == 1


@pytest.mark.parametrize(
    "kind", ["local folder", "file folder", "http answers 404", "s3 answers 404", "ssh speaks ssh"]
)
def test_remote_that_answers_is_reachable(kind: str, tmp_path: Path) -> None:
    with remote_of(kind, tmp_path) as (config, server):
        assert unreachable(config) is None
    assert server is None or server.connections == 1


def test_remote_of_a_kind_not_contacted_is_left_to_dvc() -> None:
    """Azure, HDFS, ...: no probe (DVC's plugin decides, and fails fast without credentials)."""
    assert unreachable({"url": "azure://container/store"}) is None
    assert unreachable({"url": "hdfs://namenode/store"}) is None


def test_wait_is_the_longest_timeout_set_on_the_remote() -> None:
    assert wait_seconds({"url": "http://x"}) == CONNECT_SECONDS
    assert wait_seconds({"url": "ssh://x", "timeout": 30}) == 30
    assert wait_seconds({"url": "http://x", "connect_timeout": 2.0, "read_timeout": 9.5}) == 9.5
    for endless in ("inf", 1e10):  # DVC takes both; a socket timeout of either overflows
        assert wait_seconds({"url": "http://x", "read_timeout": endless}) == MAX_CONTACT_SECONDS


def test_remotes_are_read_as_dvc_reads_them(tmp_path: Path) -> None:
    from dvc.repo import Repo

    Repo.init(str(tmp_path), no_scm=True)
    (tmp_path / ".dvc" / "config").write_text(
        "[core]\n    no_scm = true\n    remote = store\n['remote \"store\"']\n    url = ../remote\n"
        "['remote \"web\"']\n    url = https://example.org/dvc\n    read_timeout = 30\n"
    )
    default, configs = remotes(tmp_path)
    assert default == "store"
    assert configs["store"]["url"] == str(tmp_path / "remote")  # relative to .dvc/
    assert configs["web"]["url"] == "https://example.org/dvc"
    assert wait_seconds(configs["web"]) == 30


@pytest.mark.parametrize("url", ["ssh://host:abc/x", "ssh://host:99999/x", "https://host:x/y"])
def test_a_url_with_a_port_that_is_no_port_is_unreachable_not_a_traceback(url: str) -> None:
    why = unreachable({"url": url})
    assert why is not None and "Port" in why


def test_named_targets_not_pulled_exit_1_and_make_pull_exits_0(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`make pull` (no targets) never stops `make repro`; a target the user named and that was
    not pulled (here: no remote) is exit 1 with one warning."""
    from dvc.repo import Repo

    Repo.init(str(tmp_path), no_scm=True)
    monkeypatch.chdir(tmp_path)
    main(["pull"])
    with pytest.raises(SystemExit) as stopped:
        main(["pull", "no/such/target"])
    assert stopped.value.code == 1
    assert capsys.readouterr().err == f"warning: no DVC remote is configured; {NOT_PULLED}\n"


def dvc_repo_with_a_tracked_file(folder: Path) -> None:
    """A DVC repository (no git) tracking `data.txt`, whose object is in no cache (DVC's own
    commands, in a process apart: its logger keeps the streams of the process it runs in)."""
    dvc = [sys.executable, "-m", "dvc"]
    subprocess.run([*dvc, "init", "-q", "--no-scm"], cwd=folder, check=True)
    (folder / "data.txt").write_text("x\n")
    subprocess.run([*dvc, "add", "-q", "data.txt"], cwd=folder, check=True)
    shutil.rmtree(folder / ".dvc" / "cache")
    (folder / "data.txt").unlink()


@pytest.mark.parametrize("setup", ["no default", "default names no remote", "remote lacks it"])
def test_a_named_target_the_remote_does_not_give_exits_1(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], setup: str
) -> None:
    """Remotes but none default (DVC: "Everything is up to date", status 0), or a default
    remote that answers without the object (`--allow-missing` took it): the target is not
    pulled, so status 1; `make pull` still exits 0."""
    repo = tmp_path / "repo"
    repo.mkdir()
    dvc_repo_with_a_tracked_file(repo)
    (tmp_path / "store").mkdir()
    default = {"no default": "", "default names no remote": "    remote = other\n"}.get(setup)
    core = default if default is not None else "    remote = store\n"
    (repo / ".dvc" / "config").write_text(
        f"[core]\n    no_scm = true\n{core}['remote \"store\"']\n    url = {tmp_path / 'store'}\n"
    )
    monkeypatch.chdir(repo)
    main(["pull"])
    with pytest.raises(SystemExit) as stopped:
        main(["pull", "data.txt"])
    assert stopped.value.code == 1 and not (repo / "data.txt").exists()
    if setup != "remote lacks it":
        assert "(`dvc remote default NAME` sets it)" in capsys.readouterr().err
