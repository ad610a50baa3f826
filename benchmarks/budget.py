"""Where the default run's time goes, from the `seconds` of the committed metrics files, and
what issue 17's targets (whole run <= 45 min, evaluating a model <= 1.0x training it) ask of it.

    python benchmarks/budget.py        # the table of benchmarks/README.md (a test keeps it current)

Per trained run (metrics/runs/M-S): train, then its evaluation: refine, each suite of evaluate,
analyze. The other stages (reference, refine_reference, analyze_reference, baseline, compare,
download, phrases) are "the rest". Stage work only: Python's start-up and DVC's hashing add
about 7 s per stage to the wall clock. A view of committed files, not a measurement: it
writes nothing.
"""

from __future__ import annotations

import argparse
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


def seconds(folder: Path, files: list[str]) -> float:
    """The recorded seconds of `files` in `folder`; a file without them is an error."""
    value = recorded_seconds([folder / name for name in files])
    if value is None:
        raise SystemExit(f"{folder}: no seconds in {files}")
    return value


def budget(metrics: Path) -> dict:
    """Mean seconds per trained run of training and of each evaluation part, the rest, and the
    training time per run at which the 45 min would hold with evaluation at 1.0x training."""
    runs = sorted(p for p in (metrics / "runs").iterdir() if p.is_dir())
    train = [seconds(run, ["train.json"]) for run in runs]
    parts = {name: mean(seconds(run, files) for run in runs) for name, files in EVALUATION.items()}
    evaluation = sum(parts.values())
    total = recorded_seconds(list(metrics.rglob("*.json"))) or 0.0
    rest = total - sum(train) - evaluation * len(runs)
    # 45 min = n x train + n x evaluation (= train) + the rest, the reference row scaled alike
    reference = recorded_seconds(list((metrics / "reference").glob("*.json"))) or 0.0
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
    parser.add_argument("--metrics", type=Path, default=ROOT / "metrics")
    print(table(budget(parser.parse_args().metrics)))


if __name__ == "__main__":
    main()
