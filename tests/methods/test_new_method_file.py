"""Methods are found without a hand-kept list: every module of `sentemb.methods` is imported,
and a new method file is a trainable method with no other edit."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import sentemb

from support.training import TESTS

HERE = Path(__file__).resolve().parent

# The worked example of docs/extending.md: a method in one file, trained as it stands there.
EXTENDING = (Path(__file__).resolve().parents[2] / "docs" / "extending.md").read_text()
NEW_METHOD = textwrap.dedent(EXTENDING.split("```python\n", 1)[1].split("```", 1)[0])


def test_a_new_method_file_is_found_and_trains(tiny_model_dir: Path, tmp_path: Path) -> None:
    """A copy of the library with one file dropped into `methods/`: `method: simcse+probe`
    builds a loss (`method_loss`) that trains through the trainer and logs the new term."""
    library = tmp_path / "lib"
    shutil.copytree(
        Path(sentemb.__file__).parent,
        library / "sentemb",
        ignore=shutil.ignore_patterns("__pycache__"),
    )
    (library / "sentemb" / "methods" / "probe.py").write_text(NEW_METHOD, encoding="utf-8")
    code = (
        "from pathlib import Path; from support.training import make_job\n"
        "import sentemb.methods as m, sentemb.registry as r\n"
        f"assert m.__file__.startswith({str(library)!r}), m.__file__\n"
        f"job = make_job(Path({str(tiny_model_dir)!r}), 'simcse+probe',"
        f" Path({str(tmp_path / 'ck')!r}), max_steps=2)\n"
        "logs = []\n"
        f"job.train(Path({str(tmp_path / 'out')!r}), Path({str(tmp_path / 'ck')!r}),"
        " on_log=lambda metrics, step: logs.extend(metrics))\n"
        "from sentemb.losses import method_losses\n"
        "assert method_losses()['probe'].__name__ == 'ProbeLoss'\n"
        "print(sorted(r.METHODS), sorted(set(logs)))\n"
    )
    path = os.pathsep.join([str(library), str(TESTS)])
    result = subprocess.run(
        [sys.executable, "-c", code],
        env={**os.environ, "PYTHONPATH": path},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert "'probe'" in result.stdout and "'probe/distance'" in result.stdout, result.stdout
