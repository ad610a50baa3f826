"""Suite `mteb` (`eval.mteb`): MTEB's tasks scored through one adapter, equal to the built-in
suites where both score the same data, and one clear error for every bad entry or missing data."""

from __future__ import annotations

import json
import shutil
import uuid
from pathlib import Path

import numpy as np
import pytest

from sentemb.config import ConfigError, section
from sentemb.data.download import DataUnavailable
from sentemb.evaluate import evaluate_model
from sentemb.evaluation.base import SCORED_BY, CachedEncoder, spearman
from sentemb.evaluation.mteb import MTEBConfig, MTEBEvaluator, is_tfidf, resolve_tasks
from sentemb.evaluation.mteb_bridge import sts_pairs
from sentemb.evaluation.own import OwnConfig, OwnEvaluator
from sentemb.tfidf import TfidfEncoder

from support import REPO
from support.encoders import HashEncoder

EXAMPLE = "data.own.mteb_tasks:STSBenchmarkTest"  # the repository's own task class


class NeverEncoder:
    """An encoder that fails if asked for a vector."""

    def encode(self, sentences, batch_size: int = 128) -> np.ndarray:
        raise AssertionError(f"encoded {len(sentences)} sentences")


def config(**values) -> MTEBConfig:
    return section({"mteb": values}, "mteb", MTEBConfig)


def task_module(repo: Path, source: str) -> str:
    """A module under `repo`/data/own/ holding `source`; its import name."""
    name = f"tasks_{uuid.uuid4().hex[:8]}"
    path = repo / "data" / "own" / f"{name}.py"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(source)
    return f"data.own.{name}"


@pytest.fixture
def repo(tmp_path: Path, mirror: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A repository folder (the working directory) whose data/raw is the mirror and whose
    data/own holds the repository's task module."""
    (tmp_path / "data" / "own").mkdir(parents=True)
    (tmp_path / "data" / "raw").symlink_to(mirror)
    shutil.copy(REPO / "data/own/mteb_tasks.py", tmp_path / "data/own/mteb_tasks.py")
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.mark.slow
def test_the_repositorys_stsb_task_scores_what_the_builtin_task_scores(repo: Path) -> None:
    """On the embedded model, through the evaluate stage's code: MTEB's Spearman of STS-B test
    equals the built-in STSBenchmark column (both x 100)."""
    params = {
        "eval": {"sts": {"tasks": ["STSBenchmark"]}, "mteb": {"tasks": [EXAMPLE]}},
    }
    results = evaluate_model(["sts", "mteb"], params, repo / "data/raw")
    mteb, sts = results["mteb"].metrics, results["sts"].metrics
    assert mteb["STSBenchmarkTest"] == pytest.approx(sts["STSBenchmark"], abs=0.01)
    assert mteb[SCORED_BY] == {"STSBenchmarkTest": "STS: cosine_spearman"}
    assert "results/sentemb__encoder/plain/STSBenchmarkTest.json" in results["mteb"].files
    predicted, gold = results["mteb"].pairs["STSBenchmarkTest"]  # compare's bootstrap reads them
    assert np.array_equal(gold, results["sts"].pairs["STSBenchmark"][1])
    assert spearman(predicted, gold) == pytest.approx(mteb["STSBenchmarkTest"], abs=1e-6)


BEIR_TASK = '''
from pathlib import Path
from mteb.abstasks.retrieval import AbsTaskRetrieval
from sentemb.evaluation.mteb_bridge import beir_split, local_metadata


class Papers(AbsTaskRetrieval):
    metadata = local_metadata("Papers", "Retrieval", "ndcg_at_10")

    def load_data(self, num_proc=None, **kwargs):
        self.dataset = {"default": {"test": beir_split(Path("data/own/papers"))}}
        self.data_loaded = True
'''


def write_beir(folder: Path, size: int = 60) -> None:
    rng = np.random.default_rng(3)
    (folder / "qrels").mkdir(parents=True)
    docs = {f"d{i}": f"document {i}" for i in range(size)}
    queries = {f"q{i}": f"query {i}" for i in range(15)}
    relevant = {
        q: sorted({f"d{j}" for j in rng.choice(size, rng.integers(1, 4), replace=False)})
        for q in list(queries)[:12]
    }
    (folder / "corpus.jsonl").write_text(
        "".join(json.dumps({"_id": k, "title": "t", "text": t}) + "\n" for k, t in docs.items())
    )
    (folder / "queries.jsonl").write_text(
        "".join(json.dumps({"_id": k, "text": v}) + "\n" for k, v in queries.items())
    )
    qrels = "".join(f"{q}\t{d}\t1\n" for q, ds in relevant.items() for d in ds)
    (folder / "qrels/test.tsv").write_text("query-id\tcorpus-id\tscore\n" + qrels)


def test_a_beir_task_class_scores_what_the_same_folder_scores_as_an_own_set(
    repo: Path,
) -> None:
    write_beir(repo / "data/own/papers")
    module = task_module(repo, BEIR_TASK)
    encoder = HashEncoder()
    evaluator = MTEBEvaluator(repo, 16, config(tasks=[f"{module}:Papers"]), repo=repo)
    mteb = evaluator(encoder)
    own_config = section(
        {"own": [{"name": "papers", "kind": "retrieval", "path": "data/own/papers"}]},
        "own",
        OwnConfig,
    )
    own = OwnEvaluator(repo, 16, own_config, repo=repo)(encoder)
    assert mteb["Papers"] == pytest.approx(own["papers"], abs=0.01)
    assert mteb["Papers/ndcg_at_10"] == mteb["Papers"]
    assert evaluator.pairs == {}  # no STS task: no pairs, compare rests on the seeds


def test_an_unknown_task_name_is_refused_with_the_nearest_names() -> None:
    with pytest.raises(ConfigError, match=r"'STSBenchmarkk' is no MTEB task; nearest: \['STSB"):
        resolve_tasks(config(tasks=["STSBenchmarkk"]))


@pytest.mark.parametrize(
    ("source", "entry", "message"),
    [
        (None, "no_such_module_here:Task", r"the module does not import \(ModuleNotFoundError"),
        ("raise RuntimeError('no')\n", "{module}:Task", r"the module does not import \(Runtime"),
        ("x = 1\n", "{module}:Task", r"Task is not found, not a subclass of MTEB's AbsTask"),
        ("Task = 3\n", "{module}:Task", r"Task is a int, not a subclass of MTEB's AbsTask"),
        ("class Task:\n    pass\n", "{module}:Task", "Task is a type, not a subclass"),
    ],
    ids=["no-module", "raises", "no-class", "not-a-class", "not-a-task"],
)
def test_a_task_class_that_cannot_be_had_is_refused_naming_it(
    repo: Path, source: str | None, entry: str, message: str
) -> None:
    module = task_module(repo, source) if source is not None else ""
    entry = entry.format(module=module)
    with pytest.raises(ConfigError, match=rf"^eval\.mteb\.tasks: {entry}: {message}"):
        resolve_tasks(config(tasks=[entry]), repo)


def test_a_task_module_in_the_repository_outside_data_own_is_refused(repo: Path) -> None:
    (repo / "mytasks_outside.py").write_text(BEIR_TASK)
    with pytest.raises(ConfigError, match=r"mytasks_outside\.py is not under data/own/"):
        resolve_tasks(config(tasks=["mytasks_outside:Papers"]), repo)


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"tasks": [""]}, r"tasks\[0\]: '': a task name, or module:Class"),
        ({"tasks": ["a:"]}, r"tasks\[0\]: 'a:': a task name"),
        ({"tasks": [":B"]}, r"tasks\[0\]: ':B': a task name"),
        ({"languages": []}, r"languages: \[\]: null \(all\), or a list"),
        ({"splits": [" "]}, r"splits: \[' '\]: null \(all\), or a list"),
        ({"batch_size": 0}, r"batch_size"),
    ],
)
def test_bad_params_are_refused_naming_them(values: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=rf"^mteb\.{message}"):
        config(**values)


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"splits": ["dev"]}, r"eval\.mteb: STS12 has no split of \['dev'\].*splits: \['test'\]"),
        ({"languages": ["deu"]}, r"eval\.mteb\.languages: No subsets were found for STS12"),
        ({"languages": ["english"]}, r"eval\.mteb\.languages: Invalid language code: english"),
    ],
)
def test_a_split_or_language_a_task_lacks_is_refused_naming_what_it_has(
    values: dict, message: str
) -> None:
    with pytest.raises(ConfigError, match=rf"^{message}"):
        resolve_tasks(config(tasks=["STS12"], **values))


def test_only_the_splits_asked_that_a_task_has_are_kept() -> None:
    (task,) = resolve_tasks(config(tasks=["STS12"], splits=["test", "dev"]))
    assert task.eval_splits == ["test"]


def test_a_task_whose_data_is_not_here_stops_before_encoding_naming_how_to_fetch_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import datasets
    import huggingface_hub

    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "hf" / "datasets")
    evaluator = MTEBEvaluator(tmp_path, 8, config(tasks=["STS12", "SICK-R"]))
    with pytest.raises(DataUnavailable) as err:
        evaluator(NeverEncoder())
    message = str(err.value)
    assert message.startswith("eval.mteb.tasks: no data for STS12 (")
    assert "SICK-R (" in message and "HF_DATASETS_OFFLINE" in message and "HF_HOME" in message


def test_tfidf_rows_are_scored_on_sts_tasks_and_listed_as_skipped_elsewhere(repo: Path) -> None:
    write_beir(repo / "data/own/papers")
    module = task_module(repo, BEIR_TASK)
    corpus = ["a girl is styling her hair", "a man plays a guitar", "document query"] * 3
    tfidf = CachedEncoder(TfidfEncoder(corpus=corpus))
    tasks = [EXAMPLE, f"{module}:Papers"]
    evaluator = MTEBEvaluator(repo / "data/raw", 64, config(tasks=tasks), repo=repo)
    metrics = evaluator(tfidf)
    assert "STSBenchmarkTest" in metrics and "Papers" not in metrics
    assert evaluator.skipped == {
        "Papers": "a Retrieval task: TF-IDF rows are scored on ['STS', 'PairClassification'] "
        "tasks only"
    }


def test_tfidf_rows_are_told_by_class_wrapped_or_not() -> None:
    tfidf = TfidfEncoder(corpus=["a girl is styling her hair", "a man plays a guitar"])
    assert is_tfidf(tfidf) and is_tfidf(CachedEncoder(tfidf))
    assert not is_tfidf(HashEncoder()) and not is_tfidf(CachedEncoder(HashEncoder()))


def test_an_sts_task_without_its_predictions_file_has_no_pairs(repo: Path) -> None:
    (task,) = resolve_tasks(config(tasks=[EXAMPLE]), repo)
    assert sts_pairs(task, repo / "no-predictions") is None


def test_no_task_asked_scores_none_and_loads_nothing() -> None:
    evaluator = MTEBEvaluator(Path("data"), 8, MTEBConfig())
    assert evaluator(NeverEncoder()) == {} and evaluator.files == {}
    assert not MTEBEvaluator.asks_for_tasks(MTEBConfig())
