"""The Markdown result tables."""

from __future__ import annotations

import json
from pathlib import Path

from sentemb.report import refine_table, table


def test_table_rows_and_missing_values(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "chinese.json").write_text(json.dumps({"ATEC": 12.345, "avg": 1.0}))
    text = table("chinese", {"mine": tmp_path / "a", "absent": tmp_path / "b"})
    assert text.splitlines() == [
        "| model | ATEC | BQ | LCQMC | PAWSX | STS-B | avg |",
        "|---|---:|---:|---:|---:|---:|---:|",
        "| mine | 12.35 | - | - | - | - | 1.00 |",
    ]


def test_refined_rows_follow_their_model(tmp_path: Path) -> None:
    plain = {"ATEC": 10.0, "avg": 10.0}
    metrics = {**plain, "repal": {"ATEC": 11.0, "avg": 11.0}, "skipped": {"BQ": "absent"}}
    (tmp_path / "chinese.json").write_text(json.dumps(metrics))
    rows = table("chinese", {"m": tmp_path}).splitlines()[2:]
    assert rows == [
        "| m | 10.00 | - | - | - | - | 10.00 |",
        "| m + RepAL | 11.00 | - | - | - | - | 11.00 |",
    ]
    scopes = {"fit_on": "corpus", "english": {"lambda1": 0.1, "lambda2": 1.2, "dev/none": 80.0}}
    (tmp_path / "refine.json").write_text(json.dumps(scopes))
    assert refine_table({"m": tmp_path}).splitlines()[2] == (
        "| m: english | 0.10 | 1.20 | 80.00 | - | - | - | - | - |"
    )
