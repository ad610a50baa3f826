"""Strict loading of `params.yaml` sections into dataclasses.

An unknown key, a wrong type or an out-of-range value is one `ConfigError` that names the
param by its dotted path (``eval.transfer.kfold``), so a typo is never silently ignored; an
unknown section (``simsce:``, ``eval.stss:``) is one too.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import types
import typing
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, TypeVar

from sentemb.registry import METHODS, SUITES

T = TypeVar("T")

# One params section per training method, as the registry names them (without importing torch).
METHOD_SECTIONS = METHODS.names()
# The top-level keys of params.yaml: the run plan, one section per concern, one per method.
SECTIONS = (
    "method",
    "seeds",
    "data",
    "model",
    "train",
    "phrases",
    *METHOD_SECTIONS,
    "refine",
    "tfidf",
    "eval",
    "analysis",
    "compare",
)
SEEDS = range(2**32)  # what every generator seeded here accepts (numpy's: below 2**32)


class UserError(Exception):
    """An error a user fixes (a param, a file, a line it names): stages print it once, exit 1."""


class ConfigError(UserError, ValueError):
    """A param is unknown, of the wrong type or out of range."""


@dataclass(frozen=True)
class Range:
    """Where a numeric param means something: `low` <= value <= `high`, strict at an `open` end;
    None is no bound. Written into a field's type (`Annotated[int, Range(1)]`, or an alias below)
    and checked by `from_dict`, so every numeric param states its range where it is declared."""

    low: float | None = None
    high: float | None = None
    open_low: bool = False
    open_high: bool = False
    why: str = ""  # added to the error

    def __str__(self) -> str:
        if self.high is None:
            return f"{'>' if self.open_low else '>='} {self.low:g}"
        if self.low is None:
            high = self.high if isinstance(self.high, int) else f"{self.high:g}"
            return f"{'<' if self.open_high else '<='} {high}"
        high = f"{self.high}" if isinstance(self.high, int) else f"{self.high:.3g}"
        high = "2**32" if self.high == 2**32 else high
        left, right = "(" if self.open_low else "[", ")" if self.open_high else "]"
        return f"in {left}{self.low:g}, {high}{right}"

    def holds(self, value: float) -> bool:
        """Whether `value` is inside (NaN never is)."""
        above = self.low is None or (value > self.low if self.open_low else value >= self.low)
        below = self.high is None or (value < self.high if self.open_high else value <= self.high)
        return bool(above and below) and value == value


# An integer param without an upper bound of its own stops here: a count past it is a typo
# (torch and joblib take some counts as C ints; 10**20 overflows them, or NumPy's int64, with a
# traceback deep in a stage).
LARGEST = Range(high=2**31 - 1, why="the largest C int, which torch and joblib take some counts as")
# The ranges most params share; a param with another writes `Annotated[int, Range(...)]`.
Count = Annotated[int, Range(1)]  # a number of things, steps or sentences: at least 1
NonNegativeInt = Annotated[int, Range(0)]
Positive = Annotated[float, Range(0, open_low=True)]  # a scale, temperature or rate
NonNegative = Annotated[float, Range(0)]  # a weight or ratio that 0 turns off
Probability = Annotated[float, Range(0, 1)]
# softmax(cos / τ): the range SSCL (Table 6) and SimCSE (App. D) tried; past 1 the logits span
# less than ±1 and the softmax is near uniform, below 0.001 they pass ±1000 and only overflow
Temperature = Annotated[float, Range(1e-3, 1, why="the range the papers tried")]
Seed = Annotated[int, Range(0, 2**32, open_high=True)]  # what every generator seeded here takes
# a sample of test pairs scored by a rank correlation, which 2 pairs make ±1 whatever the model
PairSample = Annotated[int, Range(3)]


def choice_problems(
    name: str, values: list[Any], known: Sequence[Any], empty: bool = False
) -> list[str]:
    """What is wrong with list param `name` of entries from `known`: unknown entries, or none
    at all (unless `empty` is allowed), each said with the param's key (`from_dict` refuses a
    repeated entry of every list param)."""
    problems = []
    unknown = [v for v in values if v not in known]
    if unknown:
        problems.append(f"{name}: unknown {unknown}; known {list(known)}")
    if not values and not empty:
        problems.append(f"{name}: must name at least one of {list(known)}")
    return problems


def check_distinct(values: Sequence[Any], where: str) -> None:
    """A `ConfigError` naming list param `where`, the repeated entry and its two places, for a
    list holding an entry twice. Every list param is a set of choices, grid points, layers or
    edges, where a repeat is a typo (run or scored twice, or a zero-width bin): none allows one.
    """
    for j, value in enumerate(values):
        if value in values[:j]:
            i = values.index(value)
            raise ConfigError(f"{where}: {value!r} is repeated ([{i}] and [{j}]); list it once")


def ranges(annotation: Any) -> list[Range]:
    """The `Range`s written into a type (inside `X | None` too)."""
    if typing.get_origin(annotation) is Annotated:
        return [extra for extra in annotation.__metadata__ if isinstance(extra, Range)]
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        return [r for arg in typing.get_args(annotation) for r in ranges(arg)]
    return []


def load_params(path: str | Path = "params.yaml") -> dict[str, Any]:
    """Read the params file as DVC reads it (`read_yaml`) and check its sections' names; a
    missing or malformed file is a `ConfigError` naming it."""
    return params_from(read_yaml(Path(path)), str(path))


def params_from(params: Any, name: str) -> dict[str, Any]:
    """`params`, read from the params file `name`, when its sections are known; else a
    `ConfigError` naming what is not."""
    if not isinstance(params, dict):
        raise ConfigError(f"{name}: expected a mapping of sections at the top level")
    check_keys(params, SECTIONS, f"{name}: unknown top-level key(s)")
    evaluation = params.get("eval")
    if evaluation is not None and not isinstance(evaluation, dict):
        raise ConfigError(
            f"eval: expected a mapping of suites {list(SUITES.names())}, got {evaluation!r}"
        )
    check_keys(evaluation or {}, SUITES.names(), "eval: unknown key(s)")
    return params


def read_yaml(path: Path) -> Any:
    """A YAML file read as `parse_yaml` reads it; a missing file is a `ConfigError` naming it."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError as err:
        raise ConfigError(f"{path}: params file not found") from err
    except OSError as err:
        raise ConfigError(f"{path}: cannot be read ({err.strerror or err})") from err
    return parse_yaml(raw, str(path))


def parse_yaml(raw: bytes, name: str) -> Any:
    """YAML read with DVC's own loader (ruamel.yaml's safe loader, YAML 1.2: `1e-3` is a number
    and `yes` a string, where PyYAML reads them otherwise), so a stage sees the values `dvc params
    diff` and `dvc exp run -S` see. One `ConfigError` naming the file `name` and the line for
    bytes that are not UTF-8, a key written twice in one mapping (DVC refuses the file; PyYAML
    would keep the last silently) and any other YAML error."""
    from ruamel.yaml import YAML
    from ruamel.yaml.constructor import DuplicateKeyError
    from ruamel.yaml.error import MarkedYAMLError, YAMLError

    try:
        text = raw.decode("utf-8").removeprefix("\ufeff")
    except UnicodeDecodeError as err:
        line = raw.count(b"\n", 0, err.start) + 1
        raise ConfigError(
            f"{name}:{line}: not UTF-8 (byte {raw[err.start]:#04x}); save the file as UTF-8"
        ) from err
    try:
        return YAML(typ="safe").load(text)
    except DuplicateKeyError as err:
        found = _duplicate(YAML(typ="safe").compose(text))
        what = (
            f"the key {found[0]!r} is written twice in one mapping (first at line {found[1]})"
            if found
            else err.problem  # keys spelled apart that read the same (`1` and `01`)
        )
        line = err.problem_mark.line + 1
        raise ConfigError(f"{name}:{line}: {what}; DVC refuses such a file: keep one") from err
    except MarkedYAMLError as err:
        mark = err.problem_mark or err.context_mark
        where = f"{name}:{mark.line + 1}" if mark else name
        raise ConfigError(f"{where}: not valid YAML: {err.problem or err.context}") from err
    except YAMLError as err:
        raise ConfigError(f"{name}: not valid YAML: {err}") from err


def _duplicate(node: Any) -> tuple[str, int] | None:
    """The first key written twice in a mapping of a composed YAML `node` (as written): the key
    and the line (from 1) of its first occurrence."""
    children = node.value if isinstance(node.value, list) else []
    if node.id == "mapping":
        seen: dict[Any, int] = {}
        for key, _ in children:
            if key.value in seen:
                return key.value, seen[key.value]
            seen[key.value] = key.start_mark.line + 1
        children = [item for pair in children for item in pair]
    for child in children:
        if (found := _duplicate(child)) is not None:
            return found
    return None


def check_keys(values: dict, known: tuple[str, ...], unknown_keys: str) -> None:
    """A `ConfigError` '<unknown_keys> [...] (did you mean ...?); known keys are [...]' for
    the keys of `values` not in `known`."""
    unknown = sorted(str(key) for key in values if key not in known)
    if not unknown:
        return
    hints = [
        f"{match[0]!r}" + (f" for {key!r}" if len(unknown) > 1 else "")
        for key in unknown
        if (match := difflib.get_close_matches(key, known, n=1))
    ]
    raise ConfigError(
        f"{unknown_keys} {unknown}"
        + (f" (did you mean {', '.join(hints)}?)" if hints else "")
        + f"; known keys are {list(known)}"
    )


def _coerce(value: Any, annotation: Any, where: str, nullable: bool = False) -> Any:
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is Annotated:
        value = _coerce(value, args[0], where)
        bounds = ranges(annotation)
        if args[0] is int and all(bound.high is None for bound in bounds):
            bounds.append(LARGEST)
        for bound in bounds:
            if not bound.holds(value):
                null = " or null" if nullable else ""
                why = f" ({bound.why})" if bound.why else ""
                raise ConfigError(f"{where}: must be {bound}{null}{why}, got {value}")
        return value
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        errors = []
        for arg in (a for a in args if a is not type(None)):
            try:
                return _coerce(value, arg, where, nullable=type(None) in args)
            except ConfigError as err:
                errors.append(str(err))
        alternatives = [e.removeprefix(f"{where}: ") for e in errors[1:]]
        raise ConfigError("; or ".join([errors[0], *alternatives]))
    if origin is typing.Literal:
        if value not in args:
            raise ConfigError(f"{where}: {value!r} is not one of {list(args)}")
        return value
    if origin in (list, tuple):
        if not isinstance(value, list | tuple):
            raise ConfigError(f"{where}: expected a list, got {value!r}")
        item_type = args[0] if args else Any
        items = [_coerce(v, item_type, f"{where}[{i}]") for i, v in enumerate(value)]
        check_distinct(items, where)
        return items
    if origin is dict:
        if not isinstance(value, dict):
            raise ConfigError(f"{where}: expected a mapping, got {value!r}")
        return {k: _coerce(v, args[1], f"{where}.{k}") for k, v in value.items()}
    if dataclasses.is_dataclass(annotation):
        return from_dict(annotation, value, where)
    if annotation is Any:
        return value
    if annotation is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if annotation is float and isinstance(value, float) and not math.isfinite(value):
        raise ConfigError(f"{where}: expected a finite number, got {value!r}")
    if annotation in (int, float, str, bool) and (
        not isinstance(value, annotation) or (annotation is int and isinstance(value, bool))
    ):
        raise ConfigError(f"{where}: expected {annotation.__name__}, got {value!r}")
    return value


def from_dict(cls: type[T], values: dict[str, Any] | None, where: str) -> T:
    """Build dataclass `cls` from `values` (a mapping, or a `cls` built in code, checked the
    same way); unknown keys and bad types raise `ConfigError`."""
    values = {} if values is None else values
    if isinstance(values, cls):
        values = dataclasses.asdict(values)
    hints = typing.get_type_hints(cls, include_extras=True)
    listed = getattr(cls, "LIST", None)  # a section written as the list of this field
    if listed is not None and isinstance(values, list):
        config = cls(**{listed: _coerce(values, hints[listed], where)})
        return _checked(config, where)
    if not isinstance(values, dict):
        raise ConfigError(f"{where}: expected a mapping, got {values!r}")
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(values) - names)
    if unknown:
        raise ConfigError(f"{where}: unknown key(s) {unknown}; known keys are {sorted(names)}")
    kwargs = {k: _coerce(v, hints[k], f"{where}.{k}") for k, v in values.items()}
    for f in dataclasses.fields(cls):
        required = f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
        if required and f.name not in kwargs:
            raise ConfigError(f"{where}.{f.name}: missing")
    try:
        config = cls(**kwargs)
    except TypeError as err:
        raise ConfigError(f"{where}: {err}") from err
    return _checked(config, where)


def _checked(config: T, where: str) -> T:
    """`config` once its own `validate` finds no problem; else the first, as a `ConfigError`."""
    check = getattr(config, "validate", None)
    if check is not None:
        for problem in check():
            raise ConfigError(f"{where}.{problem}")
    return config


def section(params: dict[str, Any], name: str, cls: type[T]) -> T:
    """The dataclass for section `name` (a dotted path) of the params file."""
    node: Any = params
    parts = name.split(".")
    for i, part in enumerate(parts):
        if node is not None and not isinstance(node, dict):
            where = ".".join(parts[:i])
            raise ConfigError(f"{where}: expected a mapping, got {node!r}")
        node = node.get(part) if node is not None else None
    return from_dict(cls, node, name)


def parse_spec(spec: str) -> list[str]:
    """The part names of a method spec: `'simcse + iscse'` -> `['simcse', 'iscse']`.

    The one place a spec is read: split on '+', spaces stripped; an empty, unknown or repeated
    part is a `ConfigError` naming the spec. `'+'.join` of the result is the spec's canonical form.
    """
    names = [n.strip() for n in spec.split("+")]
    unknown = [n for n in names if n and n not in METHOD_SECTIONS]
    if "" in names or unknown or len(set(names)) != len(names):
        raise ConfigError(
            f"method: {spec!r} must join distinct known methods with '+' (no empty part); "
            f"unknown {unknown}; known {list(METHOD_SECTIONS)}"
        )
    return names


def run_plan(params: dict) -> tuple[str, list[int]]:
    """The experiment's method, as its canonical spec (`parse_spec`'s parts joined with '+'),
    and its seeds: a non-empty list of distinct integers in `SEEDS`. One experiment is one
    method: a list is refused with the command that queues one experiment per method."""
    method, seeds = params.get("method"), params.get("seeds")
    if isinstance(method, list):
        listed = ",".join(map(str, method))
        raise ConfigError(
            f"method: one experiment is one method, got the list {method!r}; queue one "
            f"experiment per method: dvc exp run --queue -S method={listed}"
        )
    if not isinstance(method, str):
        raise ConfigError(
            f"method: expected a method name or a '+' join such as iscse+dclr, got {method!r}"
        )
    if not isinstance(seeds, list) or not seeds:
        raise ConfigError(
            f"seeds: expected a non-empty list of integers, got {seeds!r} "
            "(on the command line: -S 'seeds=[42]')"
        )
    if any(not isinstance(s, int) or isinstance(s, bool) or s not in SEEDS for s in seeds):
        raise ConfigError(f"seeds: expected integers in [0, 2**32), got {seeds!r}")
    check_distinct(seeds, "seeds")
    return "+".join(parse_spec(method)), seeds
