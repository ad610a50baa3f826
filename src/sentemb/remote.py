"""DVC remotes: does one answer within seconds, and `make pull` (pull only from one that does).

    python -m sentemb.remote pull            # what `make pull` runs before `dvc repro`
    python -m sentemb.remote pull data/raw   # targets are passed on to `dvc pull`

`dvc pull` from a remote that cannot be reached either waits for minutes (a server that accepts
the connection and never answers: 10 min over HTTP, 2 min over SSH, 7 min for an S3 endpoint) or
says nothing: DVC's HTTP filesystem takes a refused connection, and DVC a missing local remote
folder, for a remote without the objects, which `--allow-missing` accepts. So the default remote
gets one first contact (:func:`unreachable`) of at most
:data:`~sentemb.services.CONNECT_SECONDS`, or the longest timeout set on that remote
(``connect_timeout``, ``read_timeout``, ``timeout``): a local remote must be a folder; an HTTP,
WebDAV or S3/GCS endpoint must answer one request (any status); an SSH server must send its
version line. If it does not, one warning and no pull. If it does, ``dvc pull --allow-missing``
with DVC's own settings; its failure warns too. Either way the exit status is 0: `dvc repro`
computes what was not pulled. Targets named on the command line are the exception: they are
pulled without `--allow-missing`, and when they are not pulled (no remote, no default one, none
that answers, an object the remote lacks, a target DVC does not know), the status is 1.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from sentemb.cli import Parser
from sentemb.services import CONNECT_SECONDS, call_within, http_answers, reason, tcp_answers

HTTP_SCHEMES = {"http": "http", "https": "https", "webdav": "http", "webdavs": "https"}
CLOUD_ENDPOINTS = {"s3": "https://s3.amazonaws.com", "gs": "https://storage.googleapis.com"}
SSH_PORT = 22
TIMEOUT_KEYS = ("connect_timeout", "read_timeout", "timeout")
NOT_PULLED = "dvc repro computes what is missing"
MAX_CONTACT_SECONDS = 600.0  # a first contact that takes longer is no answer


def remotes(root: str | Path = ".") -> tuple[str | None, dict[str, dict[str, Any]]]:
    """The default remote's name (None if there is none) and every remote's config, as DVC reads
    them (all config files merged, a relative local path made absolute)."""
    from dvc.repo import Repo

    with Repo(str(root)) as repo:
        config = repo.config
        return config["core"].get("remote"), {k: dict(v) for k, v in config["remote"].items()}


def _folder(path: str) -> None:
    if not Path(path).is_dir():
        raise FileNotFoundError(f"{path}: no such folder (not mounted?)")


def _contact(config: Mapping[str, Any], seconds: float) -> Callable[[], None] | None:
    """The first contact with the remote of `config`, or None for a kind that gets none."""
    url = str(config["url"])
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    if scheme in ("", "file") or len(scheme) == 1:  # a path, a file URL, a Windows drive
        path = parts.path if scheme == "file" else url
        return lambda: _folder(path)
    endpoint = config.get("endpointurl") or CLOUD_ENDPOINTS.get(scheme)
    if endpoint:
        return lambda: http_answers(str(endpoint), seconds)
    if scheme in HTTP_SCHEMES:
        http_url = urlunsplit(parts._replace(scheme=HTTP_SCHEMES[scheme]))
        return lambda: http_answers(http_url, seconds)
    if scheme == "ssh" and parts.hostname:
        host, port = parts.hostname, int(config.get("port") or parts.port or SSH_PORT)
        return lambda: tcp_answers(host, port, seconds, speaks_first=True)
    return None


def wait_seconds(config: Mapping[str, Any]) -> float:
    """How long a first contact may take: the longest timeout set on the remote (at most
    :data:`MAX_CONTACT_SECONDS`: DVC takes `inf`, a socket does not), else
    :data:`~sentemb.services.CONNECT_SECONDS`."""
    given = [float(config[key]) for key in TIMEOUT_KEYS if key in config]
    return min(max(given, default=CONNECT_SECONDS), MAX_CONTACT_SECONDS)


def unreachable(config: Mapping[str, Any]) -> str | None:
    """Why the remote of `config` (one entry of :func:`remotes`) gives no answer within
    :func:`wait_seconds`; None if it answers, or if it is of a kind this does not contact
    (Azure, HDFS, ...: DVC's plugin decides)."""
    try:
        seconds = wait_seconds(config)
        contact = _contact(config, seconds)
    except ValueError as exc:  # a port or timeout that is no number: DVC could not use it either
        return reason(exc)
    if contact is None:
        return None
    try:
        call_within(seconds, contact)
    except Exception as exc:
        return reason(exc)
    return None


def pull(targets: Sequence[str] = (), root: str | Path = ".") -> bool:
    """``dvc pull --allow-missing [targets]`` where a remote is configured and the default one
    answers; otherwise, or if the pull fails, one warning on stderr (with `targets`, also
    where no remote is configured). Whether it pulled."""
    from dvc.exceptions import DvcException

    try:
        default, configs = remotes(root)
    except DvcException as exc:
        print(f"warning: DVC config unreadable ({reason(exc)}); {NOT_PULLED}", file=sys.stderr)
        return False
    if not configs:
        if targets:
            print(f"warning: no DVC remote is configured; {NOT_PULLED}", file=sys.stderr)
        return False
    if default not in configs:  # none set, or a name no remote has
        which = f"the default DVC remote {default!r} is not one" if default else "none is default"
        print(
            f"warning: DVC remotes {', '.join(sorted(configs))}: {which} (`dvc remote default "
            f"NAME` sets it); {NOT_PULLED}",
            file=sys.stderr,
        )
        return False
    why = unreachable(configs[default])
    if why is not None:
        url = configs[default]["url"]
        print(
            f"warning: DVC remote {default!r} ({url}) cannot be reached: {why}; not pulling, "
            f"{NOT_PULLED}",
            file=sys.stderr,
        )
        return False
    # named targets must all arrive: without --allow-missing, one the remote lacks fails the pull
    command = [sys.executable, "-m", "dvc", "pull", *([] if targets else ["--allow-missing"])]
    command += targets
    if subprocess.run(command, cwd=root).returncode != 0:
        print(f"warning: dvc pull failed (see above); {NOT_PULLED}", file=sys.stderr)
        return False
    return True


def parser() -> Parser:
    parser = Parser(__doc__)
    parser.add_argument("command", choices=["pull"], help="pull from the default remote")
    parser.add_argument("targets", nargs="*", help="passed on to dvc pull")
    return parser


def main(argv: Sequence[str] | None = None) -> None:
    targets = parser().parse_args(argv).targets
    if not pull(targets) and targets:  # a named target not pulled is the caller's to know
        sys.exit(1)


if __name__ == "__main__":
    main()
