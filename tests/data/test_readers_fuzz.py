"""Malformed lines from `hypothesis`: every loader either reads them or raises one
`DataFormatError` that names the file and the line to blame; nothing else."""

from __future__ import annotations

import re
import tempfile
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sentemb.data import readers
from sentemb.data.sources import SENTEVAL_DIR

# (file under the root, a valid first line or header, a valid data line, the loader)
LOADERS: dict[str, tuple[str, str, Callable[[Path], object]]] = {
    "stsb": (
        f"{SENTEVAL_DIR}/STS/STSBenchmark/sts-test.csv",
        "main-captions\tMSRvid\t2012test\t0001\t5.000\tA man.\tA man.",
        lambda root: readers.read_stsb(root, "test"),
    ),
    "sick": (
        f"{SENTEVAL_DIR}/SICK/SICK_trial.txt",
        "pair_ID\tsentence_A\tsentence_B\trelatedness_score\tentailment_judgment",
        lambda root: readers.read_sick(root, "trial"),
    ),
    "sst2": (
        f"{SENTEVAL_DIR}/SST/binary/sentiment-test",
        "a fine film\t1",
        lambda root: readers.read_sst2(root, "test"),
    ),
    "trec": (
        f"{SENTEVAL_DIR}/TREC/TREC_10.label",
        "NUM:date When was it ?",
        lambda root: readers.read_trec(root, "test"),
    ),
    "mrpc": (
        f"{SENTEVAL_DIR}/MRPC/msr_paraphrase_test.txt",
        "Quality\t#1 ID\t#2 ID\t#1 String\t#2 String",
        lambda root: readers.read_mrpc(root, "test"),
    ),
    "chinese": (
        "senteval_cn/BQ/BQ.test.data",
        "一个\t两个\t1",
        lambda root: readers.read_chinese(root, "BQ", "test"),
    ),
    "corpus": (
        "corpus/train.txt",
        "A sentence.",
        lambda root: list(readers.read_corpus(root / "corpus/train.txt")),
    ),
}

ALPHABET = st.sampled_from([*"ab 1.5-\t\r,\"'é一", "nan", "inf", "NUM:x", "0", "1", "\x85"])
LINES = st.lists(ALPHABET, max_size=12).map("".join)


@pytest.mark.parametrize("name", sorted(LOADERS))
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(line=LINES, raw=st.binary(max_size=8))
def test_malformed_line_is_read_or_one_named_error(name: str, line: str, raw: bytes) -> None:
    rel, first, load = LOADERS[name]
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / rel
        path.parent.mkdir(parents=True)
        path.write_bytes(f"{first}\n{line}\n".encode() + raw)
        try:
            load(Path(folder))
        except readers.DataFormatError as err:
            # the first line is valid, so a line of this file is always to blame
            assert re.match(rf"{re.escape(str(path))}:\d+: ", str(err)), str(err)
