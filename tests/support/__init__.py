"""What the tests share, imported as `from support.<module> import ...` (pyproject puts `tests/`
on the path); test modules never import from one another or from conftest.py.

- `stages`: run a stage script or a `python -m` command in this process as Python would, a
  stage's params, inputs and errors
- `encoders`: toy encoders that look vectors up in a table and record what they encoded
- `models`: copies of the tiny model folder with a fault or edited weights
- `training`: tiny-model trainers, the STS-B files several tests write, a process holding a
  checkpoint folder
- `services`: local stand-ins for MLflow servers and DVC remotes
- `experiments`: an experiment's results in memory and as the pipeline lays them out
"""

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
MIRROR = (REPO / ".." / "shared" / "datasets").resolve()  # the offline data mirror
