"""The model card (`README.md`) of a trained model folder, as sentence-transformers cards are:
YAML front matter (library, base model, tags) then the model, its training, the run's numbers
and how to load it. Only what defines the run goes in (params as given, no paths of this
machine, no time), so the same run writes the same card anywhere.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sentemb.pooling import POOLERS

CARD = "README.md"
EXAMPLE = "A man is playing a guitar."


@dataclass
class CardInfo:
    """What a card says: the base model, the encoder as saved, the method and its params (one
    section per part of the spec, plus `train`), and the run's metrics."""

    base_model: str
    pooler: str
    train_max_length: int
    max_length: int
    dim: int
    method: str
    seed: int
    params: Mapping[str, Mapping[str, Any]]
    metrics: Mapping[str, Any]
    corpus: str = "the training corpus"
    warnings: list[str] = field(default_factory=list)


def _value(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}" if abs(value) < 1e-3 or abs(value) >= 1e4 else f"{value:.4f}"
    return json.dumps(value) if isinstance(value, list | dict) else f"{value}"


def _table(rows: Mapping[str, Any], head: tuple[str, str]) -> list[str]:
    return [
        f"| {head[0]} | {head[1]} |",
        "|---|---|",
        *(f"| `{k}` | {_value(v)} |" for k, v in rows.items()),
    ]


def model_card(info: CardInfo) -> str:
    """The card's Markdown."""
    st_mode = POOLERS[info.pooler].st_mode
    pooling = f"`{info.pooler}`" + (f" (sentence-transformers `{st_mode}`)" if st_mode else "")
    lines = [
        "---",
        "library_name: sentence-transformers" if st_mode else "library_name: transformers",
        "pipeline_tag: sentence-similarity",
        f"base_model: {info.base_model}",
        "tags:",
        *(f"- {tag}" for tag in ("sentence-transformers", "sentence-similarity", "sentemb")),
        *(f"- {part}" for part in info.method.split("+")),
        "---",
        "",
        f"# {info.method} (seed {info.seed}) from {info.base_model}",
        "",
        f"Trained without labels by the `sentemb` pipeline (stage `train`): method `{info.method}`"
        f" on {info.corpus}, the best checkpoint by the dev selection metric.",
        "",
        "## Model",
        "",
        "| | |",
        "|---|---|",
        f"| base model | `{info.base_model}` |",
        f"| pooling | {pooling} |",
        f"| max length | {info.train_max_length} tokens (training), {info.max_length} (encoding) |",
        f"| dimensions | {info.dim} |",
        "",
        "## Training",
        "",
        f"Method `{info.method}`, seed {info.seed}; its params (`params.yaml`):",
        "",
    ]
    for section, values in info.params.items():
        lines += [f"### `{section}`", "", *_table(values, ("param", "value")), ""]
    lines += ["## Results", "", *_table(info.metrics, ("metric", "value")), ""]
    if info.warnings:
        lines += ["Warnings of this run:", "", *(f"- {w}" for w in info.warnings), ""]
    lines += ["## Usage", ""]
    if st_mode:
        lines += [
            "```python",
            "from sentence_transformers import SentenceTransformer",
            "",
            'model = SentenceTransformer("path/to/this/folder")',
            f'vectors = model.encode(["{EXAMPLE}"])',
            "```",
            "",
        ]
    else:
        lines += [
            f"sentence-transformers has no `{info.pooler}` pooling; load it with sentemb:",
            "",
        ]
    lines += [
        "```python",
        "from sentemb.encoder import Encoder",
        "",
        'encoder = Encoder.from_pretrained("path/to/this/folder")  # pooler from the folder',
        f'vectors = encoder.encode(["{EXAMPLE}"], batch_size=64)',
        "```",
        "",
    ]
    return "\n".join(lines)


def write_model_card(folder: Path, info: CardInfo) -> None:
    """Write `folder/README.md` (inside the folder output being written)."""
    (folder / CARD).write_text(model_card(info), encoding="utf-8")
