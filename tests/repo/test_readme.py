"""Every command in the README's shell blocks is checked, so none can go stale.

Each command is checked without running the pipeline: `make` targets exist in the Makefile;
`dvc` command lines parse with DVC's own parser, name stages that dvc.yaml defines and set
(`-S`) params that params.yaml has; `python stages/X.py ...`, `python -m sentemb.X ...` and
`python benchmarks/X.py ...` parse with the script's own argument parser (run up to its
`parse_args`, which then stops it). A command of any other program fails the test until a check
for it is added here. The results table is the committed metrics files' numbers.
"""

from __future__ import annotations

import argparse
import json
import re
import runpy
import shlex
import sys
from pathlib import Path

import pytest

from sentemb.config import read_yaml

from support import REPO
from support.stages import make_inputs

# programs with no pipeline surface to check
SKIPPED = {"cd", "export", "source", ".", "git", "mlflow", "pip", "echo", "grep", "head"}


class Parsed(Exception):
    """Raised by the patched `parse_args` once a script's arguments parsed."""


def readme_commands(text: str) -> list[list[str]]:
    """The commands of every ```bash block: continuation lines joined, comments dropped, and
    lists (`&&`, `;`, `|`) split into their commands."""
    commands = []
    for block in re.findall(r"```bash\n(.*?)```", text, flags=re.S):
        for line in block.replace("\\\n", " ").splitlines():
            words = shlex.split(line, comments=True)
            command: list[str] = []
            for word in [*words, ";"]:
                if word in ("&&", "||", ";", "|"):
                    if command:
                        commands.append(command)
                    command = []
                else:
                    command.append(word)
    return commands


def strip_env(command: list[str]) -> list[str]:
    """The command without leading `NAME=value` assignments."""
    while command and re.fullmatch(r"[A-Z_][A-Z0-9_]*=.*", command[0]):
        command = command[1:]
    return command


def param_exists(params: dict, dotted: str) -> bool:
    node = params
    for part in dotted.split("."):
        if not isinstance(node, dict) or part not in node:
            return False
        node = node[part]
    return True


def check_dvc(argv: list[str]) -> None:
    from dvc.cli import DvcParserError, parse_args

    try:
        args = parse_args(argv)
    except (DvcParserError, SystemExit) as err:
        raise AssertionError(f"dvc {shlex.join(argv)}: DVC cannot parse it ({err!r})") from err
    params = read_yaml(REPO / "params.yaml")
    for assignment in getattr(args, "set_param", None) or []:
        key = assignment.split("=", 1)[0].split(":")[-1]
        assert param_exists(params, key), f"dvc {shlex.join(argv)}: no param {key} in params.yaml"
    stages = read_yaml(REPO / "dvc.yaml")["stages"]
    for target in getattr(args, "targets", None) or []:
        if not target.endswith((".yaml", ".dvc")):
            name = target.split("@")[0]
            assert name in stages, f"dvc {shlex.join(argv)}: dvc.yaml has no stage {name}"


def check_python(argv: list[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    if argv[0] == "-m":
        module, args = argv[1], argv[2:]
        if module in ("pytest", "pip"):
            return

        def run() -> None:
            runpy.run_module(module, run_name="__main__", alter_sys=True)

        name = module
    else:
        path, args = REPO / argv[0], argv[1:]
        assert path.is_file(), f"python {argv[0]}: no such script"

        def run() -> None:
            runpy.run_path(str(path), run_name="__main__")

        name = argv[0]
    original = argparse.ArgumentParser.parse_args

    def parse_then_stop(self, args=None, namespace=None):  # type: ignore[no-untyped-def]
        original(self, args, namespace)
        raise Parsed

    with monkeypatch.context() as patch:
        patch.setattr(argparse.ArgumentParser, "parse_args", parse_then_stop)
        patch.setattr(sys, "argv", [name, *args])
        patch.chdir(make_inputs(argv, args, tmp_path))
        try:
            run()
        except Parsed:
            return
        except SystemExit as err:
            raise AssertionError(f"python {shlex.join(argv)}: its arguments do not parse") from err
    raise AssertionError(f"python {shlex.join(argv)}: finished without parsing arguments")


def check(command: list[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    command = strip_env(command)
    program, argv = command[0], command[1:]
    if program == "make":
        makefile = (REPO / "Makefile").read_text(encoding="utf-8")
        for target in argv:
            assert re.search(rf"^{re.escape(target)}:", makefile, re.M), f"make {target}"
    elif program == "dvc":
        check_dvc(argv)
    elif program in ("python", "python3"):
        check_python(argv, monkeypatch, tmp_path)
    elif program == "torchrun":
        script = next(i for i, word in enumerate(argv) if word.endswith(".py"))
        check_python(argv[script:], monkeypatch, tmp_path)
    elif program == "bash":
        assert (REPO / argv[0]).is_file(), f"bash {argv[0]}: no such script"
    else:
        assert program in SKIPPED, f"{shlex.join(command)}: no check for {program} commands"


def test_readme_commands_are_current(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    commands = readme_commands((REPO / "README.md").read_text(encoding="utf-8"))
    assert any(c[:1] == ["dvc"] for c in commands), "the README shows no dvc command"
    for i, command in enumerate(commands):
        check(command, monkeypatch, tmp_path / str(i))


def test_a_stale_command_fails(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The checks catch a renamed param, a removed option, an unknown stage and a make target."""
    stale = [
        ["dvc", "exp", "run", "-S", "train.learning_rat=1e-5"],
        ["dvc", "repro", "no_such_stage"],
        ["dvc", "metrics", "diff", "--no-such-flag"],
        ["python", "stages/phrases.py", "--no-such-option", "x"],
        ["make", "no-such-target"],
        ["rm", "-rf", "data"],
    ]
    for command in stale:
        with pytest.raises(AssertionError):
            check(command, monkeypatch, tmp_path)


def results_table() -> str:
    """The leaderboard's results table (the first table of reports/leaderboard.md, which
    `python -m sentemb.review.leaderboard` writes from the experiments)."""
    text = (REPO / "reports" / "leaderboard.md").read_text(encoding="utf-8").splitlines()
    start = next(i for i, line in enumerate(text) if line.startswith("|"))
    end = next(i for i in range(start, len(text) + 1) if i == len(text) or not text[i])
    return "\n".join(text[start:end])


def test_readme_results_are_the_leaderboard() -> None:
    """The README's table is the leaderboard's (no number typed by hand)."""
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    assert results_table() in readme, f"README.md lacks the current table:\n{results_table()}"


def stage_times() -> str:
    """The default run's time table (benchmarks/README.md): each stage of dvc.yaml with the
    `seconds` it recorded (a per-seed stage's from stage summary's committed record, the
    others' from their committed JSON outputs, summed as `make repro`'s progress line does), a
    foreach as the mean and the range of its runs. A stage without seconds fails the test."""
    from dvc.repo import Repo
    from dvc.repo.reproduce import collect_stages, get_active_graph, plan_repro

    from sentemb.progress import kind, recorded_seconds, stage_record

    record = stage_record(REPO / "plots" / "summary" / "seconds.json")
    times: dict[str, list[float]] = {}
    with Repo(str(REPO)) as repo:  # in the order `dvc repro` runs them
        graph = get_active_graph(repo.index.graph)
        for stage in plan_repro(graph, collect_stages(repo, ["dvc.yaml"])):
            seconds = record.get(stage.addressing)
            if seconds is None:
                outputs = [Path(o.fs_path) for o in stage.outs if o.fs_path.endswith(".json")]
                seconds = recorded_seconds(outputs)
            assert seconds is not None, f"{stage.addressing}: no seconds recorded"
            times.setdefault(kind(stage.addressing), []).append(seconds)
    lines = ["| stage | runs | s per run (range) | s in all |", "|---|---:|---:|---:|"]
    for name, values in times.items():
        if len(values) == 1:
            lines.append(f"| `{name}` | 1 | {values[0]:.0f} | {values[0]:.0f} |")
        else:
            spread = f"{sum(values) / len(values):.0f} ({min(values):.0f}-{max(values):.0f})"
            lines.append(f"| `{name}@S` | {len(values)} | {spread} | {sum(values):.0f} |")
    total = sum(map(sum, times.values()))
    lines.append(f"| all stages | | | {total:.0f} ({total / 60:.0f} min) |")
    return "\n".join(lines)


def test_benchmarks_stage_times_are_the_committed_metrics() -> None:
    """benchmarks/README.md's time table is the `seconds` of the committed metrics files."""
    readme = (REPO / "benchmarks" / "README.md").read_text(encoding="utf-8")
    assert stage_times() in readme, f"benchmarks/README.md lacks the time table:\n{stage_times()}"


def test_benchmarks_budget_is_the_committed_metrics() -> None:
    """benchmarks/README.md's time budget is `benchmarks/budget.py` on the committed metrics."""
    script = runpy.run_path(str(REPO / "benchmarks" / "budget.py"))
    expected = script["table"](script["budget"](REPO))
    readme = (REPO / "benchmarks" / "README.md").read_text(encoding="utf-8")
    assert expected in readme, f"benchmarks/README.md lacks the current budget:\n{expected}"


@pytest.mark.parametrize("floor", ["floor.json", "floor_avx2.json"])
def test_benchmarks_floor_is_its_json(floor: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """benchmarks/README.md's compute floors are `benchmarks/floor.py`'s tables on their JSONs."""
    monkeypatch.syspath_prepend(str(REPO / "benchmarks"))  # it imports train_step beside it
    script = runpy.run_path(str(REPO / "benchmarks" / "floor.py"))
    result, compute = (
        json.loads((REPO / "benchmarks" / name).read_text(encoding="utf-8"))
        for name in (floor, "eval_compute.json")
    )
    expected = script["table"](result, compute)
    readme = (REPO / "benchmarks" / "README.md").read_text(encoding="utf-8")
    assert expected in readme, f"benchmarks/README.md lacks the compute floor:\n{expected}"


@pytest.mark.parametrize(
    ("script", "result"),
    [
        ("eval_compute.py", "eval_compute.json"),
    ],
)
def test_benchmarks_table_is_its_json(
    monkeypatch: pytest.MonkeyPatch, script: str, result: str
) -> None:
    """benchmarks/README.md's compute table and GPU table are their scripts' on their JSON."""
    monkeypatch.syspath_prepend(str(REPO / "benchmarks"))  # they import train_step beside them
    table = runpy.run_path(str(REPO / "benchmarks" / script))["table"]
    expected = table(json.loads((REPO / "benchmarks" / result).read_text(encoding="utf-8")))
    readme = (REPO / "benchmarks" / "README.md").read_text(encoding="utf-8")
    assert expected in readme, f"benchmarks/README.md lacks {script}'s table:\n{expected}"
