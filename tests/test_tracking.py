"""sentemb.tracking: key handling, a SQLite store, an unreachable server and a real server."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
import warnings
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from sentemb import clock, mlflow_store, signals, tracking
from sentemb.io import numbers
from sentemb.mlflow_store import param_value, sanitize_key
from sentemb.services import CONNECT_SECONDS
from sentemb.tracking import TrackingWarning, mlflow_run

from support import MIRROR, REPO
from support.repos import git
from support.services import UNRESOLVABLE, FakeServer, fake_server, free_port

ENV_VARS = (
    "MLFLOW_TRACKING_URI",
    "MLFLOW_EXPERIMENT_NAME",
    *mlflow_store.FAST_FAIL_ENV,
    "DATABRICKS_HOST",
    "DATABRICKS_TOKEN",
    "DATABRICKS_CONFIG_PROFILE",
    "DATABRICKS_CONFIG_FILE",
    "DVC_ROOT",
    "DVC_EXP_NAME",
    "DVC_EXP_BASELINE_REV",
    "DVC_STAGE",
)


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """Start from no MLflow/DVC variables; whatever a test or mlflow_run sets is undone."""
    for name in ENV_VARS:
        monkeypatch.setenv(name, "")  # records the old state, so that it is restored
        monkeypatch.delenv(name)


def port_open(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(1)
        return sock.connect_ex(("127.0.0.1", port)) == 0


def tracking_records(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == "sentemb.tracking" and r.levelno >= 30]


# -- 1. pure functions -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("key", "expected"),
    [
        ("sts.stsb.spearman", "sts.stsb.spearman"),
        ("mrr@10", "mrr_at_10"),
        ("acc%", "acc_pct"),
        ("recall (top-1)", "recall _top-1_"),
        ("a:b", "a_b"),
        ("a//b/", "a/b"),
        ("/abs/./x", "abs/x"),
        ("../up", "__/up"),
        ("é", "_"),
        ("", "_"),
    ],
)
def test_sanitize_key(key: str, expected: str) -> None:
    assert sanitize_key(key) == expected
    assert sanitize_key(key) == sanitize_key(key)  # deterministic


def test_sanitize_long_key_is_deterministic_and_short() -> None:
    long_a, long_b = "k" * 300 + "a", "k" * 300 + "b"
    assert len(sanitize_key(long_a)) <= 250
    assert sanitize_key(long_a) == sanitize_key(long_a)
    assert sanitize_key(long_a) != sanitize_key(long_b)


def test_param_value() -> None:
    assert param_value([1, 2]) == "[1, 2]"
    assert param_value(("MR", "CR")) == '["MR", "CR"]'
    assert param_value(None) == "None"
    assert param_value(0.1) == "0.1"
    long = param_value("x" * 7000)
    assert len(long) == 6000 and long.endswith("...")


def test_import_is_cheap() -> None:
    code = "import sys, sentemb.tracking; assert 'mlflow' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_default_uri_is_sqlite_in_repo_root(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    git(tmp_path, "init", "-q")
    (tmp_path / "sub").mkdir()
    monkeypatch.chdir(tmp_path / "sub")
    root = tmp_path.resolve()
    assert mlflow_store.tracking_uri() == f"sqlite:///{root}/mlflow.db"
    monkeypatch.setenv("DVC_ROOT", str(tmp_path / "sub"))
    assert mlflow_store.tracking_uri() == f"sqlite:///{root}/sub/mlflow.db"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://127.0.0.1:5000")
    assert mlflow_store.tracking_uri() == "http://127.0.0.1:5000"
    assert mlflow_store.experiment_name() == "sentemb"
    monkeypatch.setenv("MLFLOW_EXPERIMENT_NAME", "other")
    assert mlflow_store.experiment_name() == "other"


# -- 2. a SQLite store -----------------------------------------------------------------------------


@pytest.fixture(scope="session")
def migrated_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An empty MLflow SQLite database with its tables created (that takes seconds)."""
    from mlflow.tracking import MlflowClient

    path = tmp_path_factory.mktemp("template") / "mlflow.db"
    MlflowClient(tracking_uri=f"sqlite:///{path}").search_experiments()
    return path


@pytest.fixture
def sqlite_uri(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, migrated_db: Path) -> str:
    """MLFLOW_TRACKING_URI pointing at a fresh copy of `migrated_db` in `tmp_path`."""
    shutil.copyfile(migrated_db, tmp_path / "mlflow.db")
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    monkeypatch.setenv("MLFLOW_EXPERIMENT_NAME", "test-sqlite")
    monkeypatch.chdir(tmp_path)
    return uri


def test_sqlite_run_logs_everything(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from mlflow.tracking import MlflowClient

    sqlite_uri = f"sqlite:///{tmp_path}/db/mlflow.db"  # new, in a new folder: both are created
    monkeypatch.setenv("MLFLOW_TRACKING_URI", sqlite_uri)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("DVC_EXP_NAME", "exp-abc")
    monkeypatch.setenv("DVC_STAGE", "evaluate@simcse")
    (tmp_path / "metrics").mkdir()
    (tmp_path / "metrics" / "sts.json").write_text('{"avg": 76.3}\n')
    (tmp_path / "plots").mkdir()
    (tmp_path / "plots" / "a.csv").write_text("x,y\n1,2\n")
    many = {f"p{i:03d}": i for i in range(150)}  # more than one batch of 100
    params = {"eval": {"transfer": {"kfold": 10}}, "tasks": ["MR", "CR"], "long": "x" * 7000}

    with mlflow_run("evaluate", {**params, "many": many}, run_name="eval-simcse") as run:
        run.log_metrics({"sts.avg": 76.3, "mrr@10": 0.5})
        run.log_metrics({"loss": 1.0}, step=1)
        run.log_metrics({"loss": 0.5}, step=2)
        run.log_artifact(tmp_path / "metrics" / "sts.json")
        run.log_artifact(tmp_path / "plots")
        run.set_tags({"model": "simcse"})
    assert run.unlogged == []
    assert run.error is None

    client = MlflowClient(tracking_uri=sqlite_uri)
    got = client.get_run(run.run_id)
    assert got.info.status == "FINISHED"
    assert got.info.run_name == "eval-simcse"
    assert got.data.params["eval.transfer.kfold"] == "10"
    assert got.data.params["tasks"] == '["MR", "CR"]'
    assert len(got.data.params["long"]) == 6000
    assert sum(key.startswith("many.") for key in got.data.params) == 150
    assert got.data.metrics == {"sts.avg": 76.3, "mrr_at_10": 0.5, "loss": 0.5}
    history = client.get_metric_history(run.run_id, "loss")
    assert [(m.step, m.value) for m in history] == [(1, 1.0), (2, 0.5)]
    tags = got.data.tags
    assert tags["dvc.stage"] == "evaluate"
    assert tags["dvc.experiment"] == "exp-abc"
    assert tags["dvc.stage_address"] == "evaluate@simcse"
    assert tags["mlflow.runName"] == "eval-simcse"
    assert tags["model"] == "simcse"
    assert tags["git.commit"]
    artifacts = {a.path for a in client.list_artifacts(run.run_id)}
    assert artifacts == {"sts.json", "plots"}
    assert [a.path for a in client.list_artifacts(run.run_id, "plots")] == ["plots/a.csv"]
    # Artifacts of the new experiment live beside the database, never in ./mlruns.
    assert got.info.artifact_uri.startswith((tmp_path / "db" / "mlartifacts").as_uri())
    assert not (tmp_path / "mlruns").exists()


def test_sqlite_failed_body_propagates_and_marks_run_failed(sqlite_uri: str) -> None:
    from mlflow.tracking import MlflowClient

    with pytest.raises(ZeroDivisionError), mlflow_run("train", {"lr": 0.1}) as run:
        run.log_metrics({"loss": 1.0})
        _ = 1 / 0
    got = MlflowClient(tracking_uri=sqlite_uri).get_run(run.run_id)
    assert got.info.status == "FAILED"
    assert got.data.metrics == {"loss": 1.0}
    assert got.data.tags["mlflow.runName"] == "train"


def test_really_locked_database_body_runs_and_warns_once(sqlite_uri: str, tmp_path: Path) -> None:
    """Another process holds an exclusive lock on mlflow.db for the whole stage."""
    import sqlite3

    with mlflow_run("setup", {}):  # the database and its schema exist
        pass
    holder = sqlite3.connect(tmp_path / "mlflow.db", isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    ran = False
    with warnings.catch_warnings(record=True) as caught, mlflow_run("train", {"lr": 1}) as run:
        warnings.simplefilter("always")
        run.log_metrics({"loss": 1.0})
        ran = True
    holder.execute("ROLLBACK")
    holder.close()
    ours = [w for w in caught if issubclass(w.category, TrackingWarning)]
    assert ran and len(ours) == 1 and "database is locked" in str(ours[0].message)
    assert run.unlogged[0].startswith("run start; params: 1 keys")
    assert run.unlogged[1:] == ["metrics step=None: 1 keys"]


def test_failure_mid_run_warns_once(
    sqlite_uri: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from mlflow.tracking import MlflowClient

    artifact = tmp_path / "m.json"
    artifact.write_text("{}")

    def locked(*args: object, **kwargs: object) -> None:
        raise RuntimeError("database is locked")

    with warnings.catch_warnings(record=True) as caught, mlflow_run("train", {}) as run:
        warnings.simplefilter("always")
        run._client.log_batch = locked  # the store goes away after the run started
        run.log_metrics({"a": 1.0, "b": 2.0})
        run.log_artifact(artifact)
        run.log_metrics({"c": 3.0}, step=3)
    ours = [w for w in caught if issubclass(w.category, TrackingWarning)]
    assert len(ours) == 1
    assert "database is locked" in str(ours[0].message)
    assert run.unlogged == [
        "metrics step=None: 2 keys",
        f"artifact {artifact}",
        "metrics step=3: 1 keys",
        f"run end status=FINISHED (run {run.run_id} left RUNNING)",
    ]
    assert len(tracking_records(caplog)) == 1
    assert MlflowClient(tracking_uri=sqlite_uri).get_run(run.run_id).info.status == "RUNNING"


def test_bad_values_and_missing_artifact_do_not_disable_tracking(
    sqlite_uri: str, tmp_path: Path
) -> None:
    from mlflow.tracking import MlflowClient

    with mlflow_run("evaluate", {}) as run:
        run.log_metrics({"ok": 1.0, "bad": "n/a"})  # type: ignore[dict-item]
        run.log_artifact(tmp_path / "nope.json")
        run.log_metrics({"later": 2.0})
    assert run.unlogged == [
        "metric bad: not a number ('n/a')",
        f"artifact {tmp_path / 'nope.json'} (missing)",
    ]
    got = MlflowClient(tracking_uri=sqlite_uri).get_run(run.run_id)
    assert got.data.metrics == {"ok": 1.0, "later": 2.0}
    assert got.info.status == "FINISHED"


# A stage body that logs, says it is running (the run id in argv[1]) and waits to be signalled.
SIGNALLED_STAGE = """
import sys, time
from pathlib import Path
from sentemb.tracking import mlflow_run

with mlflow_run("train", {"lr": 0.1}) as run:
    run.log_metrics({"loss": 1.0}, step=1)
    Path(sys.argv[1]).write_text(run.run_id)
    while True:
        time.sleep(0.05)
"""


@pytest.mark.usefixtures("terminal_sigint")
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_signalled_stage_process_marks_run_killed(
    sqlite_uri: str, tmp_path: Path, signum: int
) -> None:
    """`kill` (SIGTERM) and Ctrl-C (SIGINT) of a real process: the run ends KILLED in the
    SQLite store, the exit status is non-zero (143 for SIGTERM, with no traceback)."""
    from mlflow.tracking import MlflowClient

    started = tmp_path / "started"
    process = subprocess.Popen(
        [sys.executable, "-c", SIGNALLED_STAGE, str(started)],
        env={**os.environ, "MLFLOW_DISABLE_TELEMETRY": "true"},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 120
        while not started.exists() and process.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        assert started.exists(), process.communicate(timeout=10)
        process.send_signal(signum)
        _, stderr = process.communicate(timeout=120)
    finally:
        process.kill()
    got = MlflowClient(tracking_uri=sqlite_uri).get_run(started.read_text())
    assert got.info.status == "KILLED", stderr
    assert got.info.end_time is not None
    assert got.data.metrics == {"loss": 1.0}
    assert process.returncode != 0
    if signum == signal.SIGTERM:
        assert process.returncode == 128 + signal.SIGTERM, stderr
        assert "Traceback" not in stderr, stderr


def test_sigterm_handler_only_during_the_run_and_never_replaces_another(sqlite_uri: str) -> None:
    from mlflow.tracking import MlflowClient

    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
    with pytest.raises(signals.Terminated), mlflow_run("train", {}) as run:
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(5)  # the handler raises in this thread long before
    assert MlflowClient(tracking_uri=sqlite_uri).get_run(run.run_id).info.status == "KILLED"
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL

    def own(signum: int, frame: object) -> None:
        raise KeyError("own handler")

    previous = signal.signal(signal.SIGTERM, own)
    try:
        with mlflow_run("train", {}):
            assert signal.getsignal(signal.SIGTERM) is own
    finally:
        signal.signal(signal.SIGTERM, previous)


# -- 3. an unreachable server ----------------------------------------------------------------------


# Every kind of tracking URI that cannot be used, by scheme: "<scheme> <what is there>".
SQLITE_STORES = [
    "sqlite on /proc",
    "sqlite path is a folder",
    "sqlite in a read-only folder",
    "sqlite file is not a database",
    "sqlite under a file",
]
SERVER_STORES = [
    f"{scheme} {what}"
    for scheme in ("http", "https", "databricks", "postgresql", "mysql", "mssql")
    for what in ("closed port", "unresolvable host", "silent server")
]
REFUSED_BY_MLFLOW = [  # MLflow refuses these itself, at once; no first contact is made
    "file store",
    "bare path",
    "databricks-uc",
    "unknown scheme",
]
STORES = [*SQLITE_STORES, *SERVER_STORES, "databricks without credentials", *REFUSED_BY_MLFLOW]


@contextlib.contextmanager
def unusable_store(
    kind: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest
) -> Iterator[tuple[str, FakeServer | None]]:
    """Set MLFLOW_TRACKING_URI (and Databricks' variables) to a store of `kind`; yield the URI
    and the fake server behind it, if any."""
    monkeypatch.setenv("DATABRICKS_CONFIG_FILE", str(tmp_path / "no-databrickscfg"))
    scheme, _, what = kind.partition(" ")
    server = None
    with contextlib.ExitStack() as stack:
        if kind in SERVER_STORES:
            host, port = "127.0.0.1", free_port()
            if what == "unresolvable host":
                host = UNRESOLVABLE
            elif what == "silent server":
                server = stack.enter_context(fake_server())
                port = server.port
            address = f"{host}:{port}"
            uri = f"{scheme}://u:p@{address}/mlflow"
            if scheme in ("http", "https"):
                uri = f"{scheme}://{address}"
            elif scheme == "databricks":
                uri = "databricks"
                monkeypatch.setenv("DATABRICKS_HOST", f"http://{address}")
                monkeypatch.setenv("DATABRICKS_TOKEN", "dapi-test")
        else:
            database = tmp_path / "mlflow.db"
            uri = {
                "sqlite on /proc": "sqlite:////proc/x.db",
                "sqlite path is a folder": f"sqlite:///{database}",
                "sqlite file is not a database": f"sqlite:///{database}",
                "sqlite under a file": f"sqlite:///{tmp_path / 'file' / 'mlflow.db'}",
                "file store": (tmp_path / "mlruns").as_uri(),
                "bare path": str(tmp_path / "mlruns"),
                "databricks without credentials": "databricks",
                "databricks-uc": "databricks-uc",
                "unknown scheme": "nosuchstore://host/path",
            }.get(kind, "")
            if kind == "sqlite on /proc" and not Path("/proc").is_dir():
                pytest.skip("no /proc here")
            if kind == "sqlite path is a folder":
                database.mkdir()
            elif kind == "sqlite file is not a database":
                database.write_bytes(bytes(range(256)) * 16)
            elif kind == "sqlite under a file":
                (tmp_path / "file").write_text("a file\n")
            elif kind == "sqlite in a read-only folder":
                uri = f"sqlite:///{request.getfixturevalue('read_only') / 'mlflow.db'}"
        monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
        yield uri, server


@pytest.mark.parametrize("kind", STORES)
def test_unusable_store_body_runs_and_warns_once(
    kind: str,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    request: pytest.FixtureRequest,
) -> None:
    """Whatever the scheme and whatever is wrong, the stage runs, one warning says why and one
    log line lists what was not logged. The bound is configured, not timed: one first contact
    (a silent server saw one connection) given up after CONNECT_SECONDS, and MLflow, with its
    retry loops (100 s for a SQL store it cannot open, 15 min for Databricks), never called;
    only the kinds MLflow refuses by itself reach it."""
    import mlflow.tracking  # (import time is not what is bounded here)

    artifact = tmp_path / "sts.json"
    artifact.write_text("{}")
    clients: list[str] = []  # each MlflowClient made, by tracking URI

    def counted_client(tracking_uri: str) -> mlflow.tracking.MlflowClient:
        clients.append(tracking_uri)
        return real_client(tracking_uri=tracking_uri)

    real_client = mlflow.tracking.MlflowClient
    monkeypatch.setattr(mlflow.tracking, "MlflowClient", counted_client)
    ran = []
    start = time.monotonic()
    store = unusable_store(kind, tmp_path, monkeypatch, request)
    with store as (uri, server), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with mlflow_run("evaluate", {"a": {"b": 1}, "c": 2}) as run:
            run.log_metrics({f"m{i}": float(i) for i in range(12)})
            run.log_artifact(artifact)
            run.set_tags({"x": "y"})
            ran.append(True)
    elapsed = time.monotonic() - start

    assert ran == [True]
    ours = [w for w in caught if issubclass(w.category, TrackingWarning)]
    assert len(ours) == 1, [str(w.message) for w in caught]
    assert f"({uri})" in str(ours[0].message)
    assert run.run_id is None and run.error
    n_tags = len(mlflow_store.git_tags()) + 2  # git.*, dvc.stage, mlflow.runName
    assert run.unlogged == [
        f"run start; params: 2 keys; tags: {n_tags} keys",
        "metrics step=None: 12 keys",
        f"artifact {artifact}",
        "tags: 1 keys",
    ]
    summary = tracking_records(caplog)
    assert len(summary) == 1 and "metrics step=None: 12 keys" in summary[0].getMessage()
    assert clients == ([uri] if kind in REFUSED_BY_MLFLOW else []), run.error
    driver_missing = "No module named" in run.error  # a SQL store without its driver installed
    if server is not None:
        assert server.connections == (0 if driver_missing else 1)
    if kind.endswith("silent server") and not driver_missing:
        assert run.error == f"TimeoutError: no answer within {CONNECT_SECONDS:g} s"
    # Far above CONNECT_SECONDS, far below MLflow's loops: a loop that comes back fails this
    # even on a loaded machine.
    assert elapsed < 60, f"an unusable store ({kind}) cost {elapsed:.1f} s"


def test_users_own_settings_win_and_defaults_last_the_run(monkeypatch: pytest.MonkeyPatch) -> None:
    """FAST_FAIL_ENV fills only what the user left unset, and only while the run lasts; the
    user's MLFLOW_HTTP_REQUEST_TIMEOUT is also how long the first contact waits."""
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "1")
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "3")
    with fake_server() as server:
        monkeypatch.setenv("MLFLOW_TRACKING_URI", f"http://127.0.0.1:{server.port}")
        with pytest.warns(TrackingWarning, match="no answer within 1 s"), mlflow_run("e", {}):
            during = {name: os.environ.get(name) for name in mlflow_store.FAST_FAIL_ENV}
    assert during == {
        "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "3",
        "MLFLOW_HTTP_REQUEST_TIMEOUT": "1",
        "MLFLOW_DATABRICKS_ENDPOINT_HTTP_RETRY_TIMEOUT": "10",
    }
    after = {name: os.environ.get(name) for name in mlflow_store.FAST_FAIL_ENV}
    assert after == {**during, "MLFLOW_DATABRICKS_ENDPOINT_HTTP_RETRY_TIMEOUT": None}
    assert server.connections == 1


def test_unreachable_server_body_error_propagates(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"http://127.0.0.1:{free_port()}")
    with (
        pytest.warns(TrackingWarning),
        pytest.raises(KeyError, match="boom"),
        mlflow_run("evaluate", {}) as run,
    ):
        raise KeyError("boom")
    n_tags = len(mlflow_store.git_tags()) + 2
    assert run.unlogged == [f"run start; params: 0 keys; tags: {n_tags} keys"]


# -- 4. a real tracking server, and a stage process talking to it ---------------------------------

# The real evaluate stage (TF-IDF baseline on STS13 of the offline mirror) runs against it.
STAGE_COMMAND = [
    sys.executable,
    str(REPO / "stages" / "evaluate.py"),
    "--suites",
    "sts",
    "--model",
    "tfidf",
    "--data",
    str(MIRROR),
    "--params",
    "params.yaml",
    "--out-dir",
    "metrics",
]
STAGE_PARAMS = "eval:\n  sts:\n    tasks: [STS13]\n"
EXPECTED_PARAMS = {"model": "tfidf", "eval.sts.tasks": '["STS13"]'}
EXPECTED_ARTIFACT = "sts.json"


def mlflow_server_command(port: int, folder: Path) -> list[str]:
    """The server as the README shows it (sqlite backend, artifacts proxied by the server)."""
    return [
        sys.executable,
        "-m",
        "mlflow",
        "server",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--backend-store-uri",
        f"sqlite:///{folder}/srv.db",
        "--serve-artifacts",
        "--artifacts-destination",
        str(folder / "mlartifacts"),
        "--workers",
        "1",
    ]


def group_alive(pgid: int) -> bool:
    """Whether any non-zombie process is left in process group `pgid`."""
    proc = Path("/proc")
    if not proc.is_dir():
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return False
        return True
    for stat in proc.glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            return True
    return False


def stop_group(process: subprocess.Popen[bytes], timeout: float = 20) -> None:
    """SIGTERM the whole process group (server and workers), then SIGKILL what is left."""
    pgid = process.pid  # start_new_session=True: the server leads its own group
    for sig in (signal.SIGTERM, signal.SIGKILL):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, sig)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if process.poll() is not None and not group_alive(pgid):
                return
            time.sleep(0.2)


@pytest.fixture
def mlflow_server(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    folder = tmp_path / "server"
    folder.mkdir()
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    log_path = folder / "server.log"
    env = {**os.environ, "MLFLOW_DISABLE_TELEMETRY": "true"}
    with open(log_path, "wb") as log_file:
        process = subprocess.Popen(
            mlflow_server_command(port, folder),
            cwd=folder,
            env=env,
            stdout=log_file,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        deadline = time.monotonic() + 120
        while True:
            if process.poll() is not None:
                pytest.fail(f"mlflow server exited early:\n{log_path.read_text()[-4000:]}")
            try:
                with urllib.request.urlopen(f"{url}/health", timeout=2) as response:
                    if response.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"mlflow server not healthy in 120 s:\n{log_path.read_text()[-4000:]}")
            time.sleep(0.5)
        yield url, folder
    finally:
        stop_group(process)
        assert not group_alive(process.pid), "server workers survived SIGKILL"
        assert not port_open(port), f"port {port} still open after stopping the server"


@pytest.mark.slow
def test_stage_process_logs_to_real_server(mlflow_server: tuple[str, Path], tmp_path: Path) -> None:
    from mlflow.tracking import MlflowClient

    url, server_folder = mlflow_server
    workdir = tmp_path / "work"
    workdir.mkdir()
    env = {
        **os.environ,
        "MLFLOW_TRACKING_URI": url,
        "MLFLOW_EXPERIMENT_NAME": "sentemb-server-test",
        "DVC_EXP_NAME": "exp-server",
    }
    if not MIRROR.is_dir():
        pytest.skip(f"offline mirror not found at {MIRROR}")
    (workdir / "params.yaml").write_text(STAGE_PARAMS)
    done = subprocess.run(
        STAGE_COMMAND, cwd=workdir, env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "TrackingWarning" not in done.stderr, done.stderr

    client = MlflowClient(tracking_uri=url)
    experiment = client.get_experiment_by_name("sentemb-server-test")
    assert experiment is not None
    runs = client.search_runs([experiment.experiment_id])
    assert len(runs) == 1
    run = runs[0]
    assert run.info.status == "FINISHED"
    written = json.loads((workdir / "metrics" / "sts.json").read_text())
    assert EXPECTED_PARAMS.items() <= run.data.params.items()
    assert run.data.metrics["sts.STS13"] == pytest.approx(written["STS13"])
    tags = run.data.tags
    assert tags["dvc.stage"] == "evaluate"
    assert tags["dvc.experiment"] == "exp-server"
    assert tags["mlflow.runName"] == "evaluate:tfidf"
    assert "git.commit" in tags
    assert EXPECTED_ARTIFACT in {a.path for a in client.list_artifacts(run.info.run_id)}
    local = client.download_artifacts(run.info.run_id, EXPECTED_ARTIFACT, str(tmp_path))
    assert json.loads(Path(local).read_text()) == written
    # The server stored the file under its --artifacts-destination.
    stored = list((server_folder / "mlartifacts").rglob(EXPECTED_ARTIFACT))
    assert len(stored) == 1


def test_only_rank_zero_logs(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://127.0.0.1:9")
    with mlflow_run("train", {"a": 1}) as run:
        run.log_metrics({"loss": 1.0})
    assert run.run_id is None and run.unlogged == ["metrics step=None: 1 keys"]


# -- 5. metrics files with the stage's wall time, and models ------------------------------------


def test_write_metrics_adds_seconds_logs_numbers_and_attaches_the_file(sqlite_uri: str) -> None:
    from mlflow.tracking import MlflowClient

    metrics = {"method": "simcse", "best_dev": 81.5, "nested": {"a": 2}, "warnings": [], "x": None}
    with mlflow_run("train", {}) as run:
        time.sleep(0.2)
        written = run.write_metrics(Path("metrics/train.json"), metrics)
        with pytest.raises(ValueError, match="wall time"):
            run.write_metrics(Path("other.json"), {clock.SECONDS: 1})
    assert run.unlogged == []
    on_disk = json.loads(Path("metrics/train.json").read_text())
    assert on_disk == written == {**metrics, "seconds": on_disk["seconds"]}
    assert 0.2 <= on_disk["seconds"] < 60 and list(on_disk)[-1] == "seconds"
    got = MlflowClient(tracking_uri=sqlite_uri).get_run(run.run_id)
    assert got.data.metrics == {"best_dev": 81.5, "nested.a": 2.0, "seconds": on_disk["seconds"]}
    artifacts = MlflowClient(tracking_uri=sqlite_uri).list_artifacts(run.run_id)
    assert [a.path for a in artifacts] == ["train.json"]
    assert not Path("other.json").exists()


def test_write_metrics_of_one_of_several_files_takes_its_seconds_and_name(sqlite_uri: str) -> None:
    """Stage evaluate writes one file per suite in one run: each with its suite's own wall time,
    its numbers logged under ``<suite>.`` so that two suites' ``avg`` do not collide."""
    from mlflow.tracking import MlflowClient

    with mlflow_run("evaluate", {}) as run:
        for suite, avg in (("sts", 80.0), ("transfer", 85.0)):
            run.write_metrics(Path(f"{suite}.json"), {"avg": avg}, 12.34, suite)
    assert json.loads(Path("sts.json").read_text()) == {"avg": 80.0, "seconds": 12.3}
    got = MlflowClient(tracking_uri=sqlite_uri).get_run(run.run_id)
    assert got.data.metrics == {
        "sts.avg": 80.0,
        "sts.seconds": 12.3,
        "transfer.avg": 85.0,
        "transfer.seconds": 12.3,
    }


def test_numbers_are_the_numeric_leaves() -> None:
    metrics = {"a": 1, "b": True, "c": "x", "d": {"e": 2.5, "f": [1]}, "g": None}
    assert numbers(metrics) == {"a": 1.0, "d.e": 2.5}


def tiny_st_folder(tiny_model_dir: Path, folder: Path, pooler: str = "cls_before_pooler") -> Path:
    from sentemb.encoder import Encoder

    Encoder.from_pretrained(str(tiny_model_dir), pooler).save(folder)
    return folder


SENTENCES = ["A man is playing a guitar.", "Two dogs run in the snow."]


def test_model_logged_with_the_flavour_loads_with_the_same_vectors(
    sqlite_uri: str, tiny_model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where MLflow supports the installed sentence-transformers (forced here: see the next
    test), `mlflow.sentence_transformers.load_model(run.model_uri)` gives the folder's vectors."""
    import mlflow
    from mlflow.tracking import MlflowClient
    from sentence_transformers import SentenceTransformer

    folder = tiny_st_folder(tiny_model_dir, tmp_path / "model")
    monkeypatch.setattr(tracking, "flavour_unsupported", lambda: None)
    monkeypatch.delenv("MLFLOW_EXPERIMENT_NAME")  # sentemb's default experiment, as in dvc repro
    with mlflow_run("train", {}) as run:
        run.log_model(folder)
    assert run.unlogged == [] and run.model_uri
    model = MlflowClient(tracking_uri=sqlite_uri).get_logged_model(run.model_uri.split("/")[-1])
    assert model.experiment_id == run.experiment_id  # the run's, not "Default" in ./mlruns
    assert not (tmp_path / "mlruns").exists()
    loaded = mlflow.sentence_transformers.load_model(run.model_uri)
    expected = SentenceTransformer(str(folder), device="cpu").encode(SENTENCES)
    np.testing.assert_array_equal(loaded.encode(SENTENCES), expected)


UNSUPPORTED = "mlflow 3.17.2 supports sentence-transformers 3.2.0 to 6.1.0, and 6.2.0 is installed"
FALLBACKS = {  # what the warning says, by case
    "flavour unsupported": UNSUPPORTED,
    "first_last_avg": "no sentence-transformers equivalent",
    "no pooling config": "cannot load it",
}


@pytest.mark.parametrize("case", list(FALLBACKS))
def test_model_falls_back_to_an_artifact_with_a_warning(
    case: str,
    sqlite_uri: str,
    tiny_model_dir: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The folder as an artifact where the flavour does not hold: MLflow's bounds exclude the
    installed sentence-transformers; a pooler it lacks (no modules.json: SentenceTransformer(folder)
    made it mean pooling, and the flavour logged other vectors); a folder it cannot load (which
    disabled tracking and left the run RUNNING). The run goes on and ends FINISHED."""
    from mlflow.tracking import MlflowClient

    pooler = case if case == "first_last_avg" else "cls_before_pooler"
    folder = tiny_st_folder(tiny_model_dir, tmp_path / "model", pooler)
    if case == "no pooling config":
        (folder / "1_Pooling" / "config.json").unlink()
    unsupported = UNSUPPORTED if case == "flavour unsupported" else None
    monkeypatch.setattr(tracking, "flavour_unsupported", lambda: unsupported)
    with caplog.at_level(logging.WARNING), mlflow_run("train", {}) as run:
        run.log_model(folder)
        run.log_metrics({"after": 1.0})
    assert run.unlogged == [] and run.model_uri is None and run.error is None
    assert any(
        FALLBACKS[case] in r.getMessage() and "artifact model/model" in r.getMessage()
        for r in tracking_records(caplog)
    )
    client = MlflowClient(tracking_uri=sqlite_uri)
    logged = client.get_run(run.run_id)
    assert logged.info.status == "FINISHED" and logged.data.metrics["after"] == 1.0
    assert "model/model/model.safetensors" in {
        a.path for a in client.list_artifacts(run.run_id, "model/model")
    }


def test_flavour_check_follows_mlflows_own_bounds(monkeypatch: pytest.MonkeyPatch) -> None:
    """The pinned versions (requirements.txt) decide: inside MLflow's tested range, the flavour."""
    from importlib.metadata import version

    from mlflow.utils.autologging_utils.versioning import get_min_max_version_and_pip_release
    from packaging.version import Version

    low, high, _ = get_min_max_version_and_pip_release("sentence_transformers", "models")
    inside = Version(low) <= Version(version("sentence-transformers")) <= Version(high)
    assert (tracking.flavour_unsupported() is None) == inside
    monkeypatch.setattr("importlib.metadata.version", lambda name: high)
    assert tracking.flavour_unsupported() is None
    monkeypatch.setattr("importlib.metadata.version", lambda name: "99.0.0")
    assert "99.0.0 is installed" in tracking.flavour_unsupported()
