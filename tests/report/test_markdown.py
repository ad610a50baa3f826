"""The Markdown summary: mean ± std cells, refined rows after their method, reference rows, and
the paired rows with their verdict."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from sentemb import precision
from sentemb.config import load_params
from sentemb.report.markdown import markdown, protocol, spread, suite_table

ROOT = Path(__file__).resolve().parents[2]


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


def test_own_sets_table_has_a_column_per_set_and_none_without_sets() -> None:
    """eval.own's table: each set's headline as a column, in the metrics' order (no avg); no
    table at all when eval.own lists no set."""
    stats = {"mean": 10.0, "std": 1.0, "n": 2}
    methods = {"simcse": {"own": {"bio": stats, "faq": stats}}}
    singles = {"TF-IDF": {"own": {"bio": 1.0, "faq": 2.0, "faq/map": 2.0, "seconds": 3.0}}}
    assert suite_table("own", methods, singles).splitlines() == [
        "| model | bio | faq |",
        "|---|---:|---:|",
        "| simcse | 10.00 ± 1.00 | 10.00 ± 1.00 |",
        "| TF-IDF | 1.00 | 2.00 |",
    ]
    assert suite_table("own", {"simcse": {}}, {"TF-IDF": {"own": {"seconds": 3.0}}}) == ""


@pytest.mark.parametrize(
    ("cells", "align"),
    [
        (["76.32 ± 0.13", "-", "78.88"], "---:"),
        (["+0.60 (significant)", "[+0.36, +0.86]", "−0.05", "12%"], "---:"),
        (["-", ""], "---:"),  # a column of numbers, all missing
        (["significant", "noise"], "---"),
        (["3045b3f", "9d7f0d4 (brisk-feds)"], "---"),  # commits start with digits, are text
        (["wiki, 11,915 sentences", "-"], "---"),
    ],
)
def test_numbers_align_right_and_text_left(cells: list[str], align: str) -> None:
    table = markdown(["model", "column"], [["m", cell] for cell in cells]).splitlines()
    assert table[1] == f"|---|{align}|"


@pytest.mark.parametrize("name", ["fix|x", "a\nb", "|", "plain"])
def test_a_name_with_a_bar_or_line_break_keeps_the_table_s_columns(name: str) -> None:
    """A branch or experiment name becomes a column or row name: every line of the table keeps
    its 3 cells (a bar escaped as GitHub's Markdown reads it, a line break made a space)."""
    lines = markdown(["row", name, "b"], [[name, "1.0", "2.0"]]).splitlines()
    assert len(lines) == 3
    assert all(len(re.split(r"(?<!\\)\|", line)) == 3 + 2 for line in lines), lines


@pytest.mark.parametrize(
    ("native", "trained_in", "encoding", "said", "bf16_in"),
    [
        (False, "fp32", "auto", "training auto (fp32), encoding auto (fp32)", None),
        (
            True,
            "bf16",
            "auto",
            "training auto (bf16), encoding auto (bf16)",
            "training and encoding",
        ),
        (True, "fp16", "auto", "training auto (fp16), encoding auto (bf16)", "encoding"),
        (True, "bf16", "fp32", "training auto (bf16), encoding fp32 (fp32)", "training"),
        (False, "bf16/fp32", "auto", "training auto (bf16/fp32), encoding auto (fp32)", "training"),
    ],
)
def test_the_protocol_says_the_precision_each_part_ran_in(
    monkeypatch: pytest.MonkeyPatch,
    native: bool,
    trained_in: str,
    encoding: str,
    said: str,
    bf16_in: str | None,
) -> None:
    """`auto` is bf16 or fp32 by the CPU (fp16 on a GPU without bf16): the report says what
    training ran in (its train.json) and what encoding runs in here, and calls bf16 a
    deviation only where it ran."""
    monkeypatch.setattr(precision, "native_bf16", lambda: native)
    params = load_params(ROOT / "params.yaml")
    params["model"]["precision"] = encoding
    choices, deviations = protocol(params, 11_915, "corpus", trained_in)
    assert choices["precision"] == said
    found = [d for d in deviations if "bf16" in d]
    deviation = f"bf16 autocast in {bf16_in}; the papers use fp32/fp16"
    assert found == ([] if bf16_in is None else [deviation])
