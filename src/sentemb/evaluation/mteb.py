"""Any MTEB task (the `mteb` package, Muennighoff et al., 2023), scored like the built-in suites.

    eval:
      mteb:
        tasks: [STS12, SciFact]                 # MTEB's names (mteb.get_tasks())
        tasks: [data.own.tasks:MySTS]           # or a task class of yours: module:Class
        languages: [eng]                        # ISO 639-3, of a multilingual task; null: all
        splits: [test]                          # null: each task's eval_splits
        batch_size: null                        # encoding batch; null: model.batch_size

Every encoder, refined or not, goes to MTEB through one adapter (`SentenceModel`, MTEB's
encoder interface over the pipeline's `encode`), and MTEB does the rest: the data, the
similarity, the metric. The metrics file holds each task's main score x 100 under its name
(MTEB's mean over the task's splits and subsets) and every score MTEB reports, x 100, under
`<task>/<metric>` (averaged the same way); `scored_by` names each task's main score. MTEB's own
result files (`results/<model>/<revision>/<task>.json`) are the suite's `files`, which the
evaluate stage writes as a DVC output, so MTEB's tooling reads them as they are. An STS task
of one split and subset keeps its pairs' predicted (MTEB's cosines) and gold scores, which
`compare` bootstraps over.

A task class of yours is a subclass of one of MTEB's `AbsTask*` whose `load_data` reads files
under `data/own/` (a DVC dependency of the scoring stages): keep its module there too, so a
changed byte rescores it (docs/data.md). MTEB's own tasks read their data from the Hugging Face
Hub: every task's data is loaded before anything is encoded, and a task whose data is neither
cached nor downloadable is one error naming it and how to fetch it.
"""

from __future__ import annotations

import difflib
import importlib
import sys
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sentemb.config import ConfigError, Count
from sentemb.data.download import DataUnavailable
from sentemb.evaluation.base import (
    ENGLISH,
    PLAIN,
    RESERVED,
    SCORED_BY,
    Evaluator,
    SentenceEncoder,
)
from sentemb.evaluation.mteb_bridge import SentenceModel, model_card, sts_pairs, task_metrics
from sentemb.registry import register_suite
from sentemb.tfidf import TfidfEncoder

if TYPE_CHECKING:
    from mteb.abstasks import AbsTask

OWN_TASKS = "data/own"  # where a task class of the user's lives (a DVC dependency)
TFIDF_TYPES = ("STS", "PairClassification")  # the task types TF-IDF rows are scored on
# MTEB's task types scored by the model's similarity (the adapter's: cosine); the others' main
# score rests on something else, which the report says
COSINE_TYPES = ("STS", "Retrieval", "Reranking", "BitextMining", "Summarization")
NOT_COSINE = {
    "PairClassification": "the best of cosine, dot product, Euclidean and Manhattan distance",
    "Classification": "a classifier trained on the vectors",
    "MultilabelClassification": "a classifier trained on the vectors",
    "Clustering": "k-means on the vectors (Euclidean)",
}
FETCH = (
    "fetch them where the Hugging Face Hub is reachable (HF_HUB_OFFLINE and "
    'HF_DATASETS_OFFLINE unset): python -c "import mteb; [mteb.get_task(n).load_data() for n '
    'in {names}]", then bring that cache here (HF_HOME, default ~/.cache/huggingface; or '
    "HF_DATASETS_CACHE) or leave them out of eval.mteb.tasks"
)


@dataclass
class MTEBConfig:
    """Params section `eval.mteb`: the tasks (MTEB names or `module:Class`), the languages and
    splits kept of each, the encoding batch (None: `model.batch_size`). No task: no score."""

    tasks: list[str] = field(default_factory=list)
    languages: list[str] | None = None
    splits: list[str] | None = None
    batch_size: Count | None = None

    def validate(self) -> list[str]:
        problems = []
        for i, task in enumerate(self.tasks):
            module, colon, name = task.partition(":")
            if not task.strip() or (colon and not (module.strip() and name.strip())):
                problems.append(f"tasks[{i}]: {task!r}: a task name, or module:Class")
        for key in ("languages", "splits"):
            values = getattr(self, key)
            if values is not None and (not values or any(not v.strip() for v in values)):
                problems.append(f"{key}: {values!r}: null (all), or a list of names")
        return problems


def import_task(entry: str, repo: Path) -> type[AbsTask]:
    """The task class `entry` (`module:Class`) names, its module imported with `repo` (the
    repository's root) on the import path; one `ConfigError` naming the entry where it does not
    import, is not there, or is no MTEB task class, or lives in `repo` outside `OWN_TASKS`."""
    from mteb.abstasks import AbsTask

    module_name, _, class_name = entry.partition(":")
    where = f"eval.mteb.tasks: {entry}"
    root = str(repo.resolve())
    added = root not in sys.path
    if added:
        sys.path.insert(0, root)
    try:
        module = importlib.import_module(module_name)
    except Exception as err:  # the user's module: any error is theirs to see, named
        why = f"{type(err).__name__}: {err}"
        raise ConfigError(f"{where}: the module does not import ({why})") from None
    finally:
        if added:
            sys.path.remove(root)
    cls = getattr(module, class_name, None)
    if not (isinstance(cls, type) and issubclass(cls, AbsTask)):
        found = "not found" if cls is None else f"a {type(cls).__name__}"
        raise ConfigError(f"{where}: {class_name} is {found}, not a subclass of MTEB's AbsTask")
    source = Path(getattr(module, "__file__", "") or "").resolve()
    inside = source.is_relative_to(repo.resolve())
    if inside and not source.is_relative_to((repo / OWN_TASKS).resolve()):
        raise ConfigError(
            f"{where}: {source.relative_to(repo.resolve())} is not under {OWN_TASKS}/, which the "
            "scoring stages depend on: a change to it would not rescore; move it there"
        )
    return cls


def resolve_tasks(config: MTEBConfig, repo: Path = Path()) -> list[AbsTask]:
    """The tasks of `config`, each kept to its languages and splits: MTEB's by name, the
    user's imported (`import_task`). An unknown name is one `ConfigError` with MTEB's nearest
    names; a task left with no split or subset is one naming what it has."""
    import mteb

    known = [task.metadata.name for task in mteb.get_tasks()]
    tasks = []
    for entry in config.tasks:
        if ":" not in entry and entry not in known:
            near = difflib.get_close_matches(entry, known, n=3)
            raise ConfigError(
                f"eval.mteb.tasks: {entry!r} is no MTEB task; nearest: {near or 'none'} "
                "(mteb.get_tasks() lists them; a class of yours is module:Class)"
            )
        task = import_task(entry, repo)() if ":" in entry else mteb.get_task(entry)
        if config.splits:
            task.filter_eval_splits(config.splits)
        try:
            task = task.filter_languages(config.languages)
        except ValueError as err:  # MTEB's: not an ISO 639-3 code
            raise ConfigError(f"eval.mteb.languages: {err}") from None
        name = task.metadata.name
        if "/" in name or name.split(".")[0] in RESERVED:
            raise ConfigError(
                f"eval.mteb.tasks: {entry}: its name {name!r} holds a '/' or is a key the "
                f"reports keep ({list(RESERVED)}): rename the task"
            )
        kept = [split for split in task.eval_splits if split in task.metadata.eval_splits]
        if kept != task.eval_splits and kept:  # the splits asked that this task has
            task.filter_eval_splits(kept)
        if not kept or not task.hf_subsets:
            raise ConfigError(
                f"eval.mteb: {entry} has no split of {config.splits} or no subset in "
                f"{config.languages}; its splits: {task.metadata.eval_splits}, its languages: "
                f"{task.metadata.languages}"
            )
        tasks.append(task)
    return tasks


def is_tfidf(encoder: SentenceEncoder) -> bool:
    """Whether `encoder` (or the encoder a `CachedEncoder` wraps) gives TF-IDF rows."""
    return isinstance(getattr(encoder, "encoder", encoder), TfidfEncoder)


@register_suite("mteb", config=MTEBConfig, order=5)
class MTEBEvaluator(Evaluator):
    """MTEB's score of each task of `eval.mteb` (module docstring); none asked, none scored."""

    languages = (ENGLISH,)
    pairs = True  # an STS task's pairs (`sts_pairs`): compare's bootstrap over them
    title = "MTEB (main score x 100)"
    columns = ()

    def __init__(
        self, root: Path, batch_size: int = 128, config: MTEBConfig | None = None,
        repo: Path = Path(),
    ) -> None:  # fmt: skip
        super().__init__(root, (config and config.batch_size) or batch_size)
        self.config, self.repo = config or MTEBConfig(), repo
        self.tasks: list[AbsTask] | None = None

    @classmethod
    def asks_for_tasks(cls, config: MTEBConfig) -> bool:
        return bool(config.tasks)

    @classmethod
    def report_columns(cls, values: Mapping[str, Any]) -> list[str]:
        """Each task's main score (its name), in the params' order."""
        return [k for k in values if "/" not in k and k not in RESERVED]

    @classmethod
    def notes(cls, values: Mapping[str, Any]) -> list[str]:
        """Each task of a metrics file (`values`) whose main score is no cosine similarity,
        with what it rests on (MTEB's protocol for its type)."""
        notes = []
        for task, scored_by in values.get(SCORED_BY, {}).items():
            kind, _, score = scored_by.partition(": ")
            if kind not in COSINE_TYPES:
                why = NOT_COSINE.get(kind, f"MTEB's {kind} protocol")
                notes.append(f"{task}: {score}, not a cosine similarity ({why})")
        return notes

    def prepare(self) -> None:
        """Resolve the tasks and load every task's data, before any model is loaded (which
        may set the Hub offline) or a sentence encoded; the tasks whose data cannot be had are
        one `DataUnavailable` naming them and how to fetch them."""
        if self.tasks is not None:
            return
        tasks = resolve_tasks(self.config, self.repo) if self.config.tasks else []
        missing = {}
        for task, entry in zip(tasks, self.config.tasks, strict=True):
            try:
                task.load_data()
            except Exception as err:  # the Hub's, datasets' or the user's loader's errors
                if ":" in entry:
                    raise DataUnavailable(
                        f"eval.mteb.tasks: {entry}: its load_data failed ({type(err).__name__}:"
                        f" {err})"
                    ) from err
                missing[entry] = f"{type(err).__name__}: {err}".splitlines()[0]
        if missing:
            listed = "; ".join(f"{name} ({why})" for name, why in missing.items())
            raise DataUnavailable(
                f"eval.mteb.tasks: no data for {listed}: {FETCH.format(names=list(missing))}"
            )
        self.tasks = tasks

    def test_sentences(self) -> set[str]:
        """None counted: MTEB's tasks hold documents and labels of many kinds, not sentence
        pairs; the corpus card does not count them (docs/data.md)."""
        return set()

    def score(self, encoders: Mapping[str, SentenceEncoder]) -> dict[str, Any]:
        self.prepare()
        self.files, self.pairs = {}, {}
        if not self.tasks:
            return {}
        import mteb  # its import takes seconds: only where a task is asked

        encoder, tasks = encoders[ENGLISH], self.tasks
        if is_tfidf(encoder):
            kept = [t for t in tasks if t.metadata.type in TFIDF_TYPES]
            for task in tasks:
                if task not in kept:
                    self.skipped[task.metadata.name] = (
                        f"a {task.metadata.type} task: TF-IDF rows are scored on "
                        f"{list(TFIDF_TYPES)} tasks only"
                    )
            tasks = kept
        model = SentenceModel(encoder, self.variant, self.batch_size)
        with tempfile.TemporaryDirectory() as folder:
            cache, predicted = Path(folder) / "cache", Path(folder) / "predictions"
            results = mteb.evaluate(
                model,
                tasks,
                cache=mteb.ResultCache(cache),
                overwrite_strategy="always",
                encode_kwargs={"batch_size": self.batch_size},
                prediction_folder=predicted,
                show_progress_bar=False,
            )
            self.files = {
                path.relative_to(cache).as_posix(): path.read_bytes()
                for path in sorted(cache.rglob("*"))
                if path.is_file()
            }
            found = {task.metadata.name: sts_pairs(task, predicted) for task in tasks}
        self.pairs = {name: pairs for name, pairs in found.items() if pairs is not None}
        if self.variant == PLAIN and results.task_results:
            self.files["README.md"] = model_card(encoder, tasks, results)
        metrics: dict[str, Any] = {}
        for result in results.task_results:
            metrics |= task_metrics(result)
        # present though TF-IDF left every task out: that is no data missing
        metrics[SCORED_BY] = {
            task.metadata.name: f"{task.metadata.type}: {task.metadata.main_score}"
            for task in tasks
        }
        return metrics
