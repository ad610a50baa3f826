"""The plots: one colour per method everywhere, a title and a legend on each figure, density
axes that span the data; `dvc plots show`'s output ignored by git."""

import subprocess
from pathlib import Path

import numpy as np
from matplotlib.colors import to_hex
from matplotlib.figure import Figure

from sentemb.config import METHOD_SECTIONS
from sentemb.report import plots

from support import REPO


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
    repo = REPO
    ignored = subprocess.run(
        ["git", "check-ignore", "-q", "dvc_plots/index.html"], cwd=repo, check=False
    )
    assert ignored.returncode == 0
