"""Seeds and significance: the paired bootstrap on cases with a known answer, and its pieces."""

from __future__ import annotations

import itertools
import json
import re
from pathlib import Path

import numpy as np
import pytest
from scipy.stats import bootstrap, spearmanr, ttest_rel

from sentemb.config import ConfigError, UserError, section
from sentemb.io import numbers
from sentemb.registry import SUITES
from sentemb.report.stats import CompareConfig, density_bins, mean_std
from sentemb.report.summary import aggregate, headline, summarize
from sentemb.results.readers import MissingResults, folder_reader
from sentemb.results.runs import RECORDS, Experiment, load
from sentemb.review.paired import (
    PairTask,
    below_noise,
    bootstrap_scores,
    centred_ranks,
    compare,
    interval,
    one_sided,
    pair_tasks,
    paired_comparison,
    resample_indices,
    seed_test,
    shared_seeds,
    spearman_rows,
    verdict,
)
from sentemb.review.render import result_cells

from support.experiments import fake_experiment, write_experiment


def one_task(predicted: dict[str, list[np.ndarray]], gold: np.ndarray) -> dict[str, PairTask]:
    return {"t": PairTask(gold, np.zeros(len(gold), dtype=int), predicted)}


def test_spearman_rows_is_scipy_spearman_with_ties() -> None:
    predicted = np.array([[1.0, 2.0, 2.0, 5.0, 0.5], [3.0, 1.0, 4.0, 1.0, 5.0]])
    gold = np.array([[0.0, 1.0, 1.0, 4.0, 2.0], [2.0, 2.0, 3.0, 0.0, 5.0]])
    expected = [100 * spearmanr(p, g).statistic for p, g in zip(predicted, gold, strict=True)]
    assert spearman_rows(predicted, centred_ranks(gold)) == pytest.approx(expected)


def test_monotone_transform_gives_exactly_zero_and_no_significant_difference() -> None:
    rng = np.random.default_rng(0)
    gold = rng.uniform(0, 5, 50)
    seeds = [gold + rng.normal(0, 1, 50) for _ in range(3)]
    transformed = [np.exp(p) for p in seeds]  # same ranks, so the same Spearman on any resample
    replicates = bootstrap_scores(one_task({"a": seeds, "b": transformed}, gold), 200, 0)
    assert np.all(replicates["a"]["t"] - replicates["b"]["t"] == pytest.approx(0.0, abs=1e-9))
    per_seed = {m: {"t": [80.0, 81.0, 79.0], "avg": [80.0, 81.0, 79.0]} for m in ("a", "b")}
    result = paired_comparison(replicates, per_seed, "b", "a", 0.95, 0.01)
    assert result["t"]["difference"] == 0.0
    assert result["t"]["low"] == pytest.approx(0.0) and result["t"]["high"] == pytest.approx(0.0)
    assert not result["t"]["significant"] and result["t"]["p_seeds"] is None
    assert result["t"]["below_noise"]


@pytest.mark.parametrize(
    ("shift", "noise", "below"),
    [
        (0.004, 0.01, True),
        (-0.009, 0.01, True),
        (0.01, 0.01, False),
        (-0.5, 0.01, False),
        (0.004, 0.0, False),
    ],
)
def test_difference_below_noise_is_noise_even_when_significant(
    shift: float, noise: float, below: bool
) -> None:
    """A method better by `shift` points on every seed and every resample: significant by the
    bootstrap, and noise when |shift| < `noise` (a run on another CPU moves scores that much)."""
    replicates = {"a": {"t": np.full(50, 80.0)}, "b": {"t": np.full(50, 80.0 + shift)}}
    per_seed = {"a": {"t": [80.0, 81.0]}, "b": {"t": [80.0 + shift, 81.0 + shift]}}
    result = paired_comparison(replicates, per_seed, "b", "a", 0.95, noise)["t"]
    assert result["significant"] and result["difference"] == pytest.approx(shift)
    assert result["below_noise"] is below


def test_perfect_against_reversed_differs_by_200_on_every_resample() -> None:
    gold = np.arange(20.0)
    replicates = bootstrap_scores(one_task({"a": [gold], "b": [-gold]}, gold), 100, 1)
    difference = replicates["a"]["t"] - replicates["b"]["t"]
    assert np.allclose(difference, 200.0)
    assert interval(difference, 0.95) == pytest.approx((200.0, 200.0))


def test_interval_agrees_with_scipy_paired_bootstrap() -> None:
    rng = np.random.default_rng(3)
    gold = rng.uniform(0, 5, 300)
    a, b = gold + rng.normal(0, 1, 300), gold + rng.normal(0, 2, 300)
    replicates = bootstrap_scores(one_task({"a": [a], "b": [b]}, gold), 4000, 0)
    ours = interval(replicates["a"]["t"] - replicates["b"]["t"], 0.95)

    def difference(g: np.ndarray, x: np.ndarray, y: np.ndarray) -> float:
        return 100 * (spearmanr(x, g).statistic - spearmanr(y, g).statistic)

    scipy_ci = bootstrap(
        (gold, a, b),
        difference,
        paired=True,
        vectorized=False,
        n_resamples=4000,
        method="percentile",
        random_state=0,
    ).confidence_interval
    assert ours == pytest.approx((scipy_ci.low, scipy_ci.high), abs=0.6)
    observed = difference(gold, a, b)
    assert ours[0] < observed < ours[1] and ours[0] > 0  # a is clearly better


def test_strata_are_resampled_within_themselves() -> None:
    strata = np.array([0, 0, 0, 1, 1, 2])
    index = resample_indices(strata, 50, np.random.default_rng(0))
    assert index.shape == (50, 6)
    assert np.all(strata[index] == strata)


def test_avg_is_the_mean_of_the_tasks_within_each_replicate() -> None:
    rng = np.random.default_rng(4)
    gold = rng.uniform(0, 5, 40)
    tasks = {
        name: PairTask(gold, np.zeros(40, dtype=int), {"a": [gold + rng.normal(0, s, 40)]})
        for name, s in (("x", 0.5), ("y", 2.0))
    }
    scores = bootstrap_scores(tasks, 30, 0)["a"]
    assert np.allclose(scores["avg"], (scores["x"] + scores["y"]) / 2)


def test_pair_tasks_pool_subsets_of_a_year() -> None:
    arrays = {
        "STS12/x/predicted": np.array([1.0, 2.0]),
        "STS12/x/gold": np.array([1.0, 3.0]),
        "STS12/y/predicted": np.array([5.0]),
        "STS12/y/gold": np.array([4.0]),
        "STSBenchmark/predicted": np.array([0.1, 0.2]),
        "STSBenchmark/gold": np.array([2.0, 1.0]),
    }
    tasks = pair_tasks({"a": [arrays, arrays]})
    assert list(tasks) == ["STS12", "STSBenchmark"]
    assert tasks["STS12"].strata.tolist() == [0, 0, 1]
    assert tasks["STS12"].gold.tolist() == [1.0, 3.0, 4.0]
    assert [p.tolist() for p in tasks["STS12"].predicted["a"]] == [[1.0, 2.0, 5.0]] * 2


def test_seed_statistics() -> None:
    assert mean_std([1.0, 2.0, 3.0]) == {"mean": 2.0, "std": 1.0, "n": 3}
    assert mean_std([4.0]) == {"mean": 4.0, "std": 0.0, "n": 1}
    a, b = [80.0, 81.5, 79.0], [79.0, 80.0, 78.9]
    assert seed_test(a, b) == pytest.approx(ttest_rel(a, b).pvalue)
    assert seed_test([1.0], [0.0]) is None


def test_density_bins_by_gold_score() -> None:
    gold = np.array([0.0, 0.9, 1.0, 4.5, 5.0])
    bins = density_bins([np.array([0.1, 0.2, 0.3, 0.4, 0.5])], gold, [0, 1, 5])
    assert list(bins) == ["0-1", "1-5"]
    assert bins["0-1"].tolist() == [0.1, 0.2] and bins["1-5"].tolist() == [0.3, 0.4, 0.5]


def test_compare_config_errors_name_the_param() -> None:
    with pytest.raises(ConfigError, match=r"compare\.confidence"):
        section({"compare": {"confidence": 95}}, "compare", CompareConfig)
    for noise, message in ((-0.01, "must be >= 0"), (float("inf"), "expected a finite number")):
        with pytest.raises(ConfigError, match=rf"compare\.noise: {message}"):
            section({"compare": {"noise": noise}}, "compare", CompareConfig)
    with pytest.raises(ConfigError, match=r"compare\.noise: expected float"):
        section({"compare": {"noise": "small"}}, "compare", CompareConfig)


def test_summary_aggregates_the_seeds_and_plots_in_memory(tmp_path: Path) -> None:
    experiment = fake_experiment("sscl", [1, 2], 2)
    summary = summarize(experiment, tmp_path)
    trained = summary.headline["trained"]
    assert set(trained) == {"sts", "sts/repal", "transfer", "chinese", "retrieval", "own"}
    assert set(trained["own"]) == {"mine", "faq"}  # a column per own set
    assert set(trained["sts"]["avg"]) == {"mean", "std"}  # plain rows: mean and std per column
    assert set(trained["sts/repal"]["avg"]) == {"mean", "std"}  # a refinement: its avg's both
    assert summary.headline["untrained"]["sts"] == {"avg": 40.0}
    assert "| sscl + RepAL |" in summary.text and "## Per seed" in summary.text
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "alignment_uniformity.json",
        "alignment_uniformity.png",
        "cosine_density.png",
        "layers.png",
        "scores.json",
        "training.png",
    ]
    records = json.loads((tmp_path / "scores.json").read_text())
    assert {"seed": 2, "file": "analysis", "key": "token_wise[2]", "score": 0.3} in records
    assert all(r["key"] != "seconds" for r in records)


@pytest.mark.parametrize(
    ("autocasts", "said"), [(["fp32", "fp32"], "fp32"), (["fp32", "bf16"], "bf16/fp32")]
)
def test_the_report_names_the_autocast_of_every_seed(
    tmp_path: Path, autocasts: list[str], said: str
) -> None:
    """Seeds run on other CPUs may resolve `auto` differently: the report reads every seed's
    train.json, not the first one's."""
    experiment = fake_experiment("simcse", [1, 2], 1)
    for files, autocast in zip(experiment.files, autocasts, strict=True):
        files["train"]["autocast"] = autocast
    text = summarize(experiment, tmp_path).text
    assert f"training {experiment.params['train']['precision']} ({said})" in text
    assert ("bf16 autocast in training" in text) == ("bf16" in said)


def test_headline_of_a_full_run_keeps_a_diff_short() -> None:
    """On a method switch every trained number changes: with every task scored offline, the
    headline holds 84 of them (`dvc metrics diff` rows)."""
    columns = {
        s: [c for c in d.cls.columns if not c.startswith(("QQP/", "AskUbuntu/"))]
        for s, d in SUITES.items()
    }
    files = [
        {
            **{s: {c: 50.0 + i for c in columns[s]} for s in SUITES},
            **{
                s: {c: 50.0 + i for c in columns[s]}
                | {
                    "repal": {c: 1.0 + i for c in columns[s]},
                    "whitening": {c: 2.0 for c in columns[s]},
                }
                for s in ("sts", "chinese")
            },
        }
        for i in range(3)
    ]
    experiment = Experiment("x", {}, "x", [1, 2, 3], files, {}, {}, {}, {})
    assert len(numbers(headline(experiment)["trained"], lists=True)) == 84


def test_aggregate_keeps_a_refinement_only_where_every_seed_has_it() -> None:
    with_repal = {s: {"avg": 1.0} for s in SUITES} | {"sts": {"avg": 1.0, "repal": {"avg": 2.0}}}
    without = {s: {"avg": 3.0} for s in SUITES}
    assert "sts/repal" in aggregate([with_repal, with_repal])
    aggregated = aggregate([with_repal, without])
    assert "sts/repal" not in aggregated
    assert aggregated["sts"]["avg"] == {"mean": 2.0, "std": np.std([1.0, 3.0], ddof=1), "n": 2}


def test_load_names_the_first_missing_file(tmp_path: Path) -> None:
    write_experiment(tmp_path, fake_experiment("simcse", [1], 1))
    (tmp_path / "predictions" / "1" / "sts.npz").unlink()
    with pytest.raises(MissingResults, match=r"predictions/1/sts\.npz: not found; `dvc repro`"):
        load(folder_reader(tmp_path))
    lock = {"stages": {"evaluate@1": {"outs": [{"path": "predictions/1"}]}}}
    (tmp_path / "dvc.lock").write_text(json.dumps(lock))  # what `dvc checkout` restores
    with pytest.raises(MissingResults, match=r"sts\.npz: not found; dvc.lock records it: `dvc che"):
        load(folder_reader(tmp_path))
    (tmp_path / "metrics" / "runs" / "1" / "sts.json").write_text('{"avg": 7')  # cut short
    with pytest.raises(UserError, match=r"runs/1/sts\.json: not valid JSON \(Expecting"):
        load(folder_reader(tmp_path))


def damage_scores(path: Path, value: object, refined: bool = False) -> None:
    """Replace the `avg` of metrics file `path` (its RepAL row's with `refined`) by `value`."""
    metrics = json.loads(path.read_text())
    (metrics["repal"] if refined else metrics)["avg"] = value
    path.write_text(json.dumps(metrics))


@pytest.mark.parametrize("refined", [False, True])
@pytest.mark.parametrize(
    "value", [float("nan"), float("inf"), -500.0, 100.5, "x", None, True, [1.0], {"a": 1.0}]
)
@pytest.mark.parametrize("file", ["runs/2/sts.json", "reference/sts.json"])
def test_a_score_that_is_no_score_x_100_is_named_with_its_file(
    tmp_path: Path, file: str, value: object, refined: bool
) -> None:
    experiment = fake_experiment("simcse", [1, 2], 1)
    experiment.singles["untrained"]["sts"]["repal"] = {"avg": 41.0}
    write_experiment(tmp_path, experiment)
    damage_scores(tmp_path / "metrics" / file, value, refined)
    where = f"metrics/{file}: {'repal: ' if refined else ''}avg: "
    with pytest.raises(UserError, match=re.escape(where) + r".* is not a score x 100"):
        load(folder_reader(tmp_path))


@pytest.mark.parametrize("content", ["[1, 2]", '"text"', "7", '{"avg": 1.0, "repal": [1]}'])
def test_a_metrics_file_that_is_no_object_of_scores_is_named(tmp_path: Path, content: str) -> None:
    write_experiment(tmp_path, fake_experiment("simcse", [1, 2], 1))
    (tmp_path / "metrics" / "runs" / "2" / "chinese.json").write_text(content)
    with pytest.raises(UserError, match=r"metrics/runs/2/chinese\.json: .*expected a JSON object"):
        load(folder_reader(tmp_path))


@pytest.mark.parametrize("refined", [False, True])
def test_a_seed_scoring_other_columns_is_named_with_its_file(tmp_path: Path, refined: bool) -> None:
    write_experiment(tmp_path, fake_experiment("simcse", [1, 2], 1))
    path = tmp_path / "metrics" / "runs" / "2" / "sts.json"
    metrics = json.loads(path.read_text())
    (metrics["repal"] if refined else metrics).pop("avg")
    path.write_text(json.dumps(metrics))
    with pytest.raises(
        UserError,
        match=r"runs/2/sts\.json: .*seed 2 scores other columns than "
        r"seed 1 \(missing: avg; extra: -\)",
    ):
        load(folder_reader(tmp_path))


@pytest.mark.parametrize(
    ("record", "field"), [(r, f) for r, fields in RECORDS.items() for f in [*fields, None]]
)
@pytest.mark.parametrize("value", [None, "x", float("nan"), True, []])
def test_a_damaged_run_record_is_named_with_its_field(
    tmp_path: Path, record: str, field: str | None, value: object
) -> None:
    """train.json, refine.json and analysis.json: the fields the reports read, of their type
    (`field` None: the whole file replaced by `value`)."""
    write_experiment(tmp_path, fake_experiment("simcse", [1, 2], 1))
    path = tmp_path / "metrics" / "runs" / "2" / f"{record}.json"
    data = json.loads(path.read_text())
    if field is None:
        data = value
    else:
        data[field] = value
    path.write_text(json.dumps(data))
    if field is not None and isinstance(value, str) and RECORDS[record][field] is str:
        load(folder_reader(tmp_path))  # a string where a string is read
        return
    with pytest.raises(UserError, match=rf"runs/2/{record}\.json: (expected|{field}: )"):
        load(folder_reader(tmp_path))


GOLD = "STSBenchmark/gold"
DAMAGED_BYTES = {
    "empty": lambda data: b"",
    "text": lambda data: b"hello",
    "truncated": lambda data: data[:200],
}
DAMAGED_ARRAYS = {
    "no predicted": lambda arrays: {k: v for k, v in arrays.items() if k != "STS12/a/predicted"},
    "shorter": lambda arrays: arrays | {GOLD: arrays[GOLD][:-1]},
    "nan": lambda arrays: arrays | {GOLD: np.full(40, np.nan)},
    "two-dimensional": lambda arrays: arrays | {GOLD: np.zeros((40, 1))},
    "strings": lambda arrays: arrays | {GOLD: np.array(["a"] * 40)},
    "other key": lambda arrays: arrays | {"x": np.ones(2)},
}


@pytest.mark.parametrize("damage", [*DAMAGED_BYTES, *DAMAGED_ARRAYS, "pickled"])
def test_a_damaged_predictions_archive_is_named(tmp_path: Path, damage: str) -> None:
    write_experiment(tmp_path, fake_experiment("simcse", [1, 2], 1))
    path = tmp_path / "predictions" / "2" / "sts.npz"
    if damage in DAMAGED_BYTES:
        path.write_bytes(DAMAGED_BYTES[damage](path.read_bytes()))
    elif damage == "pickled":
        np.save(path, np.array([{}], dtype=object))
        path.with_suffix(".npz.npy").rename(path)
    else:
        with np.load(path) as archive:
            arrays = dict(archive)
        np.savez(path, **DAMAGED_ARRAYS[damage](arrays))
    with pytest.raises(UserError, match=r"^predictions/2/sts\.npz: "):
        load(folder_reader(tmp_path))


def test_a_task_missing_from_one_seed_is_named_with_its_file(tmp_path: Path) -> None:
    experiment = fake_experiment("sscl", [1, 2], 2)
    experiment.files[1]["sts"].pop("STS12")
    with pytest.raises(ConfigError, match=r"runs/2/sts\.json: seed 2 .*missing: STS12;"):
        summarize(experiment, tmp_path)
    experiment = fake_experiment("sscl", [1, 2], 2)
    predictions = experiment.predictions["sts"]
    predictions[1] = {k: v for k, v in predictions[1].items() if not k.startswith("STS12/")}
    with pytest.raises(ConfigError, match=r"predictions/2/sts\.npz: seed 2 .*missing: STS12;"):
        summarize(experiment, tmp_path)
    assert not any(tmp_path.iterdir())  # refused before any plot


def test_experiments_are_tested_on_their_shared_seeds_and_pairs() -> None:
    """Against a baseline: the noisier experiment is clearly worse by the bootstrap; seeds pair
    by value (here 2 and 3); a refinement is tested over seeds alone; other pairs refuse."""
    config = CompareConfig(resamples=200)
    baseline = fake_experiment("simcse", [1, 2, 3], 1)
    noisier = fake_experiment("sscl", [2, 3, 4], 3)
    results = compare({"a": baseline, "b": noisier}, "a", config)["b"]
    sts = results["sts"]
    assert set(sts) == {"STS12", "STSBenchmark", "avg"}
    assert sts["avg"]["high"] < 0 and sts["avg"]["significant"]
    assert results["sts/repal"]["avg"]["low"] is None and results["sts/repal"]["avg"]["p_seeds"]
    shared = shared_seeds({"a": baseline, "b": noisier})
    assert shared["a"].seeds == shared["b"].seeds == [2, 3]
    with pytest.raises(ConfigError, match=r"seeds: the experiments share no seed"):
        shared_seeds({"a": baseline, "b": fake_experiment("sscl", [7], 2)})
    other = fake_experiment("sscl", [2, 3], 2, sizes=10)
    with pytest.raises(ConfigError, match=r"b: its sts test pairs differ from a's"):
        compare({"a": baseline, "b": other}, "a", config)


@pytest.mark.parametrize("order", list(itertools.permutations([1, 2, 3]))[1:])
def test_seeds_pair_by_value_whatever_order_each_side_lists(order: tuple[int, ...]) -> None:
    """A side whose params list its seeds in another order gives the same tests, and the same
    run against itself reordered differs by nothing (once paired by position: p < 1, CI ≠ 0)."""
    config = CompareConfig(resamples=50)
    baseline = fake_experiment("simcse", [1, 2, 3], 1)
    expected = compare({"a": baseline, "b": fake_experiment("sscl", [1, 2, 3], 3)}, "a", config)
    reordered = fake_experiment("sscl", list(order), 3)
    assert compare({"a": baseline, "b": reordered}, "a", config) == expected
    assert compare({"b": reordered, "a": baseline}, "a", config) == expected
    itself = compare({"a": baseline, "b": fake_experiment("simcse", list(order), 1)}, "a", config)
    for columns in itself["b"].values():
        for result in columns.values():
            assert result["difference"] == 0 and result["p_seeds"] is None
            assert result["low"] in (None, 0) and result["high"] in (None, 0)


@pytest.mark.parametrize(
    ("difference", "low", "high", "expected"),
    [
        (1.0, 0.4, 1.6, "significant"),
        (-0.004, -0.006, -0.002, "noise"),  # significant, but below the noise
        (0.2, -0.1, 0.5, "no significant difference"),
        (0.01, 0.005, 0.02, "significant"),  # at the noise level: not below it
    ],
)
def test_the_one_noise_rule_comes_before_any_test(
    difference: float, low: float, high: float, expected: str
) -> None:
    result = {
        "difference": difference,
        "significant": low > 0 or high < 0,
        "below_noise": below_noise(difference, 0.01),
    }
    assert verdict(result) == expected


def test_where_no_test_can_run_the_verdict_says_so() -> None:
    """One shared seed and no predictions: no bootstrap, no t-test. A difference above the
    noise is `untested`, resting on no test, never `no significant difference`."""
    baseline = fake_experiment("simcse", [1, 2], 1)
    worse = fake_experiment("sscl", [2, 5], 9)
    for side in (baseline, worse):
        side.predictions_missing = "not in this clone"
    results = compare({"a": baseline, "b": worse}, "a", CompareConfig(resamples=50))["b"]
    sts = results["sts"]["avg"]
    assert abs(sts["difference"]) > 0.07 and sts["p_seeds"] is None and sts["low"] is None
    assert (sts["test"], verdict(sts)) == ("none", "untested")
    assert result_cells(sts)[3:] == ["untested", "no test"]


def test_what_one_side_lacks_is_listed() -> None:
    """An own set scored on one side only, a refinement only one side has, another corpus:
    listed, as a comparison cannot test them."""
    old, new = fake_experiment("simcse", [1, 2], 1), fake_experiment("sscl", [1, 2], 2)
    assert one_sided(old, new) == []
    for files in new.files:
        files["own"]["extra"] = 50.0
        files["sts"]["whitening"] = {"avg": 40.0}
        files["train"]["sentences"] = 80
    new.params = {**new.params, "train": {**new.params["train"], "corpus": "mine.txt"}}
    listed = one_sided(old, new)
    assert "`own` extra: scored by `sscl` only" in listed
    assert "`sts/whitening`: scored by `sscl` only" in listed
    assert any(line.startswith("trained on another corpus: ") and "80" in line for line in listed)


def test_a_suite_without_an_average_shows_a_row_per_column_without_tasks() -> None:
    """compare's table: suite averages by default, and every own set and MTEB task (suites
    with no average), which would otherwise not show at all; `--tasks` adds the tasks."""
    from sentemb.review.render import comparison

    old, new = fake_experiment("simcse", [1, 2], 1), fake_experiment("sscl", [1, 2], 3)
    for experiment, score in ((old, 80.0), (new, 81.0)):
        for i, files in enumerate(experiment.files):
            files["mteb"] = {"STS12": score + i, "scored_by": {"STS12": "STS: cosine_spearman"}}
    config = CompareConfig(resamples=50)
    results = compare({"a": old, "b": new}, "a", config)["b"]
    rows = {}
    for tasks in (False, True):
        table = comparison(old, new, results, config, tasks).splitlines()
        rows[tasks] = [line.split(" | ")[0] for line in table if line.startswith("| ")][1:]
    assert {"| own mine", "| own faq", "| mteb STS12", "| sts"} <= set(rows[False])
    assert "| sts STS12" not in rows[False] and "| sts STS12" in rows[True]
