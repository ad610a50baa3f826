"""The one place that talks to MLflow: a run per DVC stage that never breaks the stage.

Usage in a stage::

    with mlflow_run("evaluate", params) as run:
        scores = evaluate(...)
        run.write_metrics("metrics/sts.json", scores)  # + "seconds"; logged, file attached

`write_metrics` is how every stage writes its metrics file: atomically, with the stage's wall time
so far under ``seconds`` (:data:`SECONDS`, from the start of the run), every number in it logged
as an MLflow metric (nested keys dotted) and the file attached as an artifact. Readers of metrics
files skip ``seconds``: it is a time, not a result, and differs from run to run.

Where the runs go: `sentemb.mlflow_store`.

If MLflow cannot be reached (server down, bad URI, database locked, ...), one warning says why,
the stage goes on, and everything afterwards is recorded in :attr:`RunLogger.unlogged` and
listed in one log warning when the run ends. That takes seconds, whatever the store (the first
contact and the retries: `sentemb.mlflow_store`). Errors raised by the stage itself propagate
(and the MLflow run, if there is one, ends as ``FAILED``). Ctrl-C (SIGINT) and SIGTERM end the
run as ``KILLED`` (`sentemb.signals`).

``mlflow`` is imported lazily, so importing this module is cheap.
"""

from __future__ import annotations

import contextlib
import logging
import os
import posixpath
import time
import warnings
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from sentemb.clock import SECONDS, stage_started
from sentemb.io import flatten, numbers, write_json
from sentemb.mlflow_store import (
    DVC_ENV_TAGS,
    HTTP_TIMEOUT_ENV,
    MAX_METRICS_PER_BATCH,
    MAX_PARAMS_TAGS_PER_BATCH,
    MAX_TAG_VAL_LENGTH,
    check_store,
    chunks,
    experiment_name,
    fast_fail_env,
    flavour_unsupported,
    git_tags,
    local_artifact_location,
    param_value,
    sanitize_key,
    tracking_uri,
    truncate,
)
from sentemb.services import CONNECT_SECONDS, reason
from sentemb.signals import Terminated, sigterm_raises

log = logging.getLogger(__name__)


class TrackingWarning(UserWarning):
    """MLflow could not be used; the stage carries on without (some) tracking."""


class RunLogger:
    """Logs to one MLflow run; after the first MLflow failure every call is a no-op.

    ``unlogged`` lists what could not be logged (``"metrics step=None: 12 keys"``,
    ``"artifact metrics/sts.json"``, ...).
    """

    def __init__(self, stage: str) -> None:
        self.stage = stage
        self.unlogged: list[str] = []
        self.tracking_uri: str | None = None
        self.experiment_id: str | None = None
        self.run_id: str | None = None
        self.error: str | None = None
        self.model_uri: str | None = None
        self.started = stage_started()
        self._client: Any = None

    @property
    def seconds(self) -> float:
        """Wall time since the run started (the stage's clock)."""
        return time.perf_counter() - self.started

    @property
    def active(self) -> bool:
        """True while the run exists and MLflow has not failed."""
        return self.run_id is not None and self.error is None

    # -- public API used by the stages ---------------------------------------------------------

    def log_metrics(self, metrics: Mapping[str, float], step: int | None = None) -> None:
        """Log numeric metrics (keys sanitized; non-numeric values are listed in ``unlogged``)."""
        what = f"metrics step={step}: {len(metrics)} keys"
        if not self.active:
            self.unlogged.append(what)
            return
        from mlflow.entities import Metric

        timestamp = int(time.time() * 1000)
        entries: dict[str, Any] = {}
        for key, value in metrics.items():
            try:
                number = float(value)
            except (TypeError, ValueError):
                self.unlogged.append(f"metric {key}: not a number ({value!r})")
                continue
            name = sanitize_key(str(key))
            entries[name] = Metric(name, number, timestamp, step or 0)
        self._call(what, self._log_batch, metrics=list(entries.values()))

    def write_metrics(
        self,
        path: str | Path,
        metrics: Mapping[str, Any],
        seconds: float | None = None,
        name: str | None = None,
    ) -> dict[str, Any]:
        """Write a metrics file (atomically, JSON) with its wall time under ``seconds`` (default:
        the stage's so far), log its numbers (nested keys dotted, under ``<name>.`` when several
        files share a run) and attach the file; returns what was written."""
        if SECONDS in metrics:
            raise ValueError(f"{path}: {SECONDS!r} is the stage's wall time, not a metric")
        written = {**metrics, SECONDS: round(self.seconds if seconds is None else seconds, 1)}
        write_json(path, written)
        self.log_metrics(numbers({name: written} if name else written))
        self.log_artifact(path)
        return written

    def log_model(self, folder: str | Path, name: str = "model") -> None:
        """Log a sentence-transformers model folder with MLflow's ``sentence_transformers``
        flavour (``mlflow.sentence_transformers.load_model(run.model_uri)``), where the pinned
        MLflow supports the installed sentence-transformers and the folder is one it loads as
        itself; otherwise, with a warning, the folder as the artifact ``<name>/<folder name>``: a
        pooler sentence-transformers lacks (no ``modules.json``: it would load mean pooling) or a
        folder it cannot load is no outage of the store, and tracking goes on."""
        folder = Path(folder)
        if not self.active:
            self.unlogged.append(f"model {folder}")
            return
        model, why = None, flavour_unsupported()
        if why is None and not (folder / "modules.json").is_file():
            why = "its pooler has no sentence-transformers equivalent (no modules.json)"
        if why is None:
            import sentence_transformers

            try:
                model = sentence_transformers.SentenceTransformer(str(folder), device="cpu")
            except Exception as exc:  # a damaged folder: the artifact keeps what there is
                why = f"sentence-transformers cannot load it ({reason(exc)})"
        if model is None:
            log.warning(
                "MLflow: %s; %s is logged as the artifact %s/%s instead of an MLflow model "
                "(load it with SentenceTransformer(<downloaded folder>))",
                why,
                folder,
                name,
                folder.name,
            )
            self.log_artifact(folder, name)
            return
        self._call(f"model {folder}", self._log_sentence_transformer, model, name)

    def log_params(self, params: Mapping[str, Any]) -> None:
        """Log params known only after the run started (nested keys dotted)."""
        flat = {sanitize_key(k): param_value(v) for k, v in flatten(params).items()}
        what = f"params: {len(flat)} keys"
        if not self.active:
            self.unlogged.append(what)
            return
        from mlflow.entities import Param

        self._call(what, self._log_batch, params=[Param(k, v) for k, v in flat.items()])

    def log_artifact(self, path: str | Path, artifact_path: str | None = None) -> None:
        """Upload a file (or a folder, under its own name) to the run."""
        path = Path(path)
        what = f"artifact {path}"
        if not path.exists():
            self.unlogged.append(f"{what} (missing)")
            return
        if not self.active:
            self.unlogged.append(what)
            return
        if path.is_dir():
            folder = posixpath.join(artifact_path, path.name) if artifact_path else path.name
            self._call(what, self._client.log_artifacts, self.run_id, str(path), folder)
        else:
            self._call(what, self._client.log_artifact, self.run_id, str(path), artifact_path)

    def set_tags(self, tags: Mapping[str, str]) -> None:
        """Set run tags (keys sanitized, values cut to 8000 characters)."""
        what = f"tags: {len(tags)} keys"
        if not self.active:
            self.unlogged.append(what)
            return
        self._call(what, self._log_batch, tags=self._tags(tags))

    # -- lifecycle, driven by mlflow_run ----------------------------------------------------------

    def _start(
        self, params: Mapping[str, Any], tags: Mapping[str, str], run_name: str, seconds: float
    ) -> None:
        flat = {sanitize_key(k): param_value(v) for k, v in flatten(params).items()}
        what = f"run start; params: {len(flat)} keys; tags: {len(tags)} keys"
        self._call(what, self._create_run, flat, tags, run_name, seconds)

    def _create_run(
        self, params: dict[str, str], tags: Mapping[str, str], run_name: str, seconds: float
    ) -> None:
        self.tracking_uri = tracking_uri()
        check_store(self.tracking_uri, seconds)
        from mlflow.entities import Param
        from mlflow.tracking import MlflowClient

        self._client = MlflowClient(tracking_uri=self.tracking_uri)
        self.experiment_id = self._experiment_id(experiment_name())
        run = self._client.create_run(self.experiment_id, tags=tags, run_name=run_name)
        self.run_id = run.info.run_id
        param_list = [Param(key, value) for key, value in params.items()]
        self._log_batch(params=param_list)

    def _experiment_id(self, name: str) -> str:
        from mlflow.exceptions import MlflowException

        experiment = self._client.get_experiment_by_name(name)
        if experiment is None:
            try:
                return self._client.create_experiment(
                    name, artifact_location=local_artifact_location(self.tracking_uri or "")
                )
            except MlflowException:  # created meanwhile by a parallel stage?
                experiment = self._client.get_experiment_by_name(name)
                if experiment is None:
                    raise
        if experiment.lifecycle_stage != "active":
            raise RuntimeError(
                f"experiment {name!r} is deleted: restore it or set MLFLOW_EXPERIMENT_NAME"
            )
        return experiment.experiment_id

    def _end(self, status: str) -> None:
        if self.run_id is None:
            return
        if self.error is not None:
            self.unlogged.append(f"run end status={status} (run {self.run_id} left RUNNING)")
            return
        self._call(f"run end status={status}", self._client.set_terminated, self.run_id, status)

    # -- helpers ----------------------------------------------------------------------------------

    def _log_sentence_transformer(self, model: Any, name: str) -> None:
        import mlflow
        import sentence_transformers
        from mlflow.models import Model

        mlflow.set_tracking_uri(self.tracking_uri)
        mlflow.set_experiment(experiment_id=self.experiment_id)  # else the model goes to "Default"
        requirement = f"sentence-transformers=={sentence_transformers.__version__}"
        info = Model.log(
            artifact_path=None,
            name=name,
            flavor=mlflow.sentence_transformers,
            run_id=self.run_id,
            model=model,
            pip_requirements=[requirement],
        )
        self.model_uri = info.model_uri

    def _tags(self, tags: Mapping[str, str]) -> list[Any]:
        from mlflow.entities import RunTag

        clean = {
            sanitize_key(str(k)): truncate(str(v), MAX_TAG_VAL_LENGTH) for k, v in tags.items()
        }
        return [RunTag(key, value) for key, value in clean.items()]

    def _log_batch(
        self, metrics: Sequence[Any] = (), params: Sequence[Any] = (), tags: Sequence[Any] = ()
    ) -> None:
        """log_batch in chunks that respect MLflow's per-request limits."""
        for chunk in chunks(list(params), MAX_PARAMS_TAGS_PER_BATCH):
            self._client.log_batch(self.run_id, params=chunk, synchronous=True)
        for chunk in chunks(list(tags), MAX_PARAMS_TAGS_PER_BATCH):
            self._client.log_batch(self.run_id, tags=chunk, synchronous=True)
        for chunk in chunks(list(metrics), MAX_METRICS_PER_BATCH):
            self._client.log_batch(self.run_id, metrics=chunk, synchronous=True)

    def _call(self, what: str, func: Any, *args: Any, **kwargs: Any) -> None:
        """Run an MLflow call; on the first failure warn once and disable the logger."""
        try:
            func(*args, **kwargs)
        except Exception as exc:
            self.error = reason(exc)
            self.unlogged.append(what)
            warnings.warn(
                f"MLflow tracking disabled for stage {self.stage!r} "
                f"({self.tracking_uri or tracking_uri()}): {self.error}. "
                "The stage goes on without tracking.",
                TrackingWarning,
                stacklevel=2,
            )


@contextlib.contextmanager
def mlflow_run(
    stage: str, params: Mapping[str, Any], run_name: str | None = None
) -> Iterator[RunLogger]:
    """Open an MLflow run for a DVC stage and yield its :class:`RunLogger`.

    Params are flattened (``eval.transfer.kfold``); tags: ``git.commit``, ``git.dirty``,
    ``dvc.stage``, ``dvc.experiment`` (from ``$DVC_EXP_NAME``), ``mlflow.runName``. The body
    always runs, whether MLflow works or not. The run ends ``FINISHED``, ``FAILED`` (an error) or
    ``KILLED`` (Ctrl-C, SIGTERM).
    """
    if int(os.environ.get("RANK", "0")) != 0:  # under torchrun only rank 0 logs
        yield RunLogger(stage)
        return
    os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
    run_name = run_name or stage
    tags = {**git_tags(), "dvc.stage": stage, "mlflow.runName": run_name}
    for env_name, tag in DVC_ENV_TAGS.items():
        if os.environ.get(env_name):
            tags[tag] = os.environ[env_name]
    run = RunLogger(stage)
    status = "FAILED"
    with sigterm_raises(), fast_fail_env() as own:
        try:
            run._start(params, tags, run_name, float(own.get(HTTP_TIMEOUT_ENV, CONNECT_SECONDS)))
            yield run
            status = "FINISHED"
        except (KeyboardInterrupt, Terminated):
            status = "KILLED"
            raise
        finally:
            run._end(status)
            if run.unlogged:
                log.warning(
                    "MLflow: %d item(s) of stage %r were not logged%s: %s",
                    len(run.unlogged),
                    stage,
                    f" ({run.error})" if run.error else "",
                    "; ".join(run.unlogged),
                )
