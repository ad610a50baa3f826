"""The Markdown of the reports, in the papers' layout: stage `summary`'s (`reports/summary.md`),
the comparison of two experiments (`sentemb.review.compare`) and the leaderboard.

A table per suite, titled and with the columns its registration gives (`registry.SUITES`):
a row per method with mean ± std over seeds, its refined rows, then the single-run reference
rows; the paired tests against a baseline; the protocol and the deviations from the papers.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from sentemb.config import section
from sentemb.evaluation.chinese import ChineseConfig
from sentemb.model_config import ModelConfig
from sentemb.registry import REFINEMENTS, SUITES
from sentemb.training.config import WIKI, TrainConfig

REFINED = {name: entry.cls.label for name, entry in REFINEMENTS.items()}  # name -> label
REFERENCE_LABELS = {"untrained": "untrained model", "tfidf": "TF-IDF"}  # the reference rows
PAPER_CORPUS = 1_000_000
NUMBER = re.compile(r"[\[(]?[-+−]?\d[\d,.]*(?:$|[\s%±)\],])")  # 76.3 ± 0.1, +0.6 (x), [-1, 2]
PAPER_BACKBONES = ("bert-base", "bert-large", "roberta-base", "roberta-large")


def protocol(
    params: dict[str, Any], sentences: int, fit_on: str, trained_in: str
) -> tuple[dict[str, str], list[str]]:
    """The protocol choices in force and the deviations from the papers they amount to;
    `sentences` is the training corpus size the runs saw, `fit_on` what their refinements were
    fitted on (their refine.json), `trained_in` the autocast their training ran in (their
    train.json: `auto` resolved where it ran; `bf16/fp32` where seeds differ). Encoding runs on
    the CPU: its `auto` is resolved here, on the host that runs the pipeline's last stage."""
    import torch  # not at import: `compare` and the leaderboard print reports without it

    from sentemb.precision import precision_used

    model = section(params, "model", ModelConfig)
    train = section(params, "train", TrainConfig)
    chinese = section(params, "eval.chinese", ChineseConfig).model or model.name_or_path
    encoded_in = precision_used(model.precision, torch.device("cpu"))  # stage evaluate's device
    head = " + MLP head" if train.mlp_head else ""
    length = f"{train.max_steps} steps" if train.max_steps else f"{train.epochs} epoch(s)"
    choices = {
        "model": model.name_or_path,
        "pooler": f"training {train.pooler}{head}; test {train.eval_pooler}; reference rows"
        f" {model.pooler} (auto = the model's own pooling)",
        "max length": f"training {train.max_length} tokens; evaluation"
        f" {model.max_length or 'the model maximum'}",
        "STS aggregation": "STS12-16 'all' (subsets pooled); STS-B and SICK-R test",
        "selection": f"{train.selection} dev Spearman every {train.eval_steps} steps, best kept",
        "training": f"{sentences:,} sentences ({train.corpus}), batch {train.batch_size},"
        f" lr {train.learning_rate:g}, {length}",
        "precision": f"training {train.precision} ({trained_in}), encoding {model.precision}"
        f" ({encoded_in})",
        "Chinese model": chinese,
        "refinements fitted on": fit_on,
    }
    deviations = [
        "transfer: scikit-learn logistic regression (lbfgs), not SentEval's classifier",
        "retrieval: QQP and AskUbuntu are skipped when absent (offline); the QQP protocol is"
        " also applied to LCQMC, BQ and MRPC test (`eval.retrieval.offline_sets`)",
    ]
    if not any(name in model.name_or_path for name in PAPER_BACKBONES):
        deviations.append(f"backbone {model.name_or_path}; the papers train BERT/RoBERTa")
    if train.corpus == WIKI and sentences < PAPER_CORPUS:
        deviations.append(f"{sentences:,} training sentences; the papers use 1M")
    if chinese == model.name_or_path:
        deviations.append("Chinese sets scored with the English model; papers use a Chinese BERT")
    used = {"training": trained_in, "encoding": encoded_in}
    bf16 = [name for name, dtype in used.items() if "bf16" in dtype.split("/")]
    if bf16:
        deviations.append(f"bf16 autocast in {' and '.join(bf16)}; the papers use fp32/fp16")
    if fit_on == "corpus":
        deviations.append("RepAL's v̂ and whitening fitted on the training corpus, not the test set")
    return choices, deviations


def table_cell(text: str) -> str:
    """`text` as one cell of a Markdown table: a `|` (a branch or experiment name may hold one)
    escaped, a line break made a space, so the row keeps its columns."""
    return " ".join(text.splitlines()).replace("|", "\\|")


def markdown(header: list[str], rows: list[list[str]]) -> str:
    """A Markdown table: a column of numbers (or of `-`, missing ones) right-aligned, a column
    with any text left-aligned; every cell through `table_cell`."""

    def align(cells: list[str]) -> str:
        text = [c for c in cells if c not in ("", "-") and not NUMBER.match(c)]
        return "---" if text else "---:"

    columns = [align([row[i] for row in rows]) if i else "---" for i in range(len(header))]
    lines = ["| " + " | ".join(map(table_cell, header)) + " |", "|" + "|".join(columns) + "|"]
    lines += ["| " + " | ".join(map(table_cell, row)) + " |" for row in rows]
    return "\n".join(lines)


def spread(stats: Mapping[str, float] | None, digits: int = 2) -> str:
    """`mean ± std` (the mean alone for one seed), or `-` when missing."""
    if stats is None:
        return "-"
    if stats["n"] < 2:
        return f"{stats['mean']:.{digits}f}"
    return f"{stats['mean']:.{digits}f} ± {stats['std']:.{digits}f}"


def suite_table(
    suite: str, methods: Mapping[str, Mapping[str, Any]], singles: Mapping[str, Mapping]
) -> str:
    """Rows: each method (`methods[m][suite]` and `[f"{suite}/{refinement}"]` hold per-key
    mean/std/n), then each single run (`singles[name][suite]`: a metrics file's content); ""
    when no row has a column."""
    found = [
        *(m.get(suite, {}) for m in methods.values()),
        *(f.get(suite, {}) for f in singles.values()),
    ]
    keys = list(SUITES[suite].cls.columns) or list(
        dict.fromkeys(k for v in found for k in SUITES[suite].cls.report_columns(v))
    )
    if not keys:
        return ""  # no own set in eval.own
    rows = []
    for method, sections in methods.items():
        for name, label in (
            (suite, method),
            *((f"{suite}/{k}", f"{method} + {v}") for k, v in REFINED.items()),
        ):
            if name in sections:
                rows.append([label, *(spread(sections[name].get(k)) for k in keys)])
    for name, files in singles.items():
        metrics = files.get(suite)
        if metrics is None:
            continue
        shown = REFERENCE_LABELS.get(name, name)
        for values, label in (
            (metrics, shown),
            *((metrics.get(k), f"{shown} + {v}") for k, v in REFINED.items()),
        ):
            if values is not None:
                rows.append([label, *(f"{values[k]:.2f}" if k in values else "-" for k in keys)])
    return markdown(["model", *keys], rows)


def summary(
    methods: Mapping[str, Mapping[str, Any]],
    singles: Mapping[str, Mapping],
    per_seed: Mapping[int, Mapping[str, float]],
    analysis: Mapping[str, Mapping[str, Mapping[str, float]]],
    choices: Mapping[str, str],
    deviations: list[str],
    seeds: list[int],
) -> str:
    """One experiment's report: `methods` holds its one method's aggregate."""
    method = next(iter(methods))
    parts = [
        f"# Summary: {method}",
        f"Method {method}, seeds {', '.join(map(str, seeds))}: mean ± sample std over seeds."
        " Reference rows are single runs (deterministic). Produced by stage `summary`"
        " (`dvc repro`); against another revision or experiment:"
        " `python -m sentemb.review.compare`.",
    ]
    for suite in SUITES.values():
        table = suite_table(suite.name, methods, singles)
        notes = [n for f in singles.values() for n in suite.cls.notes(f.get(suite.name) or {})]
        parts += [f"## {suite.cls.title}", table] if table else []
        parts += ["\n".join(f"- {note}" for note in dict.fromkeys(notes))] if notes else []
    rows = sorted({name for values in per_seed.values() for name in values}, key=row_order)
    parts += [
        "## Per seed (suite averages)",
        markdown(
            ["seed", *(row_label(r) for r in rows)],
            [
                [str(seed), *(f"{v[r]:.2f}" if r in v else "-" for r in rows)]
                for seed, v in per_seed.items()
            ],
        ),
    ]
    rows_ = [
        [m, *(spread(v[k], 3) for k in ("alignment", "uniformity"))] for m, v in analysis.items()
    ]
    parts += [
        "## Alignment and uniformity (Wang & Isola; STS-B test, lower is better)",
        markdown(["model", "alignment", "uniformity"], rows_),
    ]
    parts += ["## Protocol", "\n".join(f"- {k}: {v}" for k, v in choices.items())]
    parts += ["## Deviations from the papers", "\n".join(f"- {d}" for d in deviations)]
    return "\n\n".join(parts) + "\n"


def row_order(row: str) -> tuple[int, int]:
    """Suites in `SUITES` order, each plain before its refinements (`sts`, `sts/repal`, ...; an
    own set's `own:<set>` as its row)."""
    suite, _, refinement = row.partition(":")[0].partition("/")
    return list(SUITES).index(suite), [None, *REFINED].index(refinement or None)


def row_label(row: str) -> str:
    """`sts/repal` -> `sts + RepAL`; `own:captions` -> `own captions`."""
    row, _, column = row.partition(":")
    suite, _, refinement = row.partition("/")
    label = f"{suite} + {REFINED[refinement]}" if refinement else suite
    return f"{label} {column}" if column else label
