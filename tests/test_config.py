"""Strict params: unknown keys, wrong types and out-of-range values name the param."""

from __future__ import annotations

import dataclasses
import math
import re
import subprocess
import sys
import typing
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from sentemb.config import (
    METHOD_SECTIONS,
    SECTIONS,
    ConfigError,
    Count,
    NonNegative,
    Positive,
    Probability,
    Range,
    load_params,
    ranges,
    read_yaml,
    run_plan,
    section,
)
from sentemb.data.download import DataConfig
from sentemb.evaluation.sts import STSConfig
from sentemb.model_config import ModelConfig

from support import REPO
from support.stages import make_inputs, run_stage


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
        ({"data": {"timeout": 0}}, r"data.timeout: must be in \(0, 86400\] \(seconds\), got 0.0"),
        ({"data": {"timeout": 1e10}}, r"data.timeout: must be in \(0, 86400\]"),
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
    from sentemb.evaluation.classify import TransferConfig
    from sentemb.methods.dclr import DCLRConfig
    from sentemb.refine.config import RefineConfig
    from sentemb.report.stats import CompareConfig

    classes = {"dclr": DCLRConfig, "refine": RefineConfig, "compare": CompareConfig}
    with pytest.raises(ConfigError, match=message):
        section(nested(dotted, values), dotted, classes.get(dotted, TransferConfig))


@pytest.mark.parametrize("value", [5, [1], "x", True])
def test_a_section_that_is_not_a_mapping_is_refused(tmp_path: Path, value: object) -> None:
    """`eval: 5` gave the code's defaults for every suite (max_pairs null, not params.yaml's)."""
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump({"eval": value}))
    with pytest.raises(ConfigError, match=r"^eval: expected a mapping of suites \['chinese', "):
        load_params(path)
    with pytest.raises(ConfigError, match=r"^eval: expected a mapping, got "):
        section({"eval": value}, "eval.sts", STSConfig)


@pytest.mark.parametrize(
    ("method", "seeds", "message"),
    [
        ("simsce", [1], r"^method: 'simsce' must join distinct known methods"),
        ("iscse+", [1], r"^method: 'iscse\+' must join"),
        ("dclr + dclr", [1], r"^method: 'dclr \+ dclr' must join distinct"),
        ("", [1], r"^method: '' must join"),
        (["simcse", "dclr"], [1], r"^method: one experiment is one method.*method=simcse,dclr$"),
        (None, [1], r"^method: expected a method name or a '\+' join"),
        ("simcse", [2**32], r"^seeds: expected integers in \[0, 2\*\*32\)"),
        ("simcse", [1, 1], r"^seeds: 1 is repeated \(\[0\] and \[1\]\); list it once$"),
        ("simcse", [], r"^seeds: expected a non-empty list"),
        ("simcse", 42, r"^seeds: expected a non-empty list .* -S 'seeds=\[42\]'"),
    ],
)
def test_run_plan_is_one_method_and_distinct_seeds(
    method: object, seeds: object, message: str
) -> None:
    """The experiment's method is one spec, read where every stage reads it; its canonical form
    joins the parts with '+' without spaces (what DVC, MLflow and the reports show)."""
    with pytest.raises(ConfigError, match=message):
        run_plan({"method": method, "seeds": seeds})
    assert run_plan({"method": " iscse + dclr", "seeds": [0, 2**32 - 1]}) == (
        "iscse+dclr",
        [0, 2**32 - 1],
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


def test_known_sections_are_those_of_params_yaml_and_the_registries() -> None:
    """`config.SECTIONS` is the one list of top-level keys: params.yaml has exactly these, and
    every registered training method has its section; the registered suites are the sections
    under `eval`, in report order."""
    from sentemb.registry import METHODS, SUITES

    params = read_yaml(REPO / "params.yaml")
    assert sorted(params) == sorted(SECTIONS)
    assert set(METHODS) == set(METHOD_SECTIONS)  # one section per method file, none else
    assert list(params["eval"]) == list(SUITES)


def test_config_modules_stay_light() -> None:
    """The loader, `ModelConfig`, `TrainConfig` (read by phrases, refine, analyze and compare)
    and the whole of compare's library import no torch: a stage's deps are what it computes
    with (tests/repo/test_pipeline.py)."""
    code = (
        "import sys, sentemb.config, sentemb.model_config, sentemb.training.config, "
        "sentemb.review.paired; "
        "assert not {'torch', 'transformers'} & set(sys.modules), 'torch imported'"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


@dataclass
class Limits:
    steps: Count = 3
    limit: Count | None = None
    rate: Positive = 0.5
    share: Probability = 0.1
    grid: list[NonNegative] = field(default_factory=lambda: [1.0])


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"steps": 0}, "limits.steps: must be >= 1, got 0"),
        ({"limit": 0}, "limits.limit: must be >= 1 or null, got 0"),  # null: no limit
        ({"rate": 0}, "limits.rate: must be > 0, got 0.0"),
        ({"share": 1.5}, "limits.share: must be in [0, 1], got 1.5"),
        ({"grid": [1.0, -1e-9]}, "limits.grid[1]: must be >= 0, got -1e-09"),
        ({"rate": float("nan")}, "limits.rate: expected a finite number, got nan"),
    ],
)
def test_a_value_outside_the_declared_range_names_the_param_and_the_range(
    values: dict, message: str
) -> None:
    with pytest.raises(ConfigError) as err:
        section({"limits": values}, "limits", Limits)
    assert str(err.value) == message
    assert section({"limits": {"limit": None, "share": 1}}, "limits", Limits).share == 1.0


def params_sections() -> dict[str, type]:
    """Every params section (dotted) and the dataclass each is read into, from the registries;
    `test_every_params_section_is_walked` checks it covers params.yaml."""
    from sentemb.analysis import AnalysisConfig
    from sentemb.methods.base import SimCSEConfig
    from sentemb.phrases import PhrasesConfig
    from sentemb.refine.config import RefineConfig
    from sentemb.registry import METHODS, SUITES
    from sentemb.report.stats import CompareConfig
    from sentemb.tfidf import TfidfConfig
    from sentemb.training.config import TrainConfig

    return {
        "data": DataConfig,
        "model": ModelConfig,
        "train": TrainConfig,
        "phrases": PhrasesConfig,
        "simcse": SimCSEConfig,
        **{name: entry.config for name, entry in METHODS.items() if name != "simcse"},
        "refine": RefineConfig,
        "tfidf": TfidfConfig,
        **{f"eval.{name}": entry.config for name, entry in SUITES.items()},
        "analysis": AnalysisConfig,
        "compare": CompareConfig,
    }


def numeric_params() -> list[tuple[str, type, str, object]]:
    """(dotted section, its dataclass, field, annotation) of every int or float param, nested
    sections (`refine.repal`) walked; lists and `| None` of numbers included."""
    found = []

    def walk(dotted: str, cls: type) -> None:
        for name, hint in typing.get_type_hints(cls, include_extras=True).items():
            inner = [hint, *typing.get_args(hint)]
            inner += [a for h in inner for a in typing.get_args(h)]
            if dataclasses.is_dataclass(hint):
                walk(f"{dotted}.{name}", hint)
            elif any(a in (int, float) for a in inner):
                found.append((dotted, cls, name, hint))

    for dotted, cls in params_sections().items():
        walk(dotted, cls)
    return found


def test_every_params_section_is_walked() -> None:
    params = read_yaml(REPO / "params.yaml")
    leaves = {k for k, v in params.items() if isinstance(v, dict) and k != "eval"}
    leaves |= {f"eval.{k}" for k in params["eval"]}
    assert leaves == set(params_sections())


def test_every_numeric_param_states_its_range() -> None:
    """The class of "a number outside where it means something": every int and float param of
    every section declares a `Range` in its type, which `section` checks."""
    missing = [f"{d}.{n}" for d, _, n, hint in numeric_params() if not ranges_of(hint)]
    assert not missing, f"numeric params without a Range: {missing}"


def ranges_of(hint: object) -> list[Range]:
    found = ranges(hint)
    for arg in typing.get_args(hint):  # list[Annotated[...]]
        found += ranges_of(arg) if typing.get_origin(arg) is not typing.Annotated else ranges(arg)
    return found


def outside(bound: Range, integer: bool) -> st.SearchStrategy:
    """Numbers outside `bound` (its open ends included), NaN and the infinities."""
    edges = []
    if bound.low is not None:
        edges.append(st.just(bound.low) if bound.open_low else st.just(bound.low - 1))
        edges.append(st.floats(max_value=bound.low, exclude_max=not bound.open_low))
    if bound.high is not None:
        edges.append(st.just(bound.high) if bound.open_high else st.just(bound.high + 1))
        edges.append(st.floats(min_value=bound.high, exclude_min=not bound.open_high))
    values = st.one_of(edges)
    if integer:
        return values.filter(lambda v: math.isfinite(v) and v == int(v)).map(int)
    return st.one_of(values, st.sampled_from([math.nan, math.inf, -math.inf]))


NUMERIC = numeric_params()


@pytest.mark.parametrize(
    ("dotted", "cls", "name", "hint"), NUMERIC, ids=[f"{d}.{n}" for d, _, n, _ in NUMERIC]
)
@settings(max_examples=25, deadline=None)
@given(data=st.data())
def test_every_numeric_param_outside_its_range_is_one_error_naming_it(
    dotted: str, cls: type, name: str, hint: object, data: st.DataObject
) -> None:
    """Hypothesis draws values outside each param's range (at and beyond its ends, NaN, ±inf):
    `section` refuses each with the dotted param named, never a traceback or a silent run."""
    bound = ranges_of(hint)[0]
    integer = int in {a for h in [hint, *typing.get_args(hint)] for a in [h, *typing.get_args(h)]}
    value = data.draw(outside(bound, integer))
    listed = "list" in str(hint)
    values = nested(dotted, {name: [value] if listed else value})
    with pytest.raises(ConfigError) as err:
        section(values, dotted, cls)
    assert str(err.value).startswith(f"{dotted}.{name}"), str(err.value)


CHOICE_LISTS = [  # (section, key, a known entry, whether it may be empty)
    ("eval.sts", "tasks", "STS12", False),
    ("eval.chinese", "tasks", "ATEC", False),
    ("eval.transfer", "tasks", "MR", False),
    ("eval.retrieval", "qqp_splits", "dev", False),
    ("eval.retrieval", "offline_sets", "BQ", True),
]


@pytest.mark.parametrize(("dotted", "key", "known", "empty"), CHOICE_LISTS)
def test_every_list_of_choices_refuses_unknown_repeated_and_no_entries(
    dotted: str, key: str, known: str, empty: bool
) -> None:
    """The class of list params that name tasks or sets: an unknown or repeated entry, and no
    entry where one is needed, are one error naming the param (an empty list used to reach the
    suite, whose error named no param)."""
    cls = params_sections()[dotted]
    cases = [([known, "nope"], "unknown ['nope']"), ([known, known], f"{known!r} is repeated")]
    cases += [] if empty else [([], "must name at least one of")]
    for value, message in cases:
        with pytest.raises(ConfigError) as err:
            section(nested(dotted, {key: value}), dotted, cls)
        assert str(err.value).startswith(f"{dotted}.{key}: {message}"), str(err.value)
    if empty:
        section(nested(dotted, {key: []}), dotted, cls)


def list_params() -> list[tuple[str, type, str]]:
    """(dotted section, its dataclass, field) of every list param, nested sections walked and
    `| None` lists included."""
    found = []

    def walk(dotted: str, cls: type) -> None:
        for name, hint in typing.get_type_hints(cls, include_extras=True).items():
            if dataclasses.is_dataclass(hint):
                walk(f"{dotted}.{name}", hint)
            elif any(typing.get_origin(a) in (list, tuple) for a in [hint, *typing.get_args(hint)]):
                found.append((dotted, cls, name))

    for dotted, cls in params_sections().items():
        walk(dotted, cls)
    return found


LISTS = list_params()
# an entry for each list param whose default holds none (the others repeat their first)
ENTRIES = {
    "data.datasets": "STSBenchmark",
    "eval.own.sets": {"name": "bio", "kind": "sts", "path": "data/own/bio.tsv"},
    "eval.mteb.tasks": "STS12",
    "eval.mteb.languages": "eng",
    "eval.mteb.splits": "test",
}


def test_the_list_walker_finds_nested_optional_and_dataclass_lists() -> None:
    found = {f"{d}.{n}" for d, _, n in LISTS}
    assert {"data.datasets", "refine.repal.lambda1", "eval.own.sets", "sscl.layers"} <= found


@pytest.mark.parametrize(("dotted", "cls", "name"), LISTS, ids=[f"{d}.{n}" for d, _, n in LISTS])
def test_every_list_param_refuses_a_repeated_entry_naming_it(
    dotted: str, cls: type, name: str
) -> None:
    """The class of list params: each is a set of choices, grid points, layers or edges, so an
    entry given twice is one error naming the param and the entry's places (a repeated task or
    grid point was scored twice, a repeated augmentation or dataset silently dropped)."""
    default = getattr(cls(), name) or []
    entry = ENTRIES.get(f"{dotted}.{name}", default[0] if default else None)
    assert entry is not None, f"{dotted}.{name}: add an entry to ENTRIES"
    with pytest.raises(ConfigError) as err:
        section(nested(dotted, {name: [entry, entry]}), dotted, cls)
    message = str(err.value)
    assert message.startswith(f"{dotted}.{name}: ") and "is repeated ([0] and [1])" in message


def test_an_empty_chinese_model_name_is_refused_not_the_main_model() -> None:
    cls = params_sections()["eval.chinese"]
    with pytest.raises(ConfigError, match=r"^eval\.chinese\.model: an empty name; null means"):
        section(nested("eval.chinese", {"model": " "}), "eval.chinese", cls)


UNBOUNDED_INTS = [
    (d, c, n, h)
    for d, c, n, h in NUMERIC
    if int in {a for x in [h, *typing.get_args(h)] for a in [x, *typing.get_args(x)]}
    and all(bound.high is None for bound in ranges_of(h))
]


@pytest.mark.parametrize(
    ("dotted", "cls", "name", "hint"),
    UNBOUNDED_INTS,
    ids=[f"{d}.{n}" for d, _, n, _ in UNBOUNDED_INTS],
)
def test_every_integer_param_without_a_bound_of_its_own_stops_at_the_largest_c_int(
    dotted: str, cls: type, name: str, hint: object
) -> None:
    """The class of counts no library takes (10**20 overflowed torch, NumPy, joblib and
    islice with a traceback): one bound, `LARGEST`, for every integer param without its own."""
    listed = "list" in str(hint)
    values = nested(dotted, {name: [2**31] if listed else 2**31})
    with pytest.raises(ConfigError, match=r"must be <= 2147483647") as err:
        section(values, dotted, cls)
    assert str(err.value).startswith(f"{dotted}.{name}"), str(err.value)


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ({"simsce": {"temperature": 0.1}}, r"\['simsce'\] \(did you mean 'simcse'\?\)"),
        ({"Model": {"pooler": "mean"}}, r"\['Model'\] \(did you mean 'model'\?\)"),
        ({"methods": ["simcse"]}, r"\['methods'\] \(did you mean 'method'\?\)"),
        ({"zzz": 1, "trian": {}}, r"\['trian', 'zzz'\] \(did you mean 'train' for 'trian'\?\)"),
        ({7: "x"}, r"\['7'\];"),
    ],
)
def test_unknown_top_level_key_is_refused(tmp_path: Path, extra: dict, message: str) -> None:
    params = read_yaml(REPO / "params.yaml") | extra
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump(params))
    prefix = re.escape(f"{path}: unknown top-level key(s) ")
    with pytest.raises(ConfigError, match=f"^{prefix}{message}") as err:
        load_params(path)
    assert str(err.value).endswith(f"known keys are {list(SECTIONS)}")


def test_unknown_eval_section_is_refused(tmp_path: Path) -> None:
    params = read_yaml(REPO / "params.yaml")
    params["eval"]["stss"] = params["eval"].pop("sts")
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump(params))
    message = (
        r"^eval: unknown key\(s\) \['stss'\] \(did you mean 'sts'\?\); known keys are \['chinese', "
    )
    with pytest.raises(ConfigError, match=message):
        load_params(path)


STAGE_ARGS = {
    "analyze.py": ["--out", "analysis.json"],
    "summary.py": [],
    "corpus.py": [],
    "download.py": [],
    "evaluate.py": ["--suites", "sts", "--out-dir", "out"],
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
    make_inputs([f"stages/{stage}"], STAGE_ARGS[stage], tmp_path)
    params = read_yaml(REPO / "params.yaml")
    params["simsce"] = params.pop("simcse")
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(params))
    before = sorted(tmp_path.rglob("*"))
    done = run_stage(stage, STAGE_ARGS[stage], tmp_path)
    assert done.returncode == 1, done.stderr[-3000:]
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    error = done.stderr.strip().splitlines()[-1]
    assert error.startswith("error: params.yaml: unknown top-level key(s) ['simsce'] ")
    assert "(did you mean 'simcse'?); known keys are ['method', " in error
    assert sorted(tmp_path.rglob("*")) == before


@pytest.mark.parametrize("value", [0, -5, 1.5, "all"])
@pytest.mark.parametrize(
    ("dotted", "key"),
    [("eval.chinese", "max_pairs"), ("eval.retrieval", "max_pairs"), ("refine", "valid_pairs")],
)
def test_pair_samples_are_positive_integers_or_null(dotted: str, key: str, value: object) -> None:
    from sentemb.evaluation.chinese import ChineseConfig
    from sentemb.evaluation.retrieval import RetrievalConfig
    from sentemb.refine.config import RefineConfig

    config = {"eval.chinese": ChineseConfig, "eval.retrieval": RetrievalConfig}.get(dotted)
    with pytest.raises(ConfigError, match=rf"{re.escape(dotted)}\.{key}: "):
        section(nested(dotted, {key: value}), dotted, config or RefineConfig)
    assert getattr(section({}, dotted, config or RefineConfig), key) is None  # default: every pair


def yaml_mapping(draw: st.DrawFn, depth: int = 0) -> list[str]:
    """The lines of a random nested YAML mapping (block style, distinct keys per mapping)."""
    keys = draw(st.lists(st.from_regex(r"[a-z_]{1,8}", fullmatch=True), min_size=1, unique=True))
    lines = []
    for key in keys:
        if depth < 2 and draw(st.booleans()):
            lines += [f"{key}:", *(f"  {line}" for line in yaml_mapping(draw, depth + 1))]
        else:
            lines.append(f"{key}: {draw(st.integers(-5, 5))}")
    return lines


@st.composite
def with_duplicate(draw: st.DrawFn) -> tuple[list[str], int, int]:
    """A mapping's lines with one key written again further down in the same mapping, and the
    lines (from 1) of both occurrences."""
    lines = yaml_mapping(draw)
    keyed = [i for i, line in enumerate(lines) if not line.endswith(":")]
    first = draw(st.sampled_from(keyed))
    indent = len(lines[first]) - len(lines[first].lstrip())
    key = lines[first].strip().split(":")[0]
    later = [
        i
        for i in range(first + 1, len(lines) + 1)
        if i == len(lines) or len(lines[i]) - len(lines[i].lstrip()) <= indent
    ]
    again = draw(st.sampled_from(later))
    # the same mapping continues only while nothing less indented came in between
    if any(len(line) - len(line.lstrip()) < indent for line in lines[first + 1 : again]):
        again = first + 1
    lines.insert(again, " " * indent + f"{key}: 9")
    return lines, first + 1, again + 1


@settings(max_examples=60, deadline=None)
@given(case=with_duplicate())
def test_a_key_written_twice_is_one_error_naming_both_lines(
    case: tuple[list[str], int, int], tmp_path_factory: pytest.TempPathFactory
) -> None:
    """PyYAML kept the last of two equal keys silently, where DVC refuses the file: the stages
    and DVC read different params. At any depth, the error names both lines."""
    lines, first, again = case
    path = tmp_path_factory.mktemp("dup") / "params.yaml"
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(ConfigError) as err:
        read_yaml(path)
    key = lines[first - 1].strip().split(":")[0]
    assert str(err.value).startswith(
        f"{path}:{again}: the key {key!r} is written twice in one mapping (first at line {first})"
    ), (str(err.value), lines)


@settings(max_examples=40, deadline=None)
@given(
    before=st.integers(0, 30),
    byte=st.integers(0x80, 0xFF),
    comment=st.booleans(),
)
def test_a_byte_that_is_not_utf8_is_one_error_naming_its_line(
    before: int, byte: int, comment: bool, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """A latin-1 byte anywhere, a comment included, was a UnicodeDecodeError traceback."""
    text = (REPO / "params.yaml").read_bytes().splitlines(keepends=True)
    line = before % len(text)
    spot = text[line].rstrip(b"\n") + (b"  # " if comment else b"") + bytes([byte]) + b"\n"
    path = tmp_path_factory.mktemp("bytes") / "params.yaml"
    path.write_bytes(b"".join([*text[:line], spot, *text[line + 1 :]]))
    with pytest.raises(ConfigError, match=rf"^{re.escape(str(path))}:{line + 1}: not UTF-8"):
        load_params(path)


SCALARS = st.sampled_from(
    [
        "yes", "no", "on", "off", "y", "n", "true", "True", "FALSE", "~", "null", "Null", "",
        "1e-3", "3.0e-5", "1E3", ".5", "5.", "+1", "-0", "0o17", "017", "0x1f", "1_000", "1:30",
        ".inf", "-.Inf", ".nan", "2026-11-25", "'1'", '"x"', "[1, 2]", "{a: 1}", "1e400",
    ]
)  # fmt: skip


@settings(max_examples=80, deadline=None)
@given(values=st.lists(SCALARS, min_size=1, max_size=4))
def test_params_are_read_as_dvc_reads_them(values: list[str], tmp_path_factory) -> None:
    """The stages read params.yaml with DVC's loader: every spelling of a scalar (YAML 1.1
    booleans, exponents without a dot, octals, sexagesimals, ...) gives the value `dvc params
    diff` and `dvc exp run -S` see."""
    from dvc.utils.serialize import parse_yaml

    text = "section:\n" + "".join(f"  k{i}: {v}\n" for i, v in enumerate(values))
    path = tmp_path_factory.mktemp("scalars") / "params.yaml"
    path.write_text(text)
    ours, theirs = read_yaml(path), parse_yaml(text, str(path))
    assert repr(ours) == repr(theirs)  # repr: NaN == NaN


def test_a_utf8_bom_is_read_and_a_folder_or_empty_file_is_one_error(tmp_path: Path) -> None:
    path = tmp_path / "params.yaml"
    path.write_bytes(b"\xef\xbb\xbf" + (REPO / "params.yaml").read_bytes())
    assert load_params(path) == load_params(REPO / "params.yaml")
    path.write_text("")
    with pytest.raises(ConfigError, match="expected a mapping of sections"):
        load_params(path)
    with pytest.raises(ConfigError, match=rf"^{re.escape(str(tmp_path))}: cannot be read"):
        load_params(tmp_path)
