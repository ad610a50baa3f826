"""The Markdown summary (mean ± std cells, refined rows after their method, reference rows) and
the plots (one colour per method everywhere, a title and a legend on each figure)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np
import pytest
from matplotlib.colors import to_hex
from matplotlib.figure import Figure

from sentemb.config import METHOD_SECTIONS
from sentemb.report import plots
from sentemb.report.markdown import markdown, paired_table, spread, suite_table


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


def result(difference: float, low: float, high: float, p: float | None) -> dict:
    significant = low > 0 or high < 0
    return {
        "difference": difference,
        "low": low,
        "high": high,
        "significant": significant,
        "below_noise": abs(difference) < 0.01,
        "p_seeds": p,
    }


def test_paired_rows_follow_the_tables_order_with_a_verdict() -> None:
    tasks = {
        "avg": result(0.2, -0.1, 0.5, None),
        "STS12": result(1.0, 0.4, 1.6, 0.0123),
        "STS13": result(-0.004, -0.006, -0.002, 0.2),  # significant, but below the noise
    }
    text = paired_table({"sscl": {"sts": tasks}}, "simcse", 0.95)
    assert text.splitlines()[0].endswith("| p (t-test, seeds) | verdict |")
    assert text.splitlines()[2:] == [
        "| sscl - simcse | sts STS12 | +1.00 | [+0.40, +1.60] | 0.012 | significant |",
        "| sscl - simcse | sts STS13 | -0.00 | [-0.01, -0.00] | 0.200 | noise |",
        "| sscl - simcse | sts avg | +0.20 | [-0.10, +0.50] | - | no significant difference |",
    ]


def figures() -> dict[str, Figure]:
    """Every figure of the package, drawn from small data."""
    loss = [{"step": s, "loss": 1.0 / s} for s in range(1, 6)]
    dev = [{"step": s, "dev": 70.0 + s} for s in (2, 4)]
    layers = {"inter_layer": [0.9, 0.8], "token_wise": [0.1, 0.3, 0.2]}
    rng = np.random.default_rng(0)
    bins = {"0-1": rng.uniform(0.2, 0.5, 30), "1-5": rng.uniform(0.5, 0.9, 30)}
    curve = [{"lambda2": x, "bound": 2 - x, "dev": 70 + x} for x in (0.0, 0.5, 1.0)]
    return {
        "training_curves": plots.training_curves(loss, dev, "simcse"),
        "method_curves": plots.method_curves(
            {m: {"loss": loss, "dev": dev} for m in ("simcse", "sscl", "iscse+dclr")}
        ),
        "alignment_uniformity": plots.alignment_uniformity(
            [
                {"model": plots.BEFORE, "alignment": 0.1, "uniformity": -1.0, "sts": None},
                {"model": "sscl", "alignment": 0.2, "uniformity": -2.5, "sts": 76.5},
                {"model": "simcse", "alignment": 0.15, "uniformity": -2.0, "sts": 76.0},
            ]
        ),
        "cosine_density": plots.cosine_density({"simcse": bins, "sscl": bins}),
        "layer_similarity": plots.layer_similarity(
            {plots.BEFORE: layers, "sscl": layers, "simcse": layers}
        ),
        "dev_curve": plots.dev_curve(
            curve, "RepAL eq. 5", ("lambda2", "λ2"), ("bound", "bound", "b"), ("dev", "dev", "d")
        ),
    }


def colours_by_label(figure: Figure) -> dict[str, str]:
    """Each labelled line's or marker's colour, over all axes of `figure`."""
    found: dict[str, str] = {}
    for axis in figure.axes:
        for line in axis.get_lines():
            found.setdefault(str(line.get_label()), to_hex(line.get_color()))
        for points in axis.collections:
            found.setdefault(
                str(points.get_label()).split(" (")[0], to_hex(points.get_facecolor()[0])
            )
    return found


def test_a_method_has_one_colour_in_every_figure() -> None:
    drawn = figures()
    seen: dict[str, set[str]] = {}
    for name in ("training_curves", "method_curves", "alignment_uniformity", "layer_similarity"):
        for label, found in colours_by_label(drawn[name]).items():
            seen.setdefault(label, set()).add(found)
    for model in ("simcse", "sscl", plots.BEFORE):
        assert seen[model] == {to_hex(plots.colour(model))}, model
    assert to_hex(plots.colour(plots.BEFORE)) == to_hex(plots.REFERENCE_COLOURS[plots.BEFORE])
    methods = [plots.colour(m) for m in METHOD_SECTIONS]
    assert len(set(methods)) == len(methods)  # distinct, and none a reference row's colour
    assert not set(methods) & set(plots.REFERENCE_COLOURS.values())
    assert plots.colour("iscse + dclr") == plots.colour("iscse+dclr")
    assert plots.colour("simcse") == plots.colour("simcse")


def test_every_figure_has_a_title_and_a_legend_clear_of_the_data(tmp_path: Path) -> None:
    for name, figure in figures().items():
        path = tmp_path / f"{name}.png"
        plots.save(figure, path)
        assert path.read_bytes()[:4] == b"\x89PNG" and path.stat().st_size > 1000, name
        assert figure.get_suptitle(), name
        assert len(figure.legends) == 1 and figure.legends[0].get_texts(), name
        box = figure.legends[0].get_window_extent()
        for axis in figure.axes:
            assert not box.overlaps(axis.get_window_extent()), name  # covers no marker
            assert not axis.texts, name  # no labels drawn over the data


def test_density_axes_span_the_cosines_not_minus_one_to_one() -> None:
    bins = {"0-5": np.array([0.2, 0.4, 0.5, 0.9])}
    (axis,) = plots.cosine_density({"simcse": bins}).axes
    low, high = axis.get_xlim()
    assert 0.1 < low < 0.2 and 0.9 < high < 1.0


def test_dvc_plots_output_is_not_tracked() -> None:
    """`dvc plots show` writes dvc_plots/index.html into the repo: git ignores it."""
    repo = Path(__file__).resolve().parents[1]
    ignored = subprocess.run(
        ["git", "check-ignore", "-q", "dvc_plots/index.html"], cwd=repo, check=False
    )
    assert ignored.returncode == 0


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
