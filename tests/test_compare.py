"""Seeds and significance: the paired bootstrap on cases with a known answer, and its pieces."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from scipy.stats import bootstrap, spearmanr, ttest_rel

from sentemb.config import ConfigError, UserError, load_params, run_plan, section
from sentemb.evaluation.suites import SUITES
from sentemb.report.compare import RECORDS, REFERENCE, Folders, Runs, aggregate, compare, load
from sentemb.report.stats import (
    CompareConfig,
    PairTask,
    bootstrap_scores,
    centred_ranks,
    density_bins,
    interval,
    mean_std,
    pair_tasks,
    paired_comparison,
    resample_indices,
    seed_test,
    spearman_rows,
)

REPO = Path(__file__).resolve().parents[1]


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


def test_run_plan_and_config_errors_name_the_param() -> None:
    assert run_plan({"methods": ["simcse", "sscl"], "seeds": [1, 2]}) == (
        ["simcse", "sscl"],
        [1, 2],
    )
    with pytest.raises(ConfigError, match="methods: expected a non-empty list"):
        run_plan({"methods": "dclr", "seeds": [1]})
    with pytest.raises(ConfigError, match=r"seeds: \[1, 1\] lists a value twice"):
        run_plan({"methods": ["dclr"], "seeds": [1, 1]})
    with pytest.raises(ConfigError, match=r"seeds: expected integers in \[0, 2\*\*32\)"):
        run_plan({"methods": ["dclr"], "seeds": [-1]})
    with pytest.raises(ConfigError, match=r"compare\.confidence"):
        section({"compare": {"confidence": 95}}, "compare", CompareConfig)
    for noise, message in ((-0.01, "must be >= 0"), (float("inf"), "expected a finite number")):
        with pytest.raises(ConfigError, match=rf"compare\.noise: {message}"):
            section({"compare": {"noise": noise}}, "compare", CompareConfig)
    with pytest.raises(ConfigError, match=r"compare\.noise: expected float"):
        section({"compare": {"noise": "small"}}, "compare", CompareConfig)


def fake_runs(methods: list[str], seeds: list[int]) -> Runs:
    """Runs in memory: two STS tasks (STS12 of two subsets, STS-B) and one Chinese set, scores
    computed from synthetic predictions, each method noisier than the one before it."""
    params = load_params(REPO / "params.yaml")
    params.update(methods=methods, seeds=seeds)
    params["compare"]["resamples"] = 50
    sets = {"sts": {"STS12/a": 30, "STS12/b": 20, "STSBenchmark": 40}, "chinese": {"ATEC": 30}}
    rng = np.random.default_rng(0)
    files: dict[str, list[dict]] = {m: [] for m in methods}
    predictions: dict[str, dict[str, list[dict]]] = {s: {m: [] for m in methods} for s in sets}
    for noise, method in enumerate(methods, start=1):
        for _ in seeds:
            run: dict = {s: {"avg": 50.0} for s in SUITES}
            for suite, sizes in sets.items():
                arrays = {}
                for name, size in sizes.items():
                    arrays[f"{name}/gold"] = np.random.default_rng(size).uniform(0, 5, size)
                    arrays[f"{name}/predicted"] = arrays[f"{name}/gold"] / 5 + rng.normal(
                        0, noise / 10, size
                    )
                predictions[suite][method].append(arrays)
                tasks = pair_tasks({method: [arrays]})
                run[suite] = {
                    t: 100 * spearmanr(task.predicted[method][0], task.gold).statistic
                    for t, task in tasks.items()
                }
                run[suite]["avg"] = float(np.mean(list(run[suite].values())))
            run["sts"]["repal"] = {"avg": run["sts"]["avg"] + 1}
            run["train"] = {"sentences": 100}
            run["refine"] = {"fit_on": "corpus"}
            run["analysis"] = {
                "alignment": 0.1 * noise,
                "uniformity": -2.0 - noise,
                "inter_layer": [0.9, 0.8],
                "token_wise": [0.1, 0.2, 0.3],
            }
            files[method].append(run)
    curves = {
        m: {"loss": [{"step": 1, "loss": 1.0}], "dev": [{"step": 1, "dev": 80.0}]} for m in methods
    }
    singles = {REFERENCE: {s: {"avg": 40.0} for s in SUITES}}
    before = {"alignment": 0.05, "uniformity": -1.5, "inter_layer": [1, 1], "token_wise": [0, 0, 0]}
    return Runs(params, files, predictions, curves, singles, before)


def test_compare_aggregates_tests_and_plots_in_memory(tmp_path: Path) -> None:
    runs = fake_runs(["simcse", "sscl"], [1, 2])
    comparison = compare(runs, tmp_path)
    result = comparison.result
    assert result["baseline"] == "simcse" and result["seeds"] == [1, 2]
    assert set(result["methods"]["sscl"]) == {
        "sts",
        "sts/repal",
        "transfer",
        "chinese",
        "retrieval",
    }
    assert result["methods"]["sscl"]["sts"]["avg"]["n"] == 2
    sts = result["paired"]["sscl"]["sts"]
    assert set(sts) == {"STS12", "STSBenchmark", "avg"}
    assert sts["avg"]["high"] < 0 and sts["avg"]["significant"]  # noisier, clearly worse
    assert "| sscl + RepAL |" in comparison.text and "## Against simcse" in comparison.text
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "alignment_uniformity.json",
        "alignment_uniformity.png",
        "cosine_density.png",
        "layers.png",
        "training.png",
    ]


def test_aggregate_keeps_a_refinement_only_where_every_seed_has_it() -> None:
    with_repal = {s: {"avg": 1.0} for s in SUITES} | {"sts": {"avg": 1.0, "repal": {"avg": 2.0}}}
    without = {s: {"avg": 3.0} for s in SUITES}
    assert "sts/repal" in aggregate([with_repal, with_repal])
    aggregated = aggregate([with_repal, without])
    assert "sts/repal" not in aggregated
    assert aggregated["sts"]["avg"] == {"mean": 2.0, "std": np.std([1.0, 3.0], ddof=1), "n": 2}


def test_load_names_the_first_missing_file(tmp_path: Path) -> None:
    params = {"methods": ["simcse"], "seeds": [1]}
    folders = Folders(*(tmp_path / name for name in ("runs", "p", "c", "ref", "tfidf")))
    with pytest.raises(ConfigError, match=r"runs/simcse-1/sts\.json: not found; `dvc repro`"):
        load(params, folders)
    for folder, names in (
        (folders.runs / "simcse-1", [*SUITES, *RECORDS]),
        (folders.reference, SUITES),
        (folders.tfidf, SUITES),
    ):
        folder.mkdir(parents=True)
        for name in names:
            (folder / f"{name}.json").write_text("{}")
    with pytest.raises(ConfigError, match=r"p/simcse-1/sts\.npz: not found; `dvc repro`"):
        load(params, folders)
    (folders.runs / "simcse-1" / "sts.json").write_text('{"avg": 7')  # cut short
    with pytest.raises(UserError, match=r"runs/simcse-1/sts\.json: not valid JSON \(Expecting"):
        load(params, folders)


def test_a_task_missing_from_one_run_is_named_with_its_file(tmp_path: Path) -> None:
    runs = fake_runs(["simcse", "sscl"], [1, 2])
    runs.files["sscl"][1]["sts"].pop("STS12")
    with pytest.raises(ConfigError, match=r"runs/sscl-2/sts\.json: sscl seed 2 .*missing: STS12;"):
        compare(runs, tmp_path)
    predictions = runs.predictions["sts"]["sscl"]
    predictions[1] = {k: v for k, v in predictions[1].items() if not k.startswith("STS12/")}
    with pytest.raises(
        ConfigError, match=r"predictions/sscl-2/sts\.npz: sscl seed 2 .*missing: STS12;"
    ):
        compare(runs, tmp_path)
    assert not any(tmp_path.iterdir())  # refused before any plot
