"""docs/extending.md, run: a copy of the library with one new file each for a method, a suite and
a refinement, and one new entry in the pooler table, goes through the library calls the stages
make (train, refine, evaluate) with no other edit; the params check accepts their sections."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import yaml

import sentemb

from support import REPO

NEW_FILES = {
    # the worked method of docs/extending.md, renamed
    "methods/dummy.py": textwrap.dedent(
        (REPO / "docs" / "extending.md").read_text().split("```python\n", 1)[1].split("```")[0]
    )
    .replace("probe", "dummy")
    .replace("Probe", "Dummy"),
    "evaluation/dummy.py": '''
"""A dummy suite: the mean norm of the vectors of a few STS-B dev sentences."""

from dataclasses import dataclass

import numpy as np

from sentemb.data.readers import read_stsb
from sentemb.evaluation.base import ENGLISH, Evaluator
from sentemb.registry import register_suite


@dataclass
class DummyConfig:
    sentences: int = 8


@register_suite("dummy", config=DummyConfig, order=4)
class DummyEvaluator(Evaluator):
    languages = (ENGLISH,)
    pairs = False
    title = "Dummy (mean norm)"
    columns = ("avg",)

    def __init__(self, root, batch_size=128, config=None):
        super().__init__(root, batch_size)
        self.config = config or DummyConfig()

    def test_sentences(self):
        return set(read_stsb(self.root, "dev").first[: self.config.sentences])

    def score(self, encoders):
        sentences = list(read_stsb(self.root, "dev").first[: self.config.sentences])
        vectors = encoders[ENGLISH].encode(sentences, self.batch_size)
        return {"avg": float(np.linalg.norm(vectors, axis=1).mean())}
''',
    "refine/dummy.py": '''
"""A dummy refinement: the fitting sentences' mean vector subtracted."""

from dataclasses import dataclass

from sentemb.refine.base import Refinement
from sentemb.registry import register_refinement


@dataclass
class DummyConfig:
    scale: float = 1.0


class Centred:
    def __init__(self, encoder, mean, scale):
        self.encoder, self.mean, self.scale = encoder, mean, scale

    def encode(self, sentences, batch_size=128):
        vectors = self.encoder.encode(sentences, batch_size)
        mean = vectors.mean(axis=0) if self.mean is None else self.mean
        return vectors - self.scale * mean


@register_refinement("dummy", config=DummyConfig)
class Dummy(Refinement):
    label = "Dummy"

    def fit(self, vectors):
        return (None if vectors is None else vectors.mean(axis=0)), {}

    def wrap(self, encoder, fit):
        return Centred(encoder, fit, self.config.scale)

    @staticmethod
    def save(fit):
        return {}, {} if fit is None else {"mean": fit}

    @staticmethod
    def load(scalars, tensors):
        return tensors.get("mean")
''',
}

# What the train, refine and evaluate stages call, in order; the pooler is the one line a new
# pooler adds to `POOLERS` in sentemb/pooling.py.
STAGES = """
import json, sys
from pathlib import Path

import sentemb
from sentemb.config import load_params
from sentemb.evaluate import evaluate_model
from sentemb.pooling import POOLERS, Pooler, masked_mean
from sentemb.refine.fit import fit_refinements
from sentemb.refine.store import save_refinement
from sentemb.training.run import prepare

POOLERS["first_layer"] = Pooler(masked_mean, layers=(1,))
assert sentemb.__file__.startswith(sys.argv[4]), sentemb.__file__
params, data, out = load_params(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3])
corpus = data / "corpus/wiki1m_for_simcse.head.txt"
prepare("simcse+dummy", 42, params, data, corpus).train(out / "model", out / "checkpoints")
model = str(out / "model")
fit = fit_refinements(params, model, model, corpus, data, out / "phrases")
save_refinement(out / "refined", fit.config, fit.fitted, fit.idf, fit.models)
results = evaluate_model(["sts", "dummy"], params, data, model, out / "refined")
print(json.dumps({suite: result.metrics for suite, result in results.items()}))
"""


def test_a_dummy_of_each_kind_runs_through_the_stage_code(
    tiny_model_dir: Path, mirror: Path, tmp_path: Path
) -> None:
    library = tmp_path / "lib"
    shutil.copytree(
        Path(sentemb.__file__).parent,
        library / "sentemb",
        ignore=shutil.ignore_patterns("__pycache__"),
    )
    for name, text in NEW_FILES.items():
        (library / "sentemb" / name).write_text(text, encoding="utf-8")
    params = yaml.safe_load((REPO / "params.yaml").read_text())
    params["data"] |= {"mirror": str(mirror)}
    params["model"] |= {"name_or_path": str(tiny_model_dir), "pooler": "first_layer"}
    params["train"] |= {"batch_size": 8, "max_steps": 2, "eval_steps": 2, "checkpoint_minutes": 0.0}
    params["train"] |= {"pooler": "first_layer", "eval_pooler": "first_layer"}
    params["dummy"] = {"weight": 0.25}  # the new method's section
    params["refine"] |= {"methods": ["dummy"], "fit_on": "eval", "suites": ["sts", "dummy"]}
    params["refine"] |= {"valid_pairs": 50, "dummy": {"scale": 1.0}}
    params["eval"]["sts"]["tasks"] = ["STSBenchmark"]
    params["eval"]["chinese"] |= {"tasks": ["PAWSX"], "max_pairs": 50}
    params["eval"]["retrieval"]["offline_sets"] = []
    params["eval"]["dummy"] = {"sentences": 4}  # the new suite's section
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(params))
    argv = [str(tmp_path / "params.yaml"), str(mirror), str(tmp_path / "out"), str(library)]
    result = subprocess.run(
        [sys.executable, "-c", STAGES, *argv],
        env={**os.environ, "PYTHONPATH": str(library)},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    scores = json.loads(result.stdout.strip().splitlines()[-1])
    assert set(scores) == {"sts", "dummy"}
    for suite in scores.values():  # plain, and after the new refinement
        assert isinstance(suite["avg"], float) and isinstance(suite["dummy"]["avg"], float)
    assert (tmp_path / "out/model/sentemb_pooler.json").read_text() == '{"pooler": "first_layer"}\n'
