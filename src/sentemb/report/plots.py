"""Every PNG plot (`dvc plots show` renders HTML that loads JavaScript from a CDN; these need none).

Each function draws one figure and returns it; `save` writes it. Every figure has a title and a
legend, and a model has the same colour in every figure (`colour`): a training method the colour
of its place among the method files, the untrained model grey.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np
from matplotlib import colormaps
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator
from scipy.stats import gaussian_kde

from sentemb.config import METHOD_SECTIONS
from sentemb.io import atomic_path

BEFORE = "before training"  # the untrained model in the analysis plots
REFERENCE_COLOURS = {BEFORE: "tab:gray"}
METHOD_COLOURS = (
    "tab:blue",
    "tab:orange",
    "tab:green",
    "tab:red",
    "tab:purple",
    "tab:pink",
    "tab:olive",
    "tab:cyan",
)  # tab10 without the reference rows' grey and brown
GRID = 201  # points of each density curve


def colour(model: str) -> str:
    """The colour of `model` in every figure: the untrained model's grey; a method's by its place in
    `METHOD_SECTIONS`; a combination (`iscse+dclr`) one of the colours left over, by a hash of
    its name (a stable choice; two combinations may share one)."""
    if model in REFERENCE_COLOURS:
        return REFERENCE_COLOURS[model]
    name = "".join(model.split())
    if name in METHOD_SECTIONS:
        return METHOD_COLOURS[METHOD_SECTIONS.index(name) % len(METHOD_COLOURS)]
    spare = METHOD_COLOURS[len(METHOD_SECTIONS) :] or METHOD_COLOURS
    return spare[zlib.crc32(name.encode("utf-8")) % len(spare)]


def save(figure: Figure, path: Path) -> None:
    """Write `figure` as a PNG atomically."""
    with atomic_path(path) as tmp:
        figure.savefig(tmp, format="png", dpi=100)


def new_figure(title: str, width: float, height: float = 3.5) -> Figure:
    """An empty figure with `title`, laid out so that titles and outside legends fit."""
    figure = Figure(figsize=(width, height), layout="constrained")
    figure.suptitle(title)
    return figure


def legend(figure: Figure, axes: Iterable[Axes], title: str | None = None) -> None:
    """One legend for the figure, right of the axes (so it covers no data): every labelled
    line or marker of `axes`, each label once."""
    entries: dict[str, object] = {}
    for axis in axes:
        for handle, label in zip(*axis.get_legend_handles_labels(), strict=True):
            entries.setdefault(label, handle)
    figure.legend(
        list(entries.values()), list(entries), loc="outside right upper", title=title, fontsize=8
    )


def integer_ticks(*axes: Axes) -> None:
    """Ticks only at whole numbers on the x axes (steps, layers)."""
    for axis in axes:
        axis.xaxis.set_major_locator(MaxNLocator(integer=True))


def mean_by_step(points: list[dict], key: str) -> tuple[list[int], list[float]]:
    """The steps of `points` in order and the mean of `key` over the points at each step."""
    by_step: dict[int, list[float]] = {}
    for point in points:
        by_step.setdefault(point["step"], []).append(point[key])
    steps = sorted(by_step)
    return steps, [float(np.mean(by_step[s])) for s in steps]


def training_curves(loss: list[dict], dev: list[dict], method: str) -> Figure:
    """One run's training loss and dev score against steps, side by side, with its best step."""
    figure = new_figure(f"Training of {method}", 10.5)
    left, right = figure.subplots(1, 2)
    left.plot(
        [p["step"] for p in loss], [p["loss"] for p in loss], color=colour(method), label=method
    )
    left.set(xlabel="step", ylabel="training loss", yscale="log", title="loss")
    steps, scores = [p["step"] for p in dev], [p["dev"] for p in dev]
    right.plot(steps, scores, marker="o", color=colour(method), label=method)
    if scores:
        best = int(np.argmax(scores))
        right.scatter(
            steps[best],
            scores[best],
            marker="*",
            s=150,
            color="black",
            zorder=3,
            label=f"best: step {steps[best]}",
        )
    right.set(xlabel="step", ylabel="dev score (Spearman x 100)", title="model selection")
    integer_ticks(left, right)
    legend(figure, [right])
    return figure


def method_curves(curves: dict[str, dict[str, list[dict]]]) -> Figure:
    """Training loss and dev score against steps, one line per method (mean over its seeds).

    `curves[method]["loss"]` / `["dev"]` are the seeds' records, concatenated."""
    figure = new_figure("Training curves (mean over seeds)", 10.5)
    left, right = figure.subplots(1, 2)
    for method, kinds in curves.items():
        left.plot(*mean_by_step(kinds["loss"], "loss"), color=colour(method), label=method)
        steps, scores = mean_by_step(kinds["dev"], "dev")
        right.plot(steps, scores, marker="o", color=colour(method), label=method)
    left.set(xlabel="step", ylabel="training loss", yscale="log", title="loss")
    right.set(xlabel="step", ylabel="STS-B dev Spearman x 100", title="model selection")
    integer_ticks(left, right)
    legend(figure, [left], "method")
    return figure


def alignment_uniformity(points: list[dict]) -> Figure:
    """IS-CSE Fig. 3: alignment against uniformity, a point per model; the legend gives each
    model's STS avg."""
    figure = new_figure("Alignment and uniformity on STS-B test (IS-CSE Fig. 3)", 7.5, 4.0)
    axis = figure.subplots()
    for point in points:
        label = point["model"]
        if point.get("sts") is not None:
            label += f" (STS avg {point['sts']:.2f})"
        axis.scatter(
            point["alignment"], point["uniformity"], s=60, color=colour(point["model"]), label=label
        )
    axis.margins(0.15)
    axis.set(xlabel="alignment (lower is better)", ylabel="uniformity (lower is better)")
    legend(figure, [axis], "model")
    return figure


def data_range(values: Sequence[np.ndarray], margin: float = 0.05) -> tuple[float, float]:
    """The range of all `values`, widened by `margin` of its width on each side."""
    low = min(float(v.min()) for v in values if len(v))
    high = max(float(v.max()) for v in values if len(v))
    pad = margin * (high - low) or margin
    return low - pad, high + pad


def cosine_density(panels: dict[str, dict[str, np.ndarray]]) -> Figure:
    """PaSeR App. C / IS-CSE Fig. 4: per model, the density of pair cosines in each gold bin
    (a colour per bin, dark to light with the gold score; x from the cosines' range)."""
    figure = new_figure(
        "Cosine of STS-B test pairs per gold score (PaSeR App. C, IS-CSE Fig. 4)",
        4 * len(panels) + 1.5,
    )
    axes = figure.subplots(1, len(panels), squeeze=False, sharex=True)[0]
    low, high = data_range([c for bins in panels.values() for c in bins.values()])
    grid = np.linspace(low, high, GRID)
    for axis, (model, bins) in zip(axes, panels.items(), strict=True):
        shades = colormaps["viridis"](np.linspace(0.0, 0.85, len(bins)))
        for shade, (label, cosines) in zip(shades, bins.items(), strict=True):
            if len(cosines) > 1 and np.ptp(cosines) > 0:
                axis.plot(grid, gaussian_kde(cosines)(grid), color=shade, label=label)
        axis.set_title(model, color=colour(model))
        axis.set(xlabel="cosine similarity", ylabel="density", xlim=(low, high))
    legend(figure, axes, "gold score")
    return figure


def layer_similarity(curves: dict[str, dict[str, list[float]]]) -> Figure:
    """SSCL Fig. 1 and 4: inter-layer similarity of adjacent layers (eq. 2) and token-wise
    similarity (eq. 1) per layer, one line per model."""
    figure = new_figure("Similarity across layers (SSCL Fig. 1 and 4)", 10.5)
    left, right = figure.subplots(1, 2)
    for model, values in curves.items():
        pairs = range(1, len(values["inter_layer"]) + 1)
        layers = range(len(values["token_wise"]))
        left.plot(pairs, values["inter_layer"], marker="o", color=colour(model), label=model)
        right.plot(layers, values["token_wise"], marker="o", color=colour(model), label=model)
    left.set(xlabel="layers i-1, i (0 = embeddings)", ylabel="cosine", title="inter-layer (eq. 2)")
    right.set(xlabel="layer (0 = embeddings)", ylabel="cosine", title="token-wise (eq. 1)")
    integer_ticks(left, right)
    legend(figure, [left], "model")
    return figure


def refine_bound(curve: list[dict[str, float]], title: str) -> Figure:
    """RepAL Fig. 2: the eigenvalue bound (eq. 5, left axis) and STS-B dev Spearman (right
    axis) against λ2."""
    figure = new_figure(title, 7.5)
    left = figure.subplots()
    lambdas = [p["lambda2"] for p in curve]
    left.plot(lambdas, [p["bound"] for p in curve], "k.-", label="eigenvalue bound (eq. 5)")
    left.set(xlabel="λ2 (corpus-level weight)", ylabel="upper bound of largest eigenvalue")
    right = left.twinx()
    right.plot(lambdas, [p["dev"] for p in curve], "ks--", ms=4, label="STS-B dev (right axis)")
    right.set_ylabel("STS-B dev Spearman x 100")
    legend(figure, [left, right])
    return figure
