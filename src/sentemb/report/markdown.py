"""The Markdown of the reports, in the papers' layout: stage `summary`'s (`reports/summary.md`),
the comparison of two experiments (`sentemb.compare`) and the leaderboard.

A table per suite, titled and with the columns its registration gives (`registry.SUITES`):
a row per method with mean ± std over seeds, its refined rows, then the single-run reference
rows; the paired tests against a baseline; the protocol and the deviations from the papers.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from sentemb.config import METHOD_SECTIONS, section
from sentemb.evaluation.chinese import ChineseConfig
from sentemb.model_config import ModelConfig
from sentemb.registry import REFINEMENTS, SUITES
from sentemb.report.stats import NO_DIFFERENCE, NOISE, mean_std
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


def verdict(result: Mapping[str, Any]) -> str:
    """`noise` below the noise level, else whether the bootstrap interval excludes 0."""
    if result["below_noise"]:
        return NOISE
    return "significant" if result["significant"] else NO_DIFFERENCE


def paired_table(
    paired: Mapping[str, Mapping[str, Mapping]], baseline: str, confidence: float
) -> str:
    """One row per method, suite and task (in the tables' order): difference to the baseline,
    bootstrap interval, seed test, verdict."""
    rows = []
    for method, suites in paired.items():
        for suite, tasks in suites.items():
            for task in SUITES[suite].cls.report_columns(tasks):
                r = tasks[task]
                p = "-" if r["p_seeds"] is None else f"{r['p_seeds']:.3f}"
                rows.append(
                    [
                        f"{method} - {baseline}",
                        f"{suite} {task}",
                        f"{r['difference']:+.2f}",
                        f"[{r['low']:+.2f}, {r['high']:+.2f}]",
                        p,
                        verdict(r),
                    ]
                )
    header = [
        "methods",
        "task",
        "Δ mean",
        f"{confidence:.0%} CI (bootstrap)",
        "p (t-test, seeds)",
        "verdict",
    ]
    return markdown(header, rows)


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
        " (`dvc repro`); against another revision or experiment: `python -m sentemb.compare`.",
    ]
    for suite in SUITES.values():
        table = suite_table(suite.name, methods, singles)
        parts += [f"## {suite.cls.title}", table] if table else []
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


def cell(result: Mapping[str, Any]) -> list[str]:
    """Δ, the bootstrap interval (`-` without one), the t-test's p and the verdict of a result."""
    low, high, p = result["low"], result["high"], result["p_seeds"]
    interval = "-" if low is None else f"[{low:+.2f}, {high:+.2f}]"
    return [
        f"{result['difference']:+.2f}",
        interval,
        "-" if p is None else f"{p:.3f}",
        verdict(result),
    ]


def comparison(
    old: Any, new: Any, results: Mapping[str, Mapping[str, Mapping]], config: Any, tasks: bool
) -> str:
    """`sentemb.compare`'s Markdown: experiment `new` against `old` (both on their shared seeds),
    a row per suite average (per task with `tasks`), plain and refined."""
    seeds = ", ".join(map(str, new.seeds))
    lines = [
        f"### `{old.label}` → `{new.label}`: {old.method} → {new.method} (seeds {seeds})",
        "",
        f"Δ = {new.label} − {old.label} in score points, means over the shared seeds; CI: "
        f"{config.confidence:.0%} paired bootstrap over the test pairs ({config.resamples} "
        f"resamples; STS and Chinese only); p: paired t-test over seeds. Verdict: the CI where "
        f"there is one (significant when it excludes 0), else p < {1 - config.confidence:.2g}; "
        f"|Δ| < {config.noise:g} (`compare.noise`): {NOISE}.",
        "",
    ]
    rows = []
    for row in sorted(results, key=row_order):
        before, after = old.scores(row), new.scores(row)
        for column in SUITES[row.partition("/")[0]].cls.report_columns(results[row]):
            if not tasks and column != "avg":
                continue
            name = row_label(row) + ("" if column == "avg" else f" {column}")
            values = [spread(mean_std(s[column])) for s in (before, after)]  # type: ignore[index]
            rows.append([name, *values, *cell(results[row][column])])
    header = [
        "row",
        old.label,
        new.label,
        "Δ",
        f"{config.confidence:.0%} CI",
        "p (seeds)",
        "verdict",
    ]
    return "\n".join(lines) + markdown(header, rows) + "\n"


def leaderboard(board: Mapping[str, Any]) -> str:
    """reports/leaderboard.md: the results table (each row: suite averages, mean ± std over
    seeds; its STS test against SimCSE; corpus; commit), the reference rows, then every paired
    test against SimCSE and the rows left out as stale."""
    rows = sorted(board["rows"], key=leaderboard_order)
    columns = board_columns([*(r["scores"] for r in rows), *board["reference"].values()])
    header = [
        "model",
        *(f"{SUITES[s].cls.title.split(' (')[0]} avg" if c is None else c for s, c in columns),
        "STS vs SimCSE",
        "trained on",
        "commit",
    ]
    table = []
    for row in rows:
        commit = row["commit"][:7] + (f" ({row['experiment']})" if row["experiment"] else "")
        for refinement, label in ((None, ""), *REFINED.items()):
            name = f"/{refinement}" if refinement else ""
            if f"sts{name}" not in row["scores"] and f"chinese{name}" not in row["scores"]:
                continue
            test = row["versus"].get(f"sts{name}")
            table.append(
                [
                    row["label"] + (f" + {label}" if refinement else ""),
                    *(spread(row["scores"].get(board_key(s, name, c))) for s, c in columns),
                    "-" if test is None else f"{test['difference']:+.2f} ({verdict(test)})",
                    row["trained_on"] if not refinement else "",
                    commit if not refinement else "",
                ]
            )
    for name, label in REFERENCE_LABELS.items():
        averages = board["reference"][name]
        for refinement, suffix in ((None, ""), *REFINED.items()):
            key = f"/{refinement}" if refinement else ""
            keys = [board_key(s, key, c) for s, c in columns]
            if not any(k in averages for k in keys):
                continue
            cells = [f"{averages[k]:.2f}" if k in averages else "-" for k in keys]
            reference = board["reference_commit"][:7]
            table.append(
                [label + (f" + {suffix}" if refinement else ""), *cells, "-", "-", reference]
            )
    tests = [
        [row["label"], row_label(name), *cell(result)]
        for row in rows
        for name, result in sorted(row["versus"].items(), key=lambda item: row_order(item[0]))
    ]
    parts = [
        "# Leaderboard",
        "Each row is one DVC experiment (`python -m sentemb.leaderboard`): suite averages, mean ±"
        " std over its seeds; STS vs SimCSE: Δ of the STS average and its verdict (paired"
        " bootstrap over the test pairs and paired t-test over seeds: the bootstrap's interval"
        " decides where there is one, else the t-test; `noise` below `compare.noise`)."
        " Reference rows are single runs of the reference commit.",
        markdown(header, table),
        "## Against SimCSE (suite averages)",
        markdown(["model", "suite", "Δ", "CI (bootstrap)", "p (seeds)", "verdict"], tests),
    ]
    if board["stale"]:
        stale = [
            f"- {s['label']} at {s['commit'][:7]}: {s['reason']}; `{s['rerun']}`"
            for s in board["stale"]
        ]
        parts += ["## Left out (rerun them)", "\n".join(stale)]
    return "\n\n".join(parts) + "\n"


def board_columns(entries: list[Mapping[str, Any]]) -> list[tuple[str, str | None]]:
    """The leaderboard's score columns: (suite, None) for each suite's average, (suite, set) for
    each own set any row has (`<suite>:<set>` keys of `entries`), in the suites' order."""
    found = dict.fromkeys(k.partition(":")[2] for e in entries for k in e if ":" in k)
    return [
        (suite, column)
        for suite, declared in SUITES.items()
        for column in ([None] if declared.cls.columns else found)
    ]


def board_key(suite: str, refinement: str, column: str | None) -> str:
    """A board entry's key: `sts`, `sts/repal`, `own:captions`, `own/repal:captions`."""
    return f"{suite}{refinement}" + ("" if column is None else f":{column}")


def leaderboard_order(row: Mapping[str, Any]) -> tuple[int, str]:
    """SimCSE first, then the methods in `METHOD_SECTIONS` order, then joins, by label."""
    method = row["method"]
    order = ["simcse", *(m for m in METHOD_SECTIONS if m != "simcse")]
    return (order.index(method) if method in order else len(order), row["label"])
