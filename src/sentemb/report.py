"""Markdown tables of the metrics files, in the papers' layout: `python -m sentemb.report`."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

COLUMNS = {
    "sts": ["STS12", "STS13", "STS14", "STS15", "STS16", "STSBenchmark", "SICKRelatedness", "avg"],
    "transfer": ["MR", "CR", "SUBJ", "MPQA", "SST2", "TREC", "MRPC", "avg"],
    "chinese": ["ATEC", "BQ", "LCQMC", "PAWSX", "STS-B", "avg"],
    "retrieval": [
        "QQP/map",
        "QQP/mrr@10",
        "AskUbuntu/map",
        "AskUbuntu/mrr@10",
        "QQP-protocol/LCQMC/map",
        "QQP-protocol/BQ/map",
        "QQP-protocol/MRPC/map",
        "avg",
    ],
}
ROWS = {
    "trained": "metrics",
    "reference (untrained)": "metrics/reference",
    "TF-IDF": "metrics/tfidf",
}
REFINED = {"repal": "RepAL", "whitening": "whitening"}
REFINE_COLUMNS = {
    "λ1": "lambda1",
    "λ2": "lambda2",
    "dev": "dev/none",
    "dev RepAL": "dev/repal",
    "dev whitening": "dev/whitening",
    "cos": "cosine/none",
    "cos RepAL": "cosine/repal",
    "cos whitening": "cosine/whitening",
}


def markdown(header: list[str], rows: list[tuple[str, dict]], keys: list[str]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|---|" + "---:|" * (len(header) - 1)]
    for name, metrics in rows:
        cells = [f"{metrics[k]:.2f}" if k in metrics else "-" for k in keys]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def table(suite: str, rows: dict[str, Path]) -> str:
    """One Markdown table: a row per metrics folder, each followed by its refined rows (RepAL,
    whitening) when the file has them; `-` where a value is missing."""
    found = []
    for name, folder in rows.items():
        path = folder / f"{suite}.json"
        if path.is_file():
            metrics = json.loads(path.read_text())
            found.append((name, metrics))
            found += [
                (f"{name} + {label}", metrics[k]) for k, label in REFINED.items() if k in metrics
            ]
    return markdown(["model", *COLUMNS[suite]], found, COLUMNS[suite])


def refine_table(rows: dict[str, Path]) -> str:
    """The refine stage's choices per model and scope: λs, dev Spearman and the mean cosine of
    random dev pairs, before and after each refinement."""
    found = []
    for name, folder in rows.items():
        path = folder / "refine.json"
        if path.is_file():
            scopes = json.loads(path.read_text())
            found += [(f"{name}: {s}", v) for s, v in scopes.items() if isinstance(v, dict)]
    return markdown(["model: fitted on", *REFINE_COLUMNS], found, list(REFINE_COLUMNS.values()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--root", default=".", type=Path)
    args = parser.parse_args()
    rows = {name: args.root / folder for name, folder in ROWS.items()}
    for suite in COLUMNS:
        print(f"**{suite}**\n\n{table(suite, rows)}\n")
    print(f"**refine**\n\n{refine_table(rows)}\n")


if __name__ == "__main__":
    main()
