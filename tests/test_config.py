"""Strict params: unknown keys, wrong types and out-of-range values name the param."""

from __future__ import annotations

import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from conftest import run_stage

from sentemb.config import (
    EVAL_SUITES,
    METHOD_SECTIONS,
    SECTIONS,
    ConfigError,
    at_least,
    load_params,
    run_plan,
    section,
)
from sentemb.data.download import DataConfig
from sentemb.evaluation.sts import STSConfig
from sentemb.model_config import ModelConfig

REPO = Path(__file__).resolve().parents[1]


def nested(dotted: str, values: dict) -> dict:
    """Params holding `values` at section `dotted` (`"eval.sts"`: `{"eval": {"sts": values}}`)."""
    for part in reversed(dotted.split(".")):
        values = {part: values}
    return values


def test_repo_params_load() -> None:
    params = load_params(REPO / "params.yaml")
    assert section(params, "model", ModelConfig).pooler == "auto"
    assert section(params, "data", DataConfig).corpus_size == 1_000_000
    assert section(params, "eval.sts", STSConfig).tasks[-1] == "SICKRelatedness"


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"data": {"corpus_sise": 10}}, r"data: unknown key\(s\) \['corpus_sise'\]"),
        ({"data": {"corpus_size": "many"}}, "data.corpus_size: expected int"),
        ({"data": {"corpus_size": True}}, "data.corpus_size: expected int"),
        ({"data": {"corpus_size": -1}}, "data.corpus_size: must be >= 1, got -1"),
        ({"data": {"timeout": 0}}, r"data.timeout: must be > 0, got 0.0"),
        ({"data": {"timeout": float("nan")}}, r"data.timeout: expected a finite number, got nan"),
        ({"data": {"timeout": float("inf")}}, r"data.timeout: expected a finite number, got inf"),
        ({"data": {"datasets": []}}, r"data.datasets: \[\] names no dataset; null downloads"),
    ],
)
def test_bad_data_params(values: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        section(values, "data", DataConfig)


def test_bad_nested_params() -> None:
    with pytest.raises(ConfigError, match=r"eval.sts.tasks: unknown \['STS17'\]"):
        section({"eval": {"sts": {"tasks": ["STS17"]}}}, "eval.sts", STSConfig)
    with pytest.raises(ConfigError, match=r"eval.sts.tasks\[0\]: expected str"):
        section({"eval": {"sts": {"tasks": [3]}}}, "eval.sts", STSConfig)


@pytest.mark.parametrize(
    ("dotted", "values", "message"),
    [
        ("dclr", {"noise_ratio": float("inf")}, r"dclr.noise_ratio: expected a finite number"),
        (
            "refine",
            {"repal": {"lambda1": [float("nan")]}},
            r"refine.repal.lambda1\[0\]: expected a",
        ),
        ("compare", {"bins": [0, float("nan"), 5]}, r"compare.bins\[1\]: expected a finite"),
        ("compare", {"seed": -1}, r"compare.seed: must be in \[0, 2\*\*32\), got -1"),
        ("refine", {"seed": -1}, r"refine.seed: must be in \[0, 2\*\*32\), got -1"),
        ("eval.transfer", {"seed": 2**32}, r"eval.transfer.seed: must be in \[0, 2\*\*32\)"),
    ],
)
def test_non_finite_numbers_and_seeds_out_of_range_are_refused(
    dotted: str, values: dict, message: str
) -> None:
    """A NaN or an infinity in any float param, and a seed no generator accepts, name the param
    (they failed late, inside numpy, urllib or torch, or gave a plot of one `0-nan` bin)."""
    from sentemb.evaluation.transfer import TransferConfig
    from sentemb.methods.dclr import DCLRConfig
    from sentemb.postprocess import RefineConfig
    from sentemb.report.stats import CompareConfig

    classes = {"dclr": DCLRConfig, "refine": RefineConfig, "compare": CompareConfig}
    with pytest.raises(ConfigError, match=message):
        section(nested(dotted, values), dotted, classes.get(dotted, TransferConfig))


@pytest.mark.parametrize("value", [5, [1], "x", True])
def test_a_section_that_is_not_a_mapping_is_refused(tmp_path: Path, value: object) -> None:
    """`eval: 5` gave the code's defaults for every suite (max_pairs null, not params.yaml's)."""
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump({"eval": value}))
    with pytest.raises(ConfigError, match=r"^eval: expected a mapping of suites \['sts', "):
        load_params(path)
    with pytest.raises(ConfigError, match=r"^eval: expected a mapping, got "):
        section({"eval": value}, "eval.sts", STSConfig)


@pytest.mark.parametrize(
    ("methods", "seeds", "message"),
    [
        (["simcse", "simsce"], [1], r"^methods\[1\]: method: 'simsce' must join distinct known"),
        (["simcse", "iscse+"], [1], r"^methods\[1\]: method: 'iscse\+' must join"),
        (["iscse+dclr", "dclr + iscse"], [1], r"^methods: .* lists a value twice"),
        (["simcse"], [2**32], r"^seeds: expected integers in \[0, 2\*\*32\)"),
    ],
)
def test_run_plan_reads_every_method_before_any_run(
    methods: list, seeds: list, message: str
) -> None:
    """A typo in the second method failed only when its own train stage ran, after the first
    method's whole chain; the same parts in another order are the same method."""
    with pytest.raises(ConfigError, match=message):
        run_plan({"methods": methods, "seeds": seeds})
    assert (
        run_plan({"methods": ["simcse", "iscse+dclr"], "seeds": [0, 2**32 - 1]})[1][1] == 2**32 - 1
    )


def test_missing_section_gives_defaults_and_int_is_float() -> None:
    assert section({}, "model", ModelConfig) == ModelConfig()
    assert section({"data": {"timeout": 5}}, "data", DataConfig).timeout == 5.0


def test_params_file_errors(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="params file not found"):
        load_params(tmp_path / "nope.yaml")
    (tmp_path / "bad.yaml").write_text("a: [1,\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_params(tmp_path / "bad.yaml")


def test_known_sections_are_those_of_params_yaml_and_the_method_registry() -> None:
    """`config.SECTIONS` is the one list of top-level keys: params.yaml has exactly these, and
    every registered training method has its section; `EVAL_SUITES` are the sections under
    `eval`, the suites the evaluate stage and the refinements know."""
    from sentemb.evaluation import suites
    from sentemb.methods import METHODS

    params = yaml.safe_load((REPO / "params.yaml").read_text(encoding="utf-8"))
    assert sorted(params) == sorted(SECTIONS)
    assert set(METHODS) == set(METHOD_SECTIONS)  # one section per method file, none else
    assert list(params["eval"]) == list(EVAL_SUITES) == list(suites.SUITES)


def test_config_modules_stay_light() -> None:
    """The loader, `ModelConfig`, `TrainConfig` (read by phrases, refine, analyze and compare)
    and the whole of compare's library import no torch: a stage's deps are what it computes
    with (tests/test_pipeline.py)."""
    code = (
        "import sys, sentemb.config, sentemb.model_config, sentemb.training.config, "
        "sentemb.report.compare; "
        "assert not {'torch', 'transformers'} & set(sys.modules), 'torch imported'"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


@dataclass
class Limits:
    steps: int = 3
    limit: int | None = None


@dataclass
class Scales:
    rate: float = 0.5
    cap: float | None = None


@pytest.mark.parametrize(
    ("values", "minimum", "problems"),
    [
        ({}, 1, []),
        (
            {"steps": 0, "limit": 0},
            1,
            ["steps: must be >= 1, got 0", "limit: must be >= 1 or null, got 0"],
        ),
        ({"steps": 1, "limit": None}, 2, ["steps: must be >= 2, got 1"]),  # null: no limit
        (
            {"steps": -1, "limit": -1},
            0,
            ["steps: must be >= 0, got -1", "limit: must be >= 0 or null, got -1"],
        ),
    ],
)
def test_at_least_names_each_field_below_its_minimum(
    values: dict, minimum: int, problems: list
) -> None:
    assert at_least(Limits(**values), minimum, "steps", "limit") == problems


@pytest.mark.parametrize(
    ("values", "strict", "problems"),
    [
        ({}, True, []),
        ({"rate": 0.0, "cap": 0.0}, False, []),  # the bound itself passes >= ...
        (
            {"rate": 0.0, "cap": 0.0},
            True,  # ... and fails >
            ["rate: must be > 0, got 0.0", "cap: must be > 0 or null, got 0.0"],
        ),
        (
            {"rate": float("nan"), "cap": float("nan")},  # NaN compares false: fails both
            False,
            ["rate: must be >= 0, got nan", "cap: must be >= 0 or null, got nan"],
        ),
        ({"rate": float("nan")}, True, ["rate: must be > 0, got nan"]),
        ({"rate": -1e-9, "cap": float("inf")}, False, ["rate: must be >= 0, got -1e-09"]),
    ],
)
def test_at_least_on_floats_strict_and_nan(values: dict, strict: bool, problems: list) -> None:
    assert at_least(Scales(**values), 0, "rate", "cap", strict=strict) == problems


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ({"simsce": {"temperature": 0.1}}, r"\['simsce'\] \(did you mean 'simcse'\?\)"),
        ({"Model": {"pooler": "mean"}}, r"\['Model'\] \(did you mean 'model'\?\)"),
        ({"method": "simcse"}, r"\['method'\] \(did you mean 'methods'\?\)"),
        ({"zzz": 1, "trian": {}}, r"\['trian', 'zzz'\] \(did you mean 'train' for 'trian'\?\)"),
        ({7: "x"}, r"\['7'\];"),
    ],
)
def test_unknown_top_level_key_is_refused(tmp_path: Path, extra: dict, message: str) -> None:
    params = yaml.safe_load((REPO / "params.yaml").read_text(encoding="utf-8")) | extra
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump(params))
    prefix = re.escape(f"{path}: unknown top-level key(s) ")
    with pytest.raises(ConfigError, match=f"^{prefix}{message}") as err:
        load_params(path)
    assert str(err.value).endswith(f"known keys are {list(SECTIONS)}")


def test_unknown_eval_section_is_refused(tmp_path: Path) -> None:
    params = yaml.safe_load((REPO / "params.yaml").read_text(encoding="utf-8"))
    params["eval"]["stss"] = params["eval"].pop("sts")
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump(params))
    message = (
        r"^eval: unknown key\(s\) \['stss'\] \(did you mean 'sts'\?\); known keys are \['sts', "
    )
    with pytest.raises(ConfigError, match=message):
        load_params(path)


STAGE_ARGS = {
    "analyze.py": ["--out", "analysis.json"],
    "compare.py": [],
    "download.py": [],
    "evaluate.py": ["--suites", "sts", "--out-dir", "."],
    "phrases.py": [],
    "refine.py": ["--out", "refined", "--metrics", "refine.json", "--plots", "plots"],
    "train.py": [
        *("--method", "simcse", "--seed", "1", "--out", "model", "--metrics", "train.json"),
        *("--plots", "plots", "--checkpoints", "checkpoints"),
    ],
}


def test_every_stage_reads_params_with_load_params() -> None:
    stages = sorted(p.name for p in (REPO / "stages").glob("*.py"))
    assert stages == sorted(STAGE_ARGS)
    for name in stages:
        assert "load_params(args.params)" in (REPO / "stages" / name).read_text(encoding="utf-8")


@pytest.mark.parametrize("stage", sorted(STAGE_ARGS))
def test_stage_refuses_a_misspelled_section(stage: str, tmp_path: Path) -> None:
    """`simsce:` instead of `simcse:`: one error line, exit 1, nothing written."""
    params = yaml.safe_load((REPO / "params.yaml").read_text(encoding="utf-8"))
    params["simsce"] = params.pop("simcse")
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(params))
    done = run_stage(stage, STAGE_ARGS[stage], tmp_path)
    assert done.returncode == 1, done.stderr[-3000:]
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    error = done.stderr.strip().splitlines()[-1]
    assert error.startswith("error: params.yaml: unknown top-level key(s) ['simsce'] ")
    assert "(did you mean 'simcse'?); known keys are ['methods', " in error
    assert [p.name for p in tmp_path.iterdir()] == ["params.yaml"]


@pytest.mark.parametrize("value", [0, -5, 1.5, "all"])
@pytest.mark.parametrize(
    ("dotted", "key"),
    [("eval.chinese", "max_pairs"), ("eval.retrieval", "max_pairs"), ("refine", "valid_pairs")],
)
def test_pair_samples_are_positive_integers_or_null(dotted: str, key: str, value: object) -> None:
    from sentemb.evaluation.chinese import ChineseConfig
    from sentemb.evaluation.retrieval import RetrievalConfig
    from sentemb.postprocess import RefineConfig

    config = {"eval.chinese": ChineseConfig, "eval.retrieval": RetrievalConfig}.get(dotted)
    with pytest.raises(ConfigError, match=rf"{re.escape(dotted)}\.{key}: "):
        section(nested(dotted, {key: value}), dotted, config or RefineConfig)
    assert getattr(section({}, dotted, config or RefineConfig), key) is None  # default: every pair
