"""dvc.yaml: every stage lists as deps the source files its script imports, so a code change
re-runs exactly the stages it can affect; dvc.lock matches the code and params it was run with."""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from collections import defaultdict
from pathlib import Path, PurePosixPath

import pytest
import yaml

from sentemb import registry
from sentemb.config import read_yaml
from sentemb.registry import METHODS, Registry

from support import REPO
from support.repos import git_dvc_repo

SRC = REPO / "src"
# A package data file a module reads: resources.files("sentemb.data").joinpath("checksums.json")
RESOURCE_READ = re.compile(r'resources\.files\("([\w.]+)"\)\.joinpath\("([^"]+)"\)')


def module_file(name: str) -> Path | None:
    """The file of module `name` under src/, if it is one of ours."""
    base = SRC / name.replace(".", "/")
    for path in (base.with_suffix(".py"), base / "__init__.py"):
        if path.is_file():
            return path
    return None


def imported_files(script: Path) -> set[Path]:
    """Our source files `script` imports, transitively (static: every import statement)."""
    seen: set[Path] = set()
    todo = [script]
    while todo:
        tree = ast.parse(todo.pop().read_text(encoding="utf-8"))
        names = []
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names += [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names += [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
        for name in names:
            parts = name.split(".")
            for end in range(2, len(parts) + 1):  # parent packages are imported too
                path = module_file(".".join(parts[:end]))
                if path is not None and path not in seen:
                    seen.add(path)
                    todo.append(path)
    return seen


def stages() -> dict[str, dict]:
    spec = yaml.safe_load((REPO / "dvc.yaml").read_text())["stages"]
    return {name: stage.get("do", stage) for name, stage in spec.items()}


def registries_read(path: Path) -> list[Registry]:
    """The registries of `sentemb.registry` that `path` reads (any use but `.register` and
    `.names`, which import nothing): reading one imports every module of its package."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    imported = {
        alias.asname or alias.name: getattr(registry, alias.name)
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.module == "sentemb.registry"
        for alias in node.names
        if isinstance(getattr(registry, alias.name), Registry)
    }
    naming = {
        id(node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute) and node.attr in ("register", "names")
    }
    return [
        imported[node.id]
        for node in ast.walk(tree)
        if isinstance(node, ast.Name) and node.id in imported and id(node) not in naming
    ]


def used_files(script: Path) -> set[Path]:
    """`imported_files` and, for a registry read (`registries_read`), every module of its
    package and what they import; and the package data files they read
    (`resources.files(...).joinpath(...)`)."""
    used = imported_files(script) | {script}
    todo = list(used)
    while todo:
        path = todo.pop()
        found: set[Path] = set()
        for read in registries_read(path):
            for name in read.names():  # a module, or a package (`methods/paser/`)
                module = module_file(f"{read.package}.{name}")
                assert module is not None, f"{read.package}.{name}: no source file"
                found |= {module, *imported_files(module)}
        todo += sorted(found - used)
        used |= found
    return used | {
        SRC / package.replace(".", "/") / name
        for path in used
        for package, name in RESOURCE_READ.findall(path.read_text(encoding="utf-8"))
    }


def code_deps(script: Path) -> set[str]:
    """The fewest deps that cover `used_files`: a folder whose every source file is used stands
    for them (so a new file there is a dep at once), other files are listed one by one."""
    used = used_files(script)
    deps = set(used)
    folders = {folder for path in used for folder in path.parents if SRC in folder.parents}
    for folder in sorted(folders, key=lambda f: len(f.parts)):  # outermost first
        files = {p for p in folder.rglob("*") if p.suffix in (".py", ".json") and p.is_file()}
        if files <= used and not any(dep.is_dir() and dep in folder.parents for dep in deps):
            deps = {dep for dep in deps if folder not in dep.parents} | {folder}
    return {str(dep.relative_to(REPO)) for dep in deps}


@pytest.mark.parametrize("name", sorted(stages()))
def test_stage_deps_are_exactly_the_source_files_its_script_uses(name: str) -> None:
    """Every source file a stage's script imports is a dep (a change to it re-runs the stage),
    and no other source file is (a change to it does not): editing the transfer suite does not
    re-run training."""
    stage = stages()[name]
    script = REPO / stage["cmd"].split()[1]
    listed = {dep for dep in stage["deps"] if dep.startswith(("src/", "stages/"))}
    wanted = code_deps(script)
    assert not wanted - listed, f"{name}: dvc.yaml does not list {sorted(wanted - listed)}"
    assert not listed - wanted, f"{name}: dvc.yaml lists {sorted(listed - wanted)}, not used"


def test_each_registered_section_is_a_param_of_the_stage_that_reads_it() -> None:
    """A method's params section is among the `train` stage's params (forgotten, a changed
    `dclr.*` would never re-run training); refinements and suites are read through the whole
    `refine` and `eval` sections, so a new one needs no entry."""
    params = {name: set(stage.get("params", [])) for name, stage in stages().items()}
    missing = sorted(set(METHODS.names()) - params["train"])
    assert not missing, f"dvc.yaml: the train stage's params lack {missing}"
    for stage in ("refine", "refine_reference"):
        assert "refine" in params[stage]
    for stage in ("evaluate", "reference", "baseline"):
        assert "eval" in params[stage]


def evaluation_outputs(stage: dict) -> tuple[list[str], list[str]]:
    """The JSON and the predictions files a stage of dvc.yaml lists as outputs, by file name."""
    names = [PurePosixPath(next(iter(e)) if isinstance(e, dict) else e).name for e in stage["outs"]]
    return [n for n in names if n.endswith(".json")], [n for n in names if n.endswith(".npz")]


@pytest.mark.parametrize("name", ["evaluate", "reference", "baseline"])
def test_evaluation_stages_list_one_output_per_declared_suite(name: str) -> None:
    """dvc.yaml names no suite but in the outputs of the stages that score them all: one metrics
    file per suite of `SUITES` (and a predictions file per pair suite where predictions are
    kept), so a new suite fails here until dvc.yaml lists its files."""
    from sentemb.evaluate import keeping_pairs
    from sentemb.registry import SUITES

    stage = stages()[name]
    assert "--suites" not in stage["cmd"]  # every suite: the stage's default
    metrics, outs = evaluation_outputs(stage)
    assert metrics == [f"{suite}.json" for suite in SUITES]
    if "--predictions-dir" in stage["cmd"]:
        assert outs == [f"{suite}.npz" for suite in keeping_pairs()]
    assert "eval" in stage["params"]


def test_repro_runs_chain_by_chain() -> None:
    """DVC's own plan for `dvc repro`: the first run's chain (train, refine, evaluate) finishes
    before the second training starts, the reference rows come after every run's evaluation
    and the summary is last."""
    from dvc.repo import Repo
    from dvc.repo.reproduce import collect_stages, get_active_graph, plan_repro

    with Repo(str(REPO)) as repo:
        graph = get_active_graph(repo.index.graph)
        plan = [s.addressing for s in plan_repro(graph, collect_stages(repo, ["dvc.yaml"]))]
    runs = read_yaml(REPO / "params.yaml")["seeds"]
    assert len(plan) == len(set(plan)) == len(stages()) - 4 + 4 * len(runs)  # 4 per seed
    first, second = runs[0], runs[1]
    chain = [f"train@{first}", f"refine@{first}", f"evaluate@{first}"]
    assert plan[:6] == ["download", "corpus", "phrases", *chain]
    assert plan.index(f"evaluate@{first}") < plan.index(f"train@{second}")
    for run in runs:  # each chain in turn
        at = plan.index(f"train@{run}")
        assert plan[at : at + 3] == [f"train@{run}", f"refine@{run}", f"evaluate@{run}"]
    last_evaluation = max(plan.index(f"evaluate@{run}") for run in runs)
    for single in ("refine_reference", "reference", "baseline", "analyze_reference"):
        assert plan.index(single) > last_evaluation
    assert plan[-1] == "summary"


def test_bytecode_is_not_a_dependency() -> None:
    """Python writes __pycache__/ into the source folders that are deps; DVC must not hash it."""
    pyc = "src/sentemb/methods/__pycache__/base.cpython-311.pyc"
    result = subprocess.run(
        [sys.executable, "-m", "dvc", "check-ignore", pyc],
        cwd=REPO,
        capture_output=True,
        text=True,
        env={**os.environ, "DVC_NO_ANALYTICS": "1"},
    )
    assert result.returncode == 0, result.stdout + result.stderr


def stale_stages(root: Path) -> dict[str, list[str]]:
    """Per stage of `root`'s dvc.yaml whose code or params differ from dvc.lock, what differs:
    the command, a params value, or a dep that no stage writes (source files, each hashed as DVC
    hashes it: md5 of the bytes, of the listing for a folder). Deps that are outputs of stages
    (data, models, metrics: absent in a clean clone) are left out; they follow from these. An
    entry of dvc.lock that no stage defines any more (a removed stage or seed: DVC keeps it) is
    stale too."""
    from dvc.repo import Repo

    lock = yaml.safe_load((root / "dvc.lock").read_text()) if (root / "dvc.lock").exists() else {}
    locked = set((lock or {}).get("stages", {}))
    with Repo(str(root)) as repo:
        stages = list(repo.index.stages)
        written = [PurePosixPath(out.def_path) for stage in stages for out in stage.outs]
        defined = {stage.name for stage in stages}
        stale = {name: [REMOVED] for name in sorted(locked - defined)}
        for stage in stages:
            if stage.name not in locked:
                stale[stage.name] = ["not in dvc.lock"]
                continue
            changes = ["command changed"] if stage.changed_stage() else []
            for dep in stage.deps:
                path = PurePosixPath(dep.def_path)
                if any(path == o or o in path.parents or path in o.parents for o in written):
                    continue
                for state in dep.workspace_status().values():
                    if isinstance(state, dict):  # params: {name: modified | new | deleted}
                        changes += [f"{dep.def_path} {k} {v}" for k, v in state.items()]
                    else:
                        changes.append(f"{dep.def_path} {state}")
            if changes:
                stale[stage.name] = changes
    return stale


REMOVED = "no stage of dvc.yaml: delete its entry from dvc.lock"


def stale_report(stale: dict[str, list[str]]) -> str:
    """One line per change with the stages it concerns (the first five named)."""
    stages_of: dict[str, list[str]] = defaultdict(list)
    for stage, changes in stale.items():
        for change in changes:
            stages_of[change].append(stage)
    lines = [
        f"dvc.lock is stale for {len(stale)} stage(s): run `dvc repro` and commit dvc.lock with"
        " the change that made it stale"
    ]
    for change, names in stages_of.items():
        more = f", ... ({len(names)} stages)" if len(names) > 5 else ""
        lines.append(f"  {change}: {', '.join(names[:5])}{more}")
    return "\n".join(lines)


def test_lock_matches_code_and_params() -> None:
    """A change to a stage's code or params is committed with the dvc.lock it produces, so a
    fresh clone's `dvc repro` reuses the committed results instead of recomputing them."""
    stale = stale_stages(REPO)
    assert not stale, stale_report(stale)


STEP = """
import json, sys
from pathlib import Path
Path(sys.argv[2]).write_text(json.dumps({"n": len(Path(sys.argv[1]).read_text())}))
"""


@pytest.mark.slow
def test_stale_lock_check_names_each_change(tmp_path: Path) -> None:
    """The check on a tiny pipeline: fresh after `dvc repro` even with the data outputs gone
    (a clean clone); then a code edit, a params edit, a changed command, a new stage and a removed
    one are each reported with the stage they concern."""
    env = {**os.environ, "DVC_NO_ANALYTICS": "1"}

    def dvc(*args: str) -> None:
        subprocess.run([sys.executable, "-m", "dvc", *args], cwd=tmp_path, env=env, check=True)

    git_dvc_repo(tmp_path)
    (tmp_path / "lib").mkdir()
    (tmp_path / "lib" / "step.py").write_text(STEP)
    (tmp_path / "params.yaml").write_text("step:\n  size: 1\n  other: 2\n")
    spec = {
        "stages": {
            "make": {"cmd": "echo abc > data.txt", "outs": ["data.txt"]},
            "count": {
                "cmd": "python lib/step.py data.txt count.json",
                "deps": ["data.txt", "lib"],
                "params": ["step.size"],
                "metrics": [{"count.json": {"cache": False, "persist": True}}],
            },
            "gone": {"cmd": "echo x > gone.txt", "outs": ["gone.txt"]},
        }
    }
    (tmp_path / "dvc.yaml").write_text(yaml.safe_dump(spec))
    dvc("repro", "-q")
    (tmp_path / "data.txt").unlink()
    assert stale_stages(tmp_path) == {}

    (tmp_path / "lib" / "step.py").write_text(STEP + "\n")
    (tmp_path / "params.yaml").write_text("step:\n  size: 3\n  other: 4\n")
    spec["stages"]["make"]["cmd"] += " "
    spec["stages"]["new"] = {"cmd": "true", "deps": ["lib"], "outs": ["new.txt"]}
    del spec["stages"]["gone"]
    (tmp_path / "dvc.yaml").write_text(yaml.safe_dump(spec))
    stale = stale_stages(tmp_path)
    assert stale == {
        "gone": [REMOVED],
        "make": ["command changed"],
        "count": ["lib modified", "params.yaml step.size modified"],
        "new": ["not in dvc.lock"],
    }
    report = stale_report(stale)
    assert "dvc.lock is stale for 4 stage(s)" in report and "  lib modified: count" in report
    assert f"  {REMOVED}: gone" in report
