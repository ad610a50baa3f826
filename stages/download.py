"""Stage `download`: every dataset from the offline mirror or its public URL, sha256-verified.

Writes `data/raw/` (archive layout, plus `MANIFEST.json` and the built-in STS corpus
`corpus/sts.txt`, the STS sets' sentences) and keeps the sha256 recorded on first download in
`data/checksums.recorded.json`. A dataset that is known to exist (the mirror holds it, an earlier
download fetched it, or the earlier `data/raw` had it) but cannot be had now is an error, and
`data/raw` is left as it was; one that only the network has and never had (QQP, AskUbuntu
offline) is listed under `missing` with the reason, and evaluation skips it. The stage's wall
time (`seconds`) and counts go to MLflow and, with `--metrics`, to a metrics file.
"""

from __future__ import annotations

import logging
from pathlib import Path

from sentemb.cli import Parser, run_stage
from sentemb.clock import SECONDS
from sentemb.config import ConfigError, load_params, section
from sentemb.data.download import MANIFEST, DataConfig, download, repo_path
from sentemb.io import check_output, read_json, write_json
from sentemb.tracking import mlflow_run

log = logging.getLogger("download")


def parser() -> Parser:
    parser = Parser(__doc__)
    parser.input("--params", default="params.yaml", folder=False)
    parser.output("--out", default="data/raw")
    parser.output("--recorded", default="data/checksums.recorded.json")
    parser.output("--metrics", help="counts and the stage's seconds (JSON)")
    return parser


def main() -> None:
    args = parser().parse_args()
    for output in (args.recorded, args.metrics):  # refused now, not after the download
        if output is not None:
            check_output(output)
    params = load_params(args.params)
    config = section(params, "data", DataConfig)
    recorded = read_json(args.recorded) if args.recorded.is_file() else {}
    if not isinstance(recorded, dict):
        raise ConfigError(f"{args.recorded}: expected a mapping of files to sha256s")
    mirror = repo_path(config.mirror, args.params)
    with mlflow_run("download", {"data": params.get("data", {})}) as run:
        manifest = download(config, args.out, mirror, recorded, Path("data/cache"))
        write_json(args.recorded, dict(sorted(recorded.items())))
        run.log_artifact(args.out / MANIFEST)
        counts = {
            "datasets_present": len(manifest["datasets"]),
            "datasets_missing": len(manifest["missing"]),
        }
        if args.metrics is None:  # the wall time goes to MLflow only
            run.log_metrics({**counts, SECONDS: run.seconds})
        else:
            run.write_metrics(args.metrics, counts)
    missing = ", ".join(manifest["missing"]) or "none"
    log.info(
        "%d datasets present, %d missing: %s",
        len(manifest["datasets"]),
        len(manifest["missing"]),
        missing,
    )


if __name__ == "__main__":
    run_stage(main)
