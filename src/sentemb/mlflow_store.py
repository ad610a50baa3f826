"""Where a stage's MLflow runs go, and a first contact with that store that takes seconds.

* tracking URI: ``$MLFLOW_TRACKING_URI``, else ``sqlite:///<repo root>/mlflow.db``, where the repo
  root is ``$DVC_ROOT`` (set by DVC for every stage command, and pointing at the real workspace
  even for queued experiments run in a temporary copy), else the git top level of the current
  directory, else the current directory. The ``./mlruns`` file store is never used (MLflow 3.x
  refuses it); artifacts of a new experiment in a local SQLite store go to ``mlartifacts/``
  beside the database file;
* experiment: ``$MLFLOW_EXPERIMENT_NAME``, else ``sentemb``.

Before MLflow is called, :func:`check_store` makes one first contact of at most
:data:`~sentemb.services.CONNECT_SECONDS` (MLflow's own loops wait about 100 s for a SQL store
it cannot open, more than 15 min for Databricks); during a run :func:`fast_fail_env` stops
MLflow's retries. What MLflow accepts of a key, a param or a tag (its limits) is here too.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import posixpath
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from sentemb import git
from sentemb.services import CONNECT_SECONDS, call_within, http_answers, reason

DEFAULT_EXPERIMENT = "sentemb"
DB_NAME = "mlflow.db"
ARTIFACTS_DIR = "mlartifacts"

# Environment defaults during a run, so that a store that fails mid-run costs seconds, not
# minutes (names from mlflow/environment_variables.py, mlflow 3.x): one HTTP attempt of at most
# 10 s (an upload's answer may take that long), and Databricks' SDK retrying for 10 s, not 500 s.
# A variable the user set is theirs; an explicit MLFLOW_HTTP_REQUEST_TIMEOUT also sets how long
# the first contact (`check_store`) may wait.
HTTP_TIMEOUT_ENV = "MLFLOW_HTTP_REQUEST_TIMEOUT"
FAST_FAIL_ENV = {
    "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "0",
    HTTP_TIMEOUT_ENV: "10",
    "MLFLOW_DATABRICKS_ENDPOINT_HTTP_RETRY_TIMEOUT": "10",
}


def tracking_uri() -> str:
    """``$MLFLOW_TRACKING_URI``, else a SQLite database in the repo root."""
    uri = os.environ.get("MLFLOW_TRACKING_URI", "").strip()
    return uri or f"sqlite:///{repo_root() / DB_NAME}"


def experiment_name() -> str:
    """``$MLFLOW_EXPERIMENT_NAME``, else ``sentemb``."""
    return os.environ.get("MLFLOW_EXPERIMENT_NAME", "").strip() or DEFAULT_EXPERIMENT


def repo_root() -> Path:
    """``$DVC_ROOT``, else the git top level of the current directory, else the current one."""
    if os.environ.get("DVC_ROOT"):
        return Path(os.environ["DVC_ROOT"]).resolve()
    top = git.output("rev-parse", "--show-toplevel")
    return Path(top).resolve() if top else Path.cwd().resolve()


def _sqlite_file(uri: str) -> Path | None:
    """The database file of a file-backed SQLite URI (not ``:memory:`` or a ``file:`` URI)."""
    if not uri.startswith("sqlite:"):
        return None
    try:
        from sqlalchemy.engine import make_url

        database = make_url(uri).database
    except Exception:
        return None
    if not database or database == ":memory:" or database.startswith("file:"):
        return None
    return Path(database)


def local_artifact_location(uri: str) -> str | None:
    """For a file-backed SQLite URI: a file URI of ``mlartifacts/`` beside the database."""
    database = _sqlite_file(uri)
    return None if database is None else (database.resolve().parent / ARTIFACTS_DIR).as_uri()


def _open_sqlite(database: Path, seconds: float) -> None:
    """Open `database` as MLflow would (creating it and its folders if missing) and read its
    table list, waiting at most `seconds` for another process's lock: a folder, a file that is
    no database, a place where no file can be made (``/proc``, a read-only folder) or a lock
    held throughout raises at once, not after MLflow's ten tries of 100 s in all."""
    import sqlite3

    database.parent.mkdir(parents=True, exist_ok=True)
    with contextlib.closing(sqlite3.connect(database, timeout=seconds)) as connection:
        connection.execute("SELECT count(*) FROM sqlite_master").fetchone()


def _database_answers(uri: str) -> None:
    """Connect once to the SQL database of `uri` (its driver missing raises at once)."""
    import sqlalchemy

    engine = sqlalchemy.create_engine(uri)
    try:
        with engine.connect():
            pass
    finally:
        engine.dispose()


def _databricks_answers(uri: str, seconds: float) -> None:
    """The Databricks workspace of `uri` (from its credentials, which must exist) answers."""
    from mlflow.utils.databricks_utils import get_databricks_host_creds

    http_answers(get_databricks_host_creds(uri).host, seconds)


def check_store(uri: str, seconds: float = CONNECT_SECONDS) -> None:
    """Raise unless the tracking store at `uri` answers a first contact within `seconds`.

    A SQLite file is opened as MLflow would open it; a SQL server gets one connection, an HTTP(S)
    server or a Databricks workspace one request, each abandoned after `seconds`, so a host that
    does not resolve, a closed port or a server that never answers costs `seconds` at most.
    Other URIs (a file store, an unknown scheme) are left to MLflow, which refuses them at once.
    """
    scheme = urlsplit(uri).scheme.lower()
    if scheme == "sqlite":
        database = _sqlite_file(uri)
        if database is not None:
            _open_sqlite(database, seconds)
    elif scheme in ("http", "https"):
        call_within(seconds, lambda: http_answers(uri, seconds))
    elif scheme == "databricks" or uri == "databricks":
        call_within(seconds, lambda: _databricks_answers(uri, seconds))
    elif scheme.partition("+")[0] in ("postgresql", "mysql", "mssql"):
        call_within(seconds, lambda: _database_answers(uri))


@contextlib.contextmanager
def fast_fail_env() -> Iterator[dict[str, str]]:
    """:data:`FAST_FAIL_ENV` for the variables the user left unset, while inside; yields those
    the user set."""
    own = {name: os.environ[name] for name in FAST_FAIL_ENV if name in os.environ}
    added = [name for name in FAST_FAIL_ENV if name not in own]
    os.environ.update({name: FAST_FAIL_ENV[name] for name in added})
    try:
        yield own
    finally:
        for name in added:
            os.environ.pop(name, None)


# Limits enforced by MLflow (mlflow/utils/validation.py).
MAX_PARAM_VAL_LENGTH = 6000
MAX_TAG_VAL_LENGTH = 8000
MAX_KEY_LENGTH = 250
MAX_PARAMS_TAGS_PER_BATCH = 100
MAX_METRICS_PER_BATCH = 1000

# Environment variables that `dvc exp run` / `dvc repro` set for a stage command (dvc 3.x:
# dvc/repo/experiments/queue/base.py and dvc/stage/run.py).
DVC_ENV_TAGS = {
    "DVC_EXP_NAME": "dvc.experiment",
    "DVC_EXP_BASELINE_REV": "dvc.baseline_rev",
    "DVC_STAGE": "dvc.stage_address",
}

_KEY_REPLACEMENTS = {"@": "_at_", "%": "_pct"}
_BAD_KEY_CHARS = re.compile(r"[^A-Za-z0-9_\-. /]")


def sanitize_key(key: str) -> str:
    """Map `key` to a valid MLflow param/metric/tag name, deterministically.

    MLflow allows alphanumerics, ``_ - . space /`` (and ``:`` except on Windows), no path tricks
    (``a//b``, ``../a``, ``/a``, ``a/``) and at most 250 characters. ``@`` becomes ``_at_``
    (``mrr@10`` -> ``mrr_at_10``), ``%`` becomes ``_pct``, any other character ``_``.
    """
    for char, replacement in _KEY_REPLACEMENTS.items():
        key = key.replace(char, replacement)
    key = _BAD_KEY_CHARS.sub("_", key)
    parts = [part for part in key.split("/") if part not in ("", ".")]
    key = "/".join("_" * len(part) if part == ".." else part for part in parts) or "_"
    if len(key) > MAX_KEY_LENGTH:
        digest = hashlib.sha1(key.encode("utf-8")).hexdigest()[:8]
        key = f"{key[: MAX_KEY_LENGTH - 9].rstrip('/')}_{digest}"
    assert posixpath.normpath(key) == key, key
    return key


def flavour_unsupported() -> str | None:
    """Why MLflow's ``sentence_transformers`` flavour should not be used here (the installed
    sentence-transformers outside the range the installed MLflow supports), else None."""
    from importlib.metadata import PackageNotFoundError, version

    from packaging.version import Version

    try:
        from mlflow.utils.autologging_utils.versioning import get_min_max_version_and_pip_release

        low, high, package = get_min_max_version_and_pip_release("sentence_transformers", "models")
        installed = version(package)
    except (ImportError, KeyError, PackageNotFoundError) as err:
        return f"the sentence_transformers flavour cannot be checked ({reason(err)})"
    if Version(low) <= Version(installed) <= Version(high):
        return None
    return (
        f"mlflow {version('mlflow')} supports {package} {low} to {high}, and {installed} is "
        "installed"
    )


def param_value(value: Any) -> str:
    """Render a param value as MLflow stores it: lists as JSON, cut to 6000 characters."""
    if isinstance(value, list | tuple):
        text = json.dumps(list(value), default=str)
    elif isinstance(value, str):
        text = value
    else:
        text = str(value)
    return truncate(text, MAX_PARAM_VAL_LENGTH)


def git_tags(cwd: str | Path | None = None) -> dict[str, str]:
    """``git.commit`` (``unknown`` outside git) and, inside git, ``git.dirty`` (true/false)."""
    commit = git.output("rev-parse", "HEAD", cwd=cwd)
    if not commit:
        return {"git.commit": "unknown"}
    tags = {"git.commit": commit, "mlflow.source.git.commit": commit}
    status = git.output("status", "--porcelain", "--untracked-files=no", cwd=cwd, strip=False)
    if status is not None:
        tags["git.dirty"] = "true" if status.strip() else "false"
    return tags


def truncate(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def chunks(items: list[Any], size: int) -> Iterator[list[Any]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]
