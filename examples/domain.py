"""A worked example, offline from the mirror alone: train on one domain's unlabelled sentences,
score on that domain's held-out pairs as an `eval.own` set (README, "Train and score on your
own data").

    python examples/domain.py --work /tmp/domain --seeds 42 43 44

The domain is image captions, STS-B's `main-captions` genre: its train pairs' sentences, without
their scores and without any sentence of the held-out pairs, are the corpus (`train.corpus`); its
dev pairs select each run's checkpoint (`train.selection`), its test pairs are the `eval.own` set
`captions`. The stage scripts run in `--work` as DVC runs them in the repository: `corpus`, then
`train` and `evaluate --suites own` per seed, and `evaluate` of the untrained model with its own
pooling (mean) and with the pooler training evaluates (`train.eval_pooler`, CLS). Prints the
table and writes `<work>/results.json`. Deviations from the default run, each a param:
`train.eval_steps: 10` (the corpus is about 40 steps long) and `train.selection: captions`.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import yaml

from sentemb.config import load_params
from sentemb.data.readers import read_lines, split_columns
from sentemb.data.sources import SENTEVAL_DIR
from sentemb.report.stats import mean_std

REPO = Path(__file__).resolve().parents[1]
GENRE = "main-captions"
OWN = {
    "name": "captions",
    "kind": "sts",
    "path": "data/own/captions-test.tsv",
    "dev": "data/own/captions-dev.tsv",
}


def genre_pairs(mirror: Path, split: str) -> list[tuple[str, str, str]]:
    """STS-B `split`'s pairs of `GENRE`: (sentence1, sentence2, score)."""
    path = mirror / SENTEVAL_DIR / "STS" / "STSBenchmark" / f"sts-{split}.csv"
    rows = []
    for lineno, line in enumerate(read_lines(path), 1):
        columns = split_columns(line, path, lineno, 7, exact=False)
        if columns[0] == GENRE:
            rows.append((columns[5], columns[6], columns[4]))
    return rows


def prepare(mirror: Path, work: Path) -> None:
    """The own set's files and the corpus: the train pairs' sentences (in first-occurrence
    order) but those of the held-out pairs (STS-B repeats sentences across its splits)."""
    held_out = set()
    for split, path in (("test", OWN["path"]), ("dev", OWN["dev"])):
        rows = genre_pairs(mirror, split)
        held_out.update(s for a, b, _ in rows for s in (a, b))
        text = "sentence1\tsentence2\tscore\n" + "".join(f"{a}\t{b}\t{y}\n" for a, b, y in rows)
        (work / path).parent.mkdir(parents=True, exist_ok=True)
        (work / path).write_text(text, encoding="utf-8")
    corpus = dict.fromkeys(s for a, b, _ in genre_pairs(mirror, "train") for s in (a, b))
    kept = [s for s in corpus if s not in held_out]
    (work / "captions.txt").write_text("".join(f"{s}\n" for s in kept), encoding="utf-8")


def write_params(work: Path, mirror: Path) -> None:
    """The repository's params with the example's corpus, own set and selection
    (`params.yaml`), and the same with the untrained model pooled as training evaluates it
    (`params-cls.yaml`)."""
    params = load_params(REPO / "params.yaml")
    params["data"]["mirror"] = str(mirror)
    params["data"]["nltk_data"] = str((REPO / params["data"]["nltk_data"]).resolve())
    params["train"].update(corpus="captions.txt", selection=OWN["name"], eval_steps=10)
    params["eval"]["own"] = [OWN]
    (work / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False), encoding="utf-8")
    params["model"]["pooler"] = params["train"]["eval_pooler"]
    cls = yaml.safe_dump(params, sort_keys=False)
    (work / "params-cls.yaml").write_text(cls, encoding="utf-8")


def stage(work: Path, script: str, *args: str, params: str = "params.yaml") -> None:
    """`stages/<script>` run in `work`; its failure stops the example with its exit code."""
    command = [sys.executable, str(REPO / "stages" / script), "--params", params, *args]
    print("$", " ".join(command[1:]), flush=True)
    env = os.environ | {"PYTHONPATH": str(REPO / "src")}
    done = subprocess.run(command, cwd=work, env=env)
    if done.returncode:
        raise SystemExit(done.returncode)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--work", type=Path, required=True, help="a new folder for every output")
    parser.add_argument("--seeds", type=int, nargs="+", default=[42, 43, 44])
    parser.add_argument("--mirror", type=Path, default=REPO / "../shared/datasets")
    args = parser.parse_args()
    work, mirror = args.work.resolve(), args.mirror.resolve()
    work.mkdir(parents=True, exist_ok=False)
    prepare(mirror, work)
    write_params(work, mirror)
    data = ("--data", str(mirror))
    stage(work, "corpus.py", *data)
    own = ("--suites", "own", *data)
    stage(work, "evaluate.py", *own, "--out-dir", "metrics/untrained")
    stage(work, "evaluate.py", *own, "--out-dir", "metrics/untrained-cls", params="params-cls.yaml")
    for seed in args.seeds:
        run = (
            f"--out models/{seed} --metrics metrics/{seed}/train.json --plots plots/{seed}"
            f" --checkpoints checkpoints/{seed} --seed {seed}"
        ).split()
        stage(work, "train.py", *run, *data, "--corpus", "data/corpus.txt")
        model = ("--model", f"models/{seed}", "--out-dir", f"metrics/{seed}")
        stage(work, "evaluate.py", *own, *model)
    report(work, args.seeds)


def report(work: Path, seeds: list[int]) -> None:
    """`<work>/results.json` and the table: the captions' test and dev Spearman x 100."""

    def read(path: str) -> dict:
        return json.loads((work / path).read_text(encoding="utf-8"))

    trained = [read(f"metrics/{seed}/own.json")["captions"] for seed in seeds]
    runs = [read(f"metrics/{seed}/train.json") for seed in seeds]
    card = read("metrics/corpus.json")
    results = {
        "corpus": {k: card[k] for k in ("read", "kept", "test_overlap")},
        "test": {
            "untrained (mean pooling)": read("metrics/untrained/own.json")["captions"],
            "untrained (CLS)": read("metrics/untrained-cls/own.json")["captions"],
            "SimCSE (CLS)": mean_std(trained),
        },
        "dev": {
            "untrained (CLS)": runs[0]["initial_dev"],
            "SimCSE (CLS)": mean_std([r["best_dev"] for r in runs]),
        },
        "seeds": {seed: {"test": t, **r} for seed, t, r in zip(seeds, trained, runs, strict=True)},
    }
    (work / "results.json").write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    print("| model | captions test | captions dev (best) |\n|---|---:|---:|")
    for name in results["test"]:
        cells = [results["test"][name], results["dev"].get(name)]
        print(f"| {name} | " + " | ".join(map(cell, cells)) + " |")


def cell(value: float | dict | None) -> str:
    """A score, `mean ± std` over seeds, or `-`."""
    if value is None:
        return "-"
    if isinstance(value, dict):
        return f"{value['mean']:.2f} ± {value['std']:.2f}"
    return f"{value:.2f}"


if __name__ == "__main__":
    main()
