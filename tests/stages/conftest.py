"""The fixtures of the stage tests: the stages' environment, and data folders as the download
stage leaves them (run, or linked from the mirror)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from support.stages import DOWNLOADED, linked_data, run_stage, write_params


@pytest.fixture(scope="module")
def stage_env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """This environment, with the stages' own MLflow database, and without any Databricks
    setting a test of this process left (a stage would then reach for that host and log a
    warning after its error line)."""
    db = tmp_path_factory.mktemp("mlflow") / "mlflow.db"
    own = {k: v for k, v in os.environ.items() if not k.startswith("DATABRICKS_")}
    return {**own, "MLFLOW_TRACKING_URI": f"sqlite:///{db}", "DVC_NO_ANALYTICS": "1"}


@pytest.fixture(scope="module")
def offline_env(stage_env: dict[str, str]) -> dict[str, str]:
    """`stage_env` with every download refused at once (a proxy nobody listens on), online or
    not."""
    unreachable = "http://127.0.0.1:9"
    inherited = {k: v for k, v in stage_env.items() if k.lower() != "no_proxy"}
    return inherited | {"http_proxy": unreachable, "https_proxy": unreachable}


@pytest.fixture(scope="module")
def downloaded(
    tmp_path_factory: pytest.TempPathFactory, mirror: Path, offline_env: dict[str, str]
) -> Path:
    """A folder where `stages/download.py` fetched `DOWNLOADED` from the mirror (QQP is not in
    it: missing, with the reason) and `stages/corpus.py` kept 500 corpus sentences."""
    work = tmp_path_factory.mktemp("work")
    write_params(work, mirror, data={"datasets": DOWNLOADED, "timeout": 2})
    for script in ("download.py", "corpus.py"):
        result = run_stage(script, [], work, offline_env)
        assert result.returncode == 0, result.stderr[-3000:]
    return work


@pytest.fixture(scope="module")
def data_root(tmp_path_factory: pytest.TempPathFactory, mirror: Path) -> Path:
    """The mirror's sets and corpus linked as the download stage leaves them offline."""
    return linked_data(tmp_path_factory.mktemp("raw"), mirror)
