"""The Markdown summary of stage `compare` (`reports/summary.md`), in the papers' layout.

A table per suite, titled and with the columns its declaration gives (`evaluation.suites.SUITES`):
a row per method with mean ± std over seeds, its refined rows, then the single-run reference
rows; the paired tests against the baseline; the protocol and the deviations from the papers.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sentemb.config import section
from sentemb.evaluation.chinese import ChineseConfig
from sentemb.evaluation.suites import SUITES
from sentemb.model_config import ModelConfig
from sentemb.report.stats import NO_DIFFERENCE, NOISE
from sentemb.training.config import TrainConfig

REFINED = {"repal": "RepAL", "whitening": "whitening"}
PAPER_CORPUS = 1_000_000
PAPER_BACKBONES = ("bert-base", "bert-large", "roberta-base", "roberta-large")


def protocol(
    params: dict[str, Any], sentences: int, fit_on: str
) -> tuple[dict[str, str], list[str]]:
    """The protocol choices in force and the deviations from the papers they amount to;
    `sentences` is the training corpus size the runs saw, `fit_on` what their refinements were
    fitted on (their refine.json)."""
    model = section(params, "model", ModelConfig)
    train = section(params, "train", TrainConfig)
    chinese = section(params, "eval.chinese", ChineseConfig).model or model.name_or_path
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
        "precision": f"training {train.precision}, encoding {model.precision} (auto: bf16)",
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
    if train.corpus == "wiki" and sentences < PAPER_CORPUS:
        deviations.append(f"{sentences:,} training sentences; the papers use 1M")
    if chinese == model.name_or_path:
        deviations.append("Chinese sets scored with the English model; papers use a Chinese BERT")
    if "fp32" not in (model.precision, train.precision):
        deviations.append("bf16 autocast in training and encoding; the papers use fp32/fp16")
    if fit_on == "corpus":
        deviations.append("RepAL's v̂ and whitening fitted on the training corpus, not the test set")
    return choices, deviations


def markdown(header: list[str], rows: list[list[str]]) -> str:
    """A Markdown table, first column left-aligned, the others right-aligned."""
    lines = ["| " + " | ".join(header) + " |", "|---|" + "---:|" * (len(header) - 1)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
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
    mean/std/n), then each single run (`singles[name][suite]`: a metrics file's content)."""
    keys = SUITES[suite].columns
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
        for values, label in (
            (metrics, name),
            *((metrics.get(k), f"{name} + {v}") for k, v in REFINED.items()),
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
            for task in sorted(tasks, key=SUITES[suite].columns.index):
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
    paired: Mapping[str, Mapping],
    analysis: Mapping[str, Mapping[str, Mapping[str, float]]],
    choices: Mapping[str, str],
    deviations: list[str],
    seeds: list[int],
    resamples: int,
    confidence: float,
    noise: float,
) -> str:
    """The whole report."""
    baseline = next(iter(methods))
    parts = [
        "# Summary",
        f"Methods {', '.join(methods)}, seeds {', '.join(map(str, seeds))}: mean ± sample std"
        " over seeds. Reference rows are single runs (deterministic). Produced by stage"
        " `compare` (`dvc repro`).",
    ]
    for suite in SUITES.values():
        parts += [f"## {suite.title}", suite_table(suite.name, methods, singles)]
    if paired:
        parts += [
            f"## Against {baseline}",
            f"Paired bootstrap over the test pairs ({resamples} resamples, percentile interval of"
            " the difference in mean-over-seeds Spearman; pooled STS years resampled within"
            " each subset) and a paired t-test over seeds. Where the interval covers 0:"
            f" {NO_DIFFERENCE}; where |Δ mean| < {noise:g} points (`compare.noise`, what the"
            f" same run moves by on another CPU, bf16 kernel or GPU): {NOISE}.",
            paired_table(paired, baseline, confidence),
        ]
    rows = [
        [m, *(spread(v[k], 3) for k in ("alignment", "uniformity"))] for m, v in analysis.items()
    ]
    parts += [
        "## Alignment and uniformity (Wang & Isola; STS-B test, lower is better)",
        markdown(["model", "alignment", "uniformity"], rows),
    ]
    parts += ["## Protocol", "\n".join(f"- {k}: {v}" for k, v in choices.items())]
    parts += ["## Deviations from the papers", "\n".join(f"- {d}" for d in deviations)]
    return "\n\n".join(parts) + "\n"
