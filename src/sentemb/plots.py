"""PNG plots (`dvc plots show` renders HTML that loads JavaScript from a CDN; these need none)."""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.ticker import MaxNLocator
from scipy.stats import gaussian_kde

from sentemb.io import atomic_path


def training_curves(loss: list[dict], dev: list[dict], path: Path, title: str) -> None:
    """Training loss and dev score against steps, side by side."""
    figure, (left, right) = plt.subplots(1, 2, figsize=(10, 3.5))
    left.plot([p["step"] for p in loss], [p["loss"] for p in loss])
    left.set(xlabel="step", ylabel="training loss", yscale="log", title=title)
    right.plot([p["step"] for p in dev], [p["dev"] for p in dev], marker="o")
    right.set(xlabel="step", ylabel="dev score (Spearman x 100)", title="model selection")
    save(figure, path)


def save(figure: plt.Figure, path: Path) -> None:
    """Write `figure` as a PNG atomically and close it."""
    figure.tight_layout()
    with atomic_path(path) as tmp:
        figure.savefig(tmp, format="png", dpi=100)
    plt.close(figure)


def method_curves(curves: dict[str, dict[str, list[dict]]], path: Path) -> None:
    """Training loss and dev score against steps, one line per method (mean over its seeds).

    `curves[method]["loss"]` / `["dev"]` are the seeds' records, concatenated."""
    figure, (left, right) = plt.subplots(1, 2, figsize=(10, 3.5))
    for method, kinds in curves.items():
        for axis, kind in ((left, "loss"), (right, "dev")):
            by_step: dict[int, list[float]] = {}
            for point in kinds[kind]:
                by_step.setdefault(point["step"], []).append(point[kind])
            steps = sorted(by_step)
            axis.plot(steps, [np.mean(by_step[s]) for s in steps], label=method)
    left.set(xlabel="step", ylabel="training loss (mean over seeds)", yscale="log")
    right.set(xlabel="step", ylabel="STS-B dev Spearman x 100", title="model selection")
    left.legend()
    save(figure, path)


def alignment_uniformity(points: list[dict], path: Path) -> None:
    """IS-CSE Fig. 3: alignment against uniformity, a point per model, labelled with its STS avg."""
    figure, axis = plt.subplots(figsize=(5.5, 4))
    for point in points:
        axis.scatter(point["alignment"], point["uniformity"])
        label = (
            point["model"] if point.get("sts") is None else f"{point['model']} ({point['sts']:.2f})"
        )
        axis.annotate(label, (point["alignment"], point["uniformity"]), fontsize=8)
    axis.set(xlabel="alignment (lower is better)", ylabel="uniformity (lower is better)")
    save(figure, path)


def cosine_density(panels: dict[str, dict[str, np.ndarray]], path: Path) -> None:
    """PaSeR App. C / IS-CSE Fig. 4: per model, the density of pair cosines in each gold bin."""
    figure, axes = plt.subplots(1, len(panels), figsize=(4 * len(panels), 3.5), squeeze=False)
    for axis, (model, bins) in zip(axes[0], panels.items(), strict=True):
        grid = np.linspace(-1.0, 1.0, 201)
        for label, cosines in bins.items():
            if len(cosines) > 1 and np.ptp(cosines) > 0:
                axis.plot(grid, gaussian_kde(cosines)(grid), label=label)
        axis.set(title=model, xlabel="cosine similarity", ylabel="density")
    axes[0][0].legend(title="gold score", fontsize=8)
    save(figure, path)


def layer_similarity(curves: dict[str, dict[str, list[float]]], path: Path) -> None:
    """SSCL Fig. 1 and 4: inter-layer similarity of adjacent layers (eq. 2) and token-wise
    similarity (eq. 1) per layer, one line per model."""
    figure, (left, right) = plt.subplots(1, 2, figsize=(10, 3.5))
    for model, values in curves.items():
        pairs = range(1, len(values["inter_layer"]) + 1)
        left.plot(pairs, values["inter_layer"], marker="o", label=model)
        right.plot(range(len(values["token_wise"])), values["token_wise"], marker="o", label=model)
    left.set(xlabel="layers i-1, i (0 = embeddings)", ylabel="inter-layer cosine (eq. 2)")
    for axis in (left, right):
        axis.xaxis.set_major_locator(MaxNLocator(integer=True))
    right.set(xlabel="layer (0 = embeddings)", ylabel="token-wise cosine (eq. 1)")
    left.legend(fontsize=8)
    save(figure, path)
