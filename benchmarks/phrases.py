"""Throughput and peak memory of the phrases stage's extraction (RAKE + TF-IDF keywords).

    python benchmarks/phrases.py                       # the 11,914-line mirror corpus
    python benchmarks/phrases.py --sizes 10000 100000  # the mirror corpus replicated to size

Each size runs in a fresh process (so peak RSS is its own) with every core, and once with one
worker for the parallel speed-up measured in the same run. Writes `benchmarks/phrases.json`.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

MIRROR_CORPUS = Path(__file__).resolve().parents[1] / "../shared/datasets/corpus"
CORPUS = (MIRROR_CORPUS / "wiki1m_for_simcse.head.txt").resolve()


def measure(size: int, workers: int) -> dict[str, float]:
    """Run one extraction over `size` sentences in this process; time and peak RSS."""
    from sentemb.data.readers import read_corpus
    from sentemb.phrases import PhrasesConfig, extract

    def corpus() -> itertools.islice:
        return itertools.islice(itertools.cycle(read_corpus(CORPUS)), size)

    with tempfile.TemporaryDirectory() as out:
        started = time.perf_counter()
        extract(corpus, size, PhrasesConfig(workers=workers), Path(out) / "phrases")
        seconds = time.perf_counter() - started
    own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    children = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    return {
        "sentences": size,
        "workers": workers,
        "seconds": round(seconds, 2),
        "sentences_per_second": round(size / seconds, 1),
        "peak_rss_mib_main": round(own, 1),
        "peak_rss_mib_worker": round(children, 1),
    }


def cpu_name() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def in_fresh_process(size: int, workers: int) -> dict[str, float]:
    command = [sys.executable, __file__, "--one", str(size), str(workers)]
    result = subprocess.run(command, capture_output=True, text=True, check=True)
    return json.loads(result.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sizes", type=int, nargs="+", default=[11914])
    parser.add_argument("--out", type=Path, default=Path(__file__).with_name("phrases.json"))
    parser.add_argument("--one", type=int, nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(json.dumps(measure(*args.one)))
        return
    cores = os.cpu_count() or 1
    runs = [in_fresh_process(size, cores) for size in args.sizes]
    single = in_fresh_process(args.sizes[0], 1)
    report = {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": f"{cpu_name()}, {cores} cores",
        "command": "python benchmarks/phrases.py " + " ".join(sys.argv[1:]),
        "runs": runs,
        "single_worker": single,
        "speedup_all_cores_vs_one": round(single["seconds"] / runs[0]["seconds"], 2),
        "peak_rss_ratio_largest_vs_smallest": round(
            runs[-1]["peak_rss_mib_main"] / runs[0]["peak_rss_mib_main"], 2
        ),
    }
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
