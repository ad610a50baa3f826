"""The review commands' Markdown: a comparison of two experiments, the leaderboard, and
`metrics_diff`'s table of every changed metric."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sentemb.config import METHOD_SECTIONS
from sentemb.registry import SUITES
from sentemb.report.markdown import (
    REFERENCE_LABELS,
    REFINED,
    markdown,
    row_label,
    row_order,
    spread,
    table_cell,
)
from sentemb.report.stats import mean_std
from sentemb.review.diff import Change, is_score
from sentemb.review.paired import NOISE, TESTS, below_noise, verdict

TITLE = "# Leaderboard"  # the leaderboard report's first line
BOOTSTRAPPED = ", ".join(name for name, declared in SUITES.items() if declared.cls.pairs)
RESTS_ON = dict(zip(TESTS, ("bootstrap", "t-test (seeds)", "no test"), strict=True))  # in a table


def result_cells(result: Mapping[str, Any]) -> list[str]:
    """Δ, the bootstrap interval (`-` without one), the t-test's p, the verdict of a result and
    the test it rests on (`-`: a board written before results said)."""
    low, high, p = result["low"], result["high"], result["p_seeds"]
    interval = "-" if low is None else f"[{low:+.2f}, {high:+.2f}]"
    return [
        f"{result['difference']:+.2f}",
        interval,
        "-" if p is None else f"{p:.3f}",
        verdict(result),
        RESTS_ON.get(result.get("test"), "-"),
    ]


def comparison(
    old: Any, new: Any, results: Mapping[str, Mapping[str, Mapping]], config: Any, tasks: bool
) -> str:
    """`sentemb.review.compare`'s Markdown: experiment `new` against `old` (both on their shared
    seeds), a row per suite average (per task with `tasks`; a suite without one, own or mteb:
    a row per set or task), plain and refined."""
    seeds = ", ".join(map(str, new.seeds))
    lines = [
        f"### `{old.label}` → `{new.label}`: {old.method} → {new.method} (seeds {seeds})",
        "",
        f"Δ = {new.label} − {old.label} in score points, means over the shared seeds; CI: "
        f"{config.confidence:.0%} paired bootstrap over the test pairs or items "
        f"({config.resamples} resamples; suites {BOOTSTRAPPED} only); p: paired t-test over "
        f"seeds. Verdict: the CI where there is one (significant when it excludes 0), else "
        f"p < {1 - config.confidence:.2g}; "
        f"|Δ| < {config.noise:g} (`compare.noise`): {NOISE}.",
        "",
    ]
    rows = []
    for row in sorted(results, key=row_order):
        before, after = old.scores(row), new.scores(row)
        declared = SUITES[row.partition("/")[0]].cls
        for column in declared.report_columns(results[row]):
            if not tasks and column != "avg" and declared.columns:  # no avg: every column
                continue
            name = row_label(row) + ("" if column == "avg" else f" {column}")
            values = [spread(mean_std(s[column])) for s in (before, after)]  # type: ignore[index]
            rows.append([name, *values, *result_cells(results[row][column])])
    header = [
        "row",
        old.label,
        new.label,
        "Δ",
        f"{config.confidence:.0%} CI",
        "p (seeds)",
        "verdict",
        "rests on",
    ]
    notes = [f"- `{side.label}`: {note}" for side in (old, new) for note in side.notes]
    return "\n".join(lines) + markdown(header, rows) + "\n" + "".join(f"\n{n}" for n in notes)


def leaderboard(board: Mapping[str, Any]) -> str:
    """reports/leaderboard.md: the results table (each row: suite averages, mean ± std over
    seeds; its STS test against SimCSE; corpus; commit), the reference rows, then every paired
    test against SimCSE and the rows left out as stale."""
    rows = sorted(board["rows"], key=leaderboard_order)
    columns = board_columns([*(r["scores"] for r in rows), *board["reference"].values()])
    named = [c for _, c in columns]  # a set or task named twice: its suite says which
    header = [
        "model",
        *(
            f"{SUITES[s].cls.title.split(' (')[0]} avg"
            if c is None
            else (c if named.count(c) == 1 else f"{s}:{c}")
            for s, c in columns
        ),
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
        [row["label"], row_label(name), *result_cells(result)]
        for row in rows
        for name, result in sorted(row["versus"].items(), key=lambda item: row_order(item[0]))
    ]
    parts = [
        TITLE,
        "Each row is one DVC experiment (`python -m sentemb.review.leaderboard`): suite averages,"
        " mean ± std over its seeds; STS vs SimCSE: Δ of the STS average and its verdict (paired"
        " bootstrap over the test pairs and paired t-test over seeds: the bootstrap's interval"
        " decides where there is one, else the t-test; `noise` below `compare.noise`)."
        " Reference rows are single runs of the reference commit.",
        markdown(header, table),
        "## Against SimCSE (suite averages)",
        markdown(
            ["model", "suite", "Δ", "CI (bootstrap)", "p (seeds)", "verdict", "rests on"], tests
        ),
    ]
    notes = [f"- {row['label']}: {note}" for row in rows for note in row.get("notes", [])]
    if notes:
        parts.append("\n".join(notes))
    if board["stale"]:
        stale = [
            f"- {s['label']} at {s['commit'][:7]}: {s['reason']}; `{s['rerun']}`"
            for s in board["stale"]
        ]
        parts += ["## Left out (rerun them)", "\n".join(stale)]
    return "\n\n".join(parts) + "\n"


def board_columns(entries: list[Mapping[str, Any]]) -> list[tuple[str, str | None]]:
    """The leaderboard's score columns: (suite, None) for each suite's average, (suite, column)
    for each column of a suite without one (an own set, an MTEB task) that any row has
    (`<suite>[/<refinement>]:<column>` keys of `entries`), in the suites' order."""
    found: dict[str, dict[str, None]] = {}
    for key in (k for e in entries for k in e if ":" in k):
        row, _, column = key.partition(":")
        found.setdefault(row.partition("/")[0], {})[column] = None
    return [
        (suite, column)
        for suite, declared in SUITES.items()
        for column in ([None] if declared.cls.columns else found.get(suite, {}))
    ]


def board_key(suite: str, refinement: str, column: str | None) -> str:
    """A board entry's key: `sts`, `sts/repal`, `own:captions`, `own/repal:captions`."""
    return f"{suite}{refinement}" + ("" if column is None else f":{column}")


def leaderboard_order(row: Mapping[str, Any]) -> tuple[int, str]:
    """SimCSE first, then the methods in `METHOD_SECTIONS` order, then joins, by label."""
    method = row["method"]
    order = ["simcse", *(m for m in METHOD_SECTIONS if m != "simcse")]
    return (order.index(method) if method in order else len(order), row["label"])


def diff_label(change: Change, noise: float) -> str:
    """`noise` for a score that moved by less than `noise` points, else empty."""
    difference = change.difference
    if difference is None or not is_score(change.path, change.metric):
        return ""
    return NOISE if below_noise(difference, noise) else ""


def diff_value(value: float | None, sign: str = "") -> str:
    """`value` rounded to 5 decimals as `dvc metrics diff` shows it, `-` when absent."""
    return "-" if value is None else f"{round(value, 5):{sign}}"


def metrics_table(rows: list[Change], noise: float, old: str, new: str) -> str:
    """A Markdown table like `dvc metrics diff --md`'s, with the noise label, and a count."""
    if not rows:
        return "no metric changed"
    lines = [
        f"| Path | Metric | {table_cell(old)} | {table_cell(new)} | Change | Note |",
        "|---|---|---:|---:|---:|---|",
    ]
    labels = [diff_label(row, noise) for row in rows]
    lines += [
        f"| {table_cell(r.path)} | {table_cell(r.metric)}"
        f" | {diff_value(r.old)} | {diff_value(r.new)} | {diff_value(r.difference, '+')}"
        f" | {mark} |"
        for r, mark in zip(rows, labels, strict=True)
    ]
    scores = sum(1 for r in rows if r.difference is not None and is_score(r.path, r.metric))
    lines.append(
        f"\n{len(rows)} metric(s) changed; {labels.count(NOISE)} of the {scores} changed"
        f" score(s) moved by less than {noise:g} points (`compare.noise`): {NOISE}"
    )
    return "\n".join(lines)
