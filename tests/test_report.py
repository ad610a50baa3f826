"""The Markdown summary: mean ± std cells, refined rows after their method, reference rows."""

from __future__ import annotations

from sentemb.report import paired_table, spread, suite_table


def test_cells() -> None:
    assert spread({"mean": 76.434, "std": 0.456, "n": 3}) == "76.43 ± 0.46"
    assert spread({"mean": 76.434, "std": 0.0, "n": 1}) == "76.43"
    assert spread(None) == "-"


def test_suite_table_rows() -> None:
    stats = {"mean": 10.0, "std": 1.0, "n": 2}
    methods = {
        "simcse": {"chinese": {"ATEC": stats, "avg": stats}, "chinese/repal": {"avg": stats}}
    }
    singles = {"TF-IDF": {"chinese": {"ATEC": 12.345, "avg": 1.0, "whitening": {"avg": 2.0}}}}
    assert suite_table("chinese", methods, singles).splitlines() == [
        "| model | ATEC | BQ | LCQMC | PAWSX | STS-B | avg |",
        "|---|---:|---:|---:|---:|---:|---:|",
        "| simcse | 10.00 ± 1.00 | - | - | - | - | 10.00 ± 1.00 |",
        "| simcse + RepAL | - | - | - | - | - | 10.00 ± 1.00 |",
        "| TF-IDF | 12.35 | - | - | - | - | 1.00 |",
        "| TF-IDF + whitening | - | - | - | - | - | 2.00 |",
    ]


def test_paired_rows_follow_the_tables_order_with_a_verdict() -> None:
    covers = {"difference": 0.2, "low": -0.1, "high": 0.5, "significant": False, "p_seeds": None}
    above = {"difference": 1.0, "low": 0.4, "high": 1.6, "significant": True, "p_seeds": 0.0123}
    text = paired_table({"sscl": {"sts": {"avg": covers, "STS12": above}}}, "simcse", 0.95)
    assert text.splitlines()[0].endswith("| p (t-test, seeds) | verdict |")
    assert text.splitlines()[2:] == [
        "| sscl - simcse | sts STS12 | +1.00 | [+0.40, +1.60] | 0.012 | significant |",
        "| sscl - simcse | sts avg | +0.20 | [-0.10, +0.50] | - | no significant difference |",
    ]
