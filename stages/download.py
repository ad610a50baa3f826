"""Stage `download`: every dataset from the offline mirror or its public URL, sha256-verified.

Writes `data/raw/` (archive layout, plus `MANIFEST.json` and the capped training corpus
`corpus/train.txt`) and keeps the sha256 recorded on first download in
`data/checksums.recorded.json`. A dataset that is known to exist (the mirror holds it, an earlier
download fetched it, or the earlier `data/raw` had it) but cannot be had now is an error, and
`data/raw` is left as it was; one that only the network has and never had (QQP, AskUbuntu
offline) is listed under `missing` with the reason, and evaluation skips it. The stage's wall
time (`seconds`) and counts go to MLflow and, with `--metrics`, to a metrics file.
"""

from __future__ import annotations

import argparse
import json
import logging
from pathlib import Path

from sentemb.cli import run_stage
from sentemb.config import load_params, section
from sentemb.data.download import MANIFEST, DataConfig, DataUnavailable, Fetcher, cap_corpus
from sentemb.data.sources import DATASETS
from sentemb.io import atomic_path, check_output, write_json
from sentemb.tracking import SECONDS, mlflow_run

log = logging.getLogger("download")


def present_before(out: Path) -> set[str]:
    """The datasets the earlier `out/MANIFEST.json` lists as present (none without one)."""
    try:
        return set(json.loads((out / MANIFEST).read_text(encoding="utf-8"))["datasets"])
    except (OSError, ValueError, KeyError, TypeError):
        return set()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--params", default="params.yaml")
    parser.add_argument("--out", default="data/raw", type=Path)
    parser.add_argument("--recorded", default="data/checksums.recorded.json")
    parser.add_argument("--metrics", type=Path, help="counts and the stage's seconds (JSON)")
    args = parser.parse_args()
    if args.metrics is not None:
        check_output(args.metrics)
    params = load_params(args.params)
    config = section(params, "data", DataConfig)
    names = config.datasets or list(DATASETS)
    unknown = sorted(set(names) - set(DATASETS))
    if unknown:
        raise DataUnavailable(f"data.datasets: unknown {unknown}; known {list(DATASETS)}")
    recorded_path = Path(args.recorded)
    recorded = json.loads(recorded_path.read_text()) if recorded_path.is_file() else {}
    mirror = (Path(args.params).resolve().parent / config.mirror).resolve()
    manifest: dict = {"datasets": {}, "missing": {}}
    before = present_before(args.out)
    with mlflow_run("download", {"data": params.get("data", {})}) as run:
        with atomic_path(args.out, folder=True) as root:
            fetcher = Fetcher(root, mirror, recorded, Path("data/cache"), config.timeout)
            expected = {n for n in names if n in before or fetcher.exists(DATASETS[n])}
            lost: dict[str, DataUnavailable] = {}
            for name in names:
                try:
                    manifest["datasets"][name] = fetcher.fetch(DATASETS[name])
                except DataUnavailable as err:
                    log.warning("%s", err)
                    manifest["missing"][name] = err.reason
                    if name in expected:
                        lost[name] = err
            if lost:
                raise unavailable(lost, mirror, args.out)
            if "wiki1m" in manifest["datasets"]:
                source = next(root / f for f in manifest["datasets"]["wiki1m"])
                count = cap_corpus(source, root / "corpus" / "train.txt", config.corpus_size)
                manifest["corpus"] = {"path": "corpus/train.txt", "sentences": count}
            write_json(root / MANIFEST, manifest)
            run.log_artifact(root / MANIFEST)
            write_json(recorded_path, dict(sorted(recorded.items())))
        counts = {
            "datasets_present": len(manifest["datasets"]),
            "datasets_missing": len(manifest["missing"]),
            "corpus_sentences": manifest.get("corpus", {}).get("sentences", 0),
        }
        if args.metrics is None:  # the wall time goes to MLflow only
            run.log_metrics({**counts, SECONDS: run.seconds})
        else:
            run.write_metrics(args.metrics, counts)
    log.info(
        "%d datasets present, %d missing: %s",
        len(manifest["datasets"]),
        len(manifest["missing"]),
        ", ".join(manifest["missing"]) or "none",
    )


def unavailable(lost: dict[str, DataUnavailable], mirror: Path, out: Path) -> DataUnavailable:
    """One error for the datasets known to exist that could not be had, before `out` is touched."""
    listed = ", ".join(f"{n} (the training corpus)" if n == "wiki1m" else n for n in lost)
    return DataUnavailable(
        f"data.mirror: {len(lost)} dataset(s) that the mirror holds or an earlier download "
        f"fetched could not be had: {listed} (first: {next(iter(lost.values()))}); nothing "
        f"was written, {out} is as it was. Point data.mirror at the offline mirror (now "
        f"{mirror}), go online, or leave them out of data.datasets"
    )


if __name__ == "__main__":
    run_stage(main)
