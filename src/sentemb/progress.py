"""`dvc repro` with one progress line for the whole run (what `make repro` runs).

    python -m sentemb.progress                  # dvc repro
    python -m sentemb.progress train@42         # any `dvc repro` arguments, passed on

Before DVC starts, the plan is worked out with DVC's own API, as `dvc repro` does it: the stages
it visits (`plan_repro`, dependencies first) of which those that changed, and every one
downstream of them, will run (`--force`: all). DVC's output is passed through; when DVC starts a
stage, a line says where the run is:

    12:03:41 [3/12] train@42 · elapsed 12:03 · ~31 min left

The time left adds up each stage's `seconds` recorded by its last run (the `seconds` that
`RunLogger.write_metrics` puts in every metrics file of the workspace, else stage `summary`'s
committed record of them); a stage without one counts the mean of its kind (`train@*`), else of
all stages, measured in this run or recorded before. A stage DVC
finds unchanged (or restores from its run cache) leaves the plan. The exit status is DVC's.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

from sentemb.clock import SECONDS, time_left

SECONDS_RECORD = Path("plots/summary/seconds.json")  # written by stage `summary`
STARTED = re.compile(r"^Running stage '(?P<stage>[^']+)':")
SKIPPED = re.compile(r"^Stage '(?P<stage>[^']+)' (didn't change|is cached)")


def clock(seconds: float) -> str:
    """`m:ss`, or `h:mm:ss` from an hour on."""
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


def kind(stage: str) -> str:
    """`train@42` -> `train`: stages of one foreach take about as long."""
    return stage.split("@")[0]


@dataclass
class Progress:
    """The planned stages still to run, what they took last time, and what this run measured."""

    plan: list[str]
    recorded: dict[str, float] = field(default_factory=dict)
    started: float = field(default_factory=time.monotonic)
    measured: dict[str, float] = field(default_factory=dict)
    done: int = 0
    current: tuple[str, float] | None = None

    def estimate(self, stage: str) -> float | None:
        """The stage's recorded seconds, else the mean of its kind, else of all; None if none."""
        if stage in self.recorded:
            return self.recorded[stage]
        known = {**self.recorded, **self.measured}
        same = [s for name, s in known.items() if kind(name) == kind(stage)]
        pool = same or list(known.values())
        return sum(pool) / len(pool) if pool else None

    def left(self) -> float | None:
        """Seconds left for the current stage and those after it (None: nothing to go by)."""
        remaining = self.plan[self.done - 1 :] if self.current else self.plan[self.done :]
        estimates = [self.estimate(stage) for stage in remaining]
        if any(e is None for e in estimates):
            return None
        return sum(e for e in estimates if e is not None)

    def finish_current(self, now: float) -> None:
        if self.current is not None:
            stage, since = self.current
            self.measured[stage] = now - since
            self.current = None

    def start(self, stage: str) -> str:
        """Record that DVC started `stage`; the progress line."""
        now = time.monotonic()
        self.finish_current(now)
        if stage in self.plan[self.done :]:
            self.plan.remove(stage)
            self.plan.insert(self.done, stage)
        else:  # DVC runs a stage the plan did not foresee
            self.plan.insert(self.done, stage)
        self.done += 1
        self.current = (stage, now)
        left = self.left()
        eta = "time left unknown (no earlier run recorded)"
        if left is not None:
            eta = time_left(left)
        stamp = time.strftime("%H:%M:%S")
        elapsed = clock(now - self.started)
        return f"{stamp} [{self.done}/{len(self.plan)}] {stage} · elapsed {elapsed} · {eta}"

    def skip(self, stage: str) -> None:
        """DVC found `stage` unchanged (or restored it from the run cache): out of the plan."""
        self.finish_current(time.monotonic())
        if stage in self.plan[self.done :]:
            self.plan.remove(stage)


def follow(command: Sequence[str], progress: Progress, out: TextIO) -> int:
    """Run `command` (dvc repro), pass its output on and print a progress line at each stage;
    DVC's exit status (130 after Ctrl-C)."""
    process = subprocess.Popen(command, stdout=subprocess.PIPE, text=True, bufsize=1)
    assert process.stdout is not None
    try:
        for line in process.stdout:
            out.write(line)
            if match := STARTED.match(line):
                out.write(progress.start(match["stage"]) + "\n")
            elif match := SKIPPED.match(line):
                progress.skip(match["stage"])
            out.flush()
        status = process.wait()
    except KeyboardInterrupt:  # the terminal sent SIGINT to DVC too: let it stop cleanly
        process.wait()
        return 130
    progress.finish_current(time.monotonic())
    if status == 0:
        out.write(
            f"{time.strftime('%H:%M:%S')} {progress.done} stage(s) ran in "
            f"{clock(time.monotonic() - progress.started)}\n"
        )
    return status


def recorded_seconds(metrics: Sequence[Path]) -> float | None:
    """The `seconds` of a stage's metrics files (their sum), None where none has one."""
    found = []
    for path in metrics:
        try:
            value = json.loads(path.read_text(encoding="utf-8")).get(SECONDS)
        except (OSError, ValueError, AttributeError):
            continue
        if isinstance(value, int | float) and not isinstance(value, bool):
            found.append(float(value))
    return sum(found) if found else None


def stage_record(path: Path = SECONDS_RECORD) -> dict[str, float]:
    """Each stage's seconds in stage `summary`'s committed record (a per-seed stage's outputs
    are DVC-cached: a fresh clone has the record, not the files); {} without a usable one (the
    estimates are a guide: a damaged record never stops `dvc repro`)."""
    try:
        records = json.loads(path.read_text(encoding="utf-8"))
        found: dict[str, float] = {}
        for record in records:
            seconds = float(record["seconds"])
            if not math.isfinite(seconds) or seconds < 0:
                return {}
            found[str(record["stage"])] = found.get(str(record["stage"]), 0.0) + seconds
    except (OSError, ValueError, TypeError, KeyError):
        return {}
    return found


def dvc_plan(args: Sequence[str]) -> Progress:
    """The stages `dvc repro <args>` will run here, in order, and each one's recorded seconds."""
    from dvc.repo import Repo
    from dvc.repo.reproduce import collect_stages, get_active_graph, plan_repro

    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("targets", nargs="*")
    parser.add_argument("-f", "--force", action="store_true")
    parser.add_argument("-s", "--single-item", action="store_true")
    parser.add_argument("--downstream", action="store_true")
    parser.add_argument("-p", "--pipeline", action="store_true")
    known, _ = parser.parse_known_args(list(args))
    with Repo() as repo, repo.lock:
        stages = collect_stages(repo, known.targets or ["dvc.yaml"])
        graph = get_active_graph(repo.index.graph)
        steps = stages
        if not known.single_item:
            steps = plan_repro(graph, stages, known.pipeline, known.downstream)
        running: list = []
        for stage in steps:  # dependencies first; an edge goes from a stage to its dependency
            upstream = set(graph.successors(stage)) if stage in graph else set()
            if known.force or upstream & set(running) or stage.changed():
                running.append(stage)
        recorded = stage_record()
        for stage in running:
            outputs = [Path(out.fs_path) for out in stage.outs if out.fs_path.endswith(".json")]
            seconds = recorded_seconds(outputs)
            if seconds is not None:
                recorded[stage.addressing] = seconds
    return Progress([stage.addressing for stage in running], recorded)


def main(argv: Sequence[str] | None = None) -> int:
    from dvc.exceptions import DvcException

    args = list(sys.argv[1:] if argv is None else argv)
    try:
        progress = dvc_plan(args)
    except DvcException as err:  # dvc repro says what is wrong; no plan to go by meanwhile
        print(f"warning: no progress plan ({err})", file=sys.stderr)
        progress = Progress([])
    print(
        f"{time.strftime('%H:%M:%S')} dvc repro: {len(progress.plan)} stage(s) to run",
        flush=True,
    )
    return follow(["dvc", "repro", *args], progress, sys.stdout)


if __name__ == "__main__":
    sys.exit(main())
