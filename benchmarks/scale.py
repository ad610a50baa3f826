"""Time and peak memory of the corpus readers and the phrases stage as the corpus grows.

    python benchmarks/scale.py                      # 10k to 10M sentences (phrases to 1M)
    python benchmarks/scale.py --sizes 2000 5000    # a quick check

For each size, the mirror's 11,914-line Wikipedia corpus is replicated line by line into a file
of that many lines in a temporary folder. Then, each in a fresh process (so its peak RSS is its
own): `read_corpus` streams the file once; the corpus stage's two passes (`kept_sentences`: the
repeats found, then every sentence kept) write it out, without the card's tokenizer; and, up to
`--phrases-max` sentences, `extract` runs the phrases stage over it (the IDF pass, then the
extraction pass) with every core. The smallest size runs once more with one worker
for the parallel speed-up. Peak RSS is the process's `ru_maxrss` and, for the phrases stage, the
largest worker's; memory is flat when the ratio of the peak at the largest size to the peak at
the smallest is about 1.0. A replicated corpus adds no new words, so the IDF table (which grows
with the vocabulary) stays the same size here. Writes `benchmarks/scale.json`.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from collect import machine

from sentemb.data.corpus import CorpusRules, CorpusStats, kept_sentences
from sentemb.data.readers import read_corpus

ROOT = Path(__file__).resolve().parents[1]
CORPUS = (ROOT / "../shared/datasets/corpus/wiki1m_for_simcse.head.txt").resolve()


def peak_rss_mib(who: int = resource.RUSAGE_SELF) -> float:
    """Peak resident memory in MiB of this process (or of its largest waited-for child)."""
    return round(resource.getrusage(who).ru_maxrss / 1024, 1)


def write_corpus(path: Path, size: int) -> None:
    """`size` lines: the mirror corpus's sentences, repeated from the start as often as needed."""
    with path.open("w", encoding="utf-8") as f:
        f.writelines(s + "\n" for s in itertools.islice(itertools.cycle(read_corpus(CORPUS)), size))


def measure_reader(corpus: Path) -> dict[str, Any]:
    """One streaming pass of `read_corpus` over `corpus`: time and peak RSS."""
    before = peak_rss_mib()
    started = time.perf_counter()
    sentences = sum(1 for _ in read_corpus(corpus))
    seconds = time.perf_counter() - started
    return {
        "sentences": sentences,
        "seconds": round(seconds, 4),
        "sentences_per_second": round(sentences / seconds),
        "rss_before_mib": before,
        "peak_rss_mib": peak_rss_mib(),
    }


def measure_corpus_stage(corpus: Path) -> dict[str, Any]:
    """The corpus stage's passes over `corpus` (its reading and writing; no tokenizer)."""
    stats = CorpusStats()
    before = peak_rss_mib()
    started = time.perf_counter()
    with open(os.devnull, "w", encoding="utf-8") as out:
        for sentence in kept_sentences(corpus, CorpusRules(size=2**31 - 1), stats):
            out.write(sentence + "\n")
    seconds = time.perf_counter() - started
    return {
        "sentences": stats.kept,
        "seconds": round(seconds, 2),
        "sentences_per_second": round(stats.kept / seconds),
        "rss_before_mib": before,
        "peak_rss_mib": peak_rss_mib(),
    }


def measure_phrases(corpus: Path, workers: int) -> dict[str, Any]:
    """The phrases stage's `extract` over `corpus`, as the stage calls it: time and peak RSS."""
    from sentemb.phrases import PhrasesConfig, extract

    total = sum(1 for _ in read_corpus(corpus))
    with tempfile.TemporaryDirectory() as out:
        started = time.perf_counter()
        extract(lambda: read_corpus(corpus), total, PhrasesConfig(workers=workers), Path(out) / "p")
        seconds = time.perf_counter() - started
    return {
        "sentences": total,
        "workers": workers,
        "seconds": round(seconds, 2),
        "sentences_per_second": round(total / seconds),
        "peak_rss_mib_main": peak_rss_mib(),
        "peak_rss_mib_worker": peak_rss_mib(resource.RUSAGE_CHILDREN),
    }


def in_fresh_process(kind: str, corpus: Path, workers: int = 0) -> dict[str, Any]:
    """`measure_reader` (kind "reader"), `measure_corpus_stage` ("corpus") or `measure_phrases`
    in a new interpreter."""
    command = [sys.executable, __file__, "--one", kind, str(corpus), str(workers)]
    result = subprocess.run(command, capture_output=True, text=True, check=True)
    row = json.loads(result.stdout.strip().splitlines()[-1])
    print(json.dumps(row), file=sys.stderr)
    return row


def ratio(rows: list[dict[str, Any]], key: str) -> float:
    return round(rows[-1][key] / rows[0][key], 2)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument(
        "--sizes", type=int, nargs="+", default=[10_000, 100_000, 1_000_000, 10_000_000]
    )
    parser.add_argument("--phrases-max", type=int, default=1_000_000)
    parser.add_argument("--out", type=Path, default=Path(__file__).with_name("scale.json"))
    parser.add_argument(
        "--one", nargs=3, metavar=("KIND", "CORPUS", "WORKERS"), help=argparse.SUPPRESS
    )
    args = parser.parse_args()
    if args.one:
        kind, corpus, workers = args.one[0], Path(args.one[1]), int(args.one[2])
        if kind == "phrases":
            row = measure_phrases(corpus, workers)
        else:
            row = (measure_reader if kind == "reader" else measure_corpus_stage)(corpus)
        print(json.dumps(row))
        return
    cores = os.cpu_count() or 1
    sizes = sorted(args.sizes)
    reader, stage, phrases, one_worker = [], [], [], {}
    with tempfile.TemporaryDirectory() as folder:
        for size in sizes:
            corpus = Path(folder) / f"corpus-{size}.txt"
            write_corpus(corpus, size)
            reader.append(in_fresh_process("reader", corpus))
            stage.append(in_fresh_process("corpus", corpus))
            if size <= args.phrases_max:
                phrases.append(in_fresh_process("phrases", corpus, cores))
            if size == sizes[0]:
                one_worker = in_fresh_process("phrases", corpus, 1)
            corpus.unlink()
    report = {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": machine(),
        "command": "python benchmarks/scale.py " + " ".join(sys.argv[1:]),
        "corpus": CORPUS.name,
        "reader": reader,
        "corpus_stage": stage,
        "phrases": phrases,
        "phrases_one_worker": one_worker,
        "phrases_speedup_all_cores_vs_one": round(one_worker["seconds"] / phrases[0]["seconds"], 2),
        "peak_rss_ratio_largest_vs_smallest": {
            "reader": ratio(reader, "peak_rss_mib"),
            "corpus_stage": ratio(stage, "peak_rss_mib"),
            "phrases_main": ratio(phrases, "peak_rss_mib_main"),
            "phrases_worker": ratio(phrases, "peak_rss_mib_worker"),
        },
    }
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
