"""Where the default run's time goes, from the `seconds` of the committed metrics files, and
what issue 17's targets (whole run <= 45 min, evaluating a model <= 1.0x training it) ask of it.

    python benchmarks/budget.py        # the table of benchmarks/README.md (a test keeps it current)

Per trained run (one seed; stage summary's record plots/summary/seconds.json): train, then its
evaluation: refine, each suite of evaluate, analyze. The other stages (reference,
refine_reference, analyze_reference, baseline, summary, download, phrases) are "the rest".
Stage work only: Python's start-up and DVC's hashing add about 7 s per stage to the wall clock.
A view of committed files, not a measurement: it writes nothing.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from statistics import mean

from sentemb.progress import recorded_seconds

ROOT = Path(__file__).resolve().parent.parent
EVALUATION = {
    "refine": ["refine.json"],
    "evaluate: sts": ["sts.json"],
    "evaluate: transfer": ["transfer.json"],
    "evaluate: chinese": ["chinese.json"],
    "evaluate: retrieval": ["retrieval.json"],
    "analyze": ["analysis.json"],
}
TARGET_SECONDS = 45 * 60


def budget(root: Path) -> dict:
    """Mean seconds per trained run of training and of each evaluation part, the rest, and the
    training time per run at which the 45 min would hold with evaluation at 1.0x training: the
    runs' seconds from stage summary's record, the other stages' from their metrics files."""
    records = json.loads((root / "plots" / "summary" / "seconds.json").read_text())
    per_seed: dict[str, dict[str, float]] = {}
    for r in records:
        if "@" in r["stage"]:
            per_seed.setdefault(r["stage"].split("@")[1], {})[r["file"]] = r["seconds"]
    runs = list(per_seed.values())
    train = [run["train"] for run in runs]
    parts = {
        name: mean(sum(run[f.removesuffix(".json")] for f in files) for run in runs)
        for name, files in EVALUATION.items()
    }
    evaluation = sum(parts.values())
    summary = sum(r["seconds"] for r in records if "@" not in r["stage"])
    metrics = root / "metrics"  # its runs/ are the per-seed files the record copies
    files = [f for f in metrics.rglob("*.json") if f.relative_to(metrics).parts[0] != "runs"]
    rest = (recorded_seconds(files) or 0.0) + summary
    total = rest + sum(train) + evaluation * len(runs)
    # 45 min = n x train + n x evaluation (= train) + the rest, the reference row scaled alike
    reference = recorded_seconds(list((root / "metrics" / "reference").glob("*.json"))) or 0.0
    fixed = rest - reference
    models = len(runs) + 1  # the trained runs and the untrained reference
    return {
        "runs": len(runs),
        "train": mean(train),
        "evaluation_parts": parts,
        "evaluation": evaluation,
        "evaluation_over_train": evaluation / mean(train),
        "rest": rest,
        "reference": reference,
        "total": total,
        "train_alone_share_of_target": sum(train) / TARGET_SECONDS,
        "train_for_target": (TARGET_SECONDS - fixed) / (len(runs) + models),
    }


def table(result: dict) -> str:
    """The markdown table and the sentence under it, as benchmarks/README.md shows them."""
    train = result["train"]
    lines = [
        "| part | s per run | x training |",
        "|---|---:|---:|",
        f"| train | {train:.0f} | 1.00 |",
    ]
    for name, value in result["evaluation_parts"].items():
        lines.append(f"| {name} | {value:.0f} | {value / train:.2f} |")
    ratio = result["evaluation_over_train"]
    lines.append(f"| evaluation, all parts | {result['evaluation']:.0f} | {ratio:.2f} |")
    lines.append("")
    lines.append(
        f"{result['runs']} runs; the other stages {result['rest']:.0f} s (the reference row "
        f"{result['reference']:.0f} s); all stages {result['total']:.0f} s. Training alone is "
        f"{result['train_alone_share_of_target']:.2f}x the 45 min; with evaluation at 1.0x "
        f"training, 45 min needs training <= {result['train_for_target']:.0f} s per run."
    )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--root", type=Path, default=ROOT, help="a workspace with run results")
    print(table(budget(parser.parse_args().root)))


if __name__ == "__main__":
    main()
