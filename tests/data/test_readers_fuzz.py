"""Every loader fed malformed input: lines from `hypothesis`, a missing file, an empty file.

A loader either reads what it is given or raises one `DataFormatError` that names the file (and
the line, where a line is to blame); nothing else escapes.
"""

from __future__ import annotations

import gzip
import re
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sentemb.data import readers
from sentemb.data.sources import SENTEVAL_DIR

STS12 = f"{SENTEVAL_DIR}/STS/STS12-en-test"


@dataclass(frozen=True)
class Loader:
    """The file a loader reads (fuzzed), a valid first line, the call, and valid companion files
    (a function of the fuzzed file's bytes, as the STS gold file must match its line count)."""

    path: str
    first: str
    load: Callable[[Path], object]
    companions: Callable[[bytes], dict[str, bytes]] = field(default=lambda data: {})


def sts_gold(data: bytes) -> dict[str, bytes]:
    lines = data.split(b"\n")
    return {f"{STS12}/STS.gs.MSRpar.txt": b"4.0\n" * (len(lines) - (lines[-1] == b""))}


ASKUBUNTU_TITLES = {"askubuntu/text_tokenized.txt.gz": gzip.compress(b"1\ta title\n2\tanother\n")}

LOADERS: dict[str, Loader] = {
    "sts12": Loader(
        f"{STS12}/STS.input.MSRpar.txt",
        "A man.\tA man.",
        lambda root: readers.read_sts_subset(root, "STS12", "MSRpar"),
        sts_gold,
    ),
    "stsb": Loader(
        f"{SENTEVAL_DIR}/STS/STSBenchmark/sts-test.csv",
        "main-captions\tMSRvid\t2012test\t0001\t5.000\tA man.\tA man.",
        lambda root: readers.read_stsb(root, "test"),
    ),
    "sick": Loader(
        f"{SENTEVAL_DIR}/SICK/SICK_trial.txt",
        "pair_ID\tsentence_A\tsentence_B\trelatedness_score\tentailment_judgment",
        lambda root: readers.read_sick(root, "trial"),
    ),
    "mr": Loader(
        f"{SENTEVAL_DIR}/MR/rt-polarity.pos",
        "a fine film",
        lambda root: readers.read_binary(root, "MR"),
        lambda data: {f"{SENTEVAL_DIR}/MR/rt-polarity.neg": b"a dull film\n"},
    ),
    "sst2": Loader(
        f"{SENTEVAL_DIR}/SST/binary/sentiment-test",
        "a fine film\t1",
        lambda root: readers.read_sst2(root, "test"),
    ),
    "trec": Loader(
        f"{SENTEVAL_DIR}/TREC/TREC_10.label",
        "NUM:date When was it ?",
        lambda root: readers.read_trec(root, "test"),
    ),
    "mrpc": Loader(
        f"{SENTEVAL_DIR}/MRPC/msr_paraphrase_test.txt",
        "Quality\t#1 ID\t#2 ID\t#1 String\t#2 String",
        lambda root: readers.read_mrpc(root, "test"),
    ),
    "chinese": Loader(
        "senteval_cn/BQ/BQ.test.data",
        "一个\t两个\t1",
        lambda root: readers.read_chinese(root, "BQ", "test"),
    ),
    "qqp": Loader(
        "qqp/dev.tsv",
        "id\tqid1\tqid2\tquestion1\tquestion2\tis_duplicate",
        lambda root: readers.read_qqp(root, ["dev"]),
    ),
    "askubuntu": Loader(
        "askubuntu/test.txt",
        "1\t2\t1 2\t0 0",
        lambda root: readers.read_askubuntu(root, "test"),
        lambda data: ASKUBUNTU_TITLES,
    ),
    "corpus": Loader(
        "corpus/train.txt",
        "A sentence.",
        lambda root: list(readers.read_corpus(root / "corpus/train.txt")),
    ),
}

ALPHABET = st.sampled_from([*"ab 1.5-\t\r,\"'é一", "nan", "inf", "NUM:x", "0", "1", "\x85"])
LINES = st.lists(ALPHABET, max_size=12).map("".join)


def load_error(name: str, files: dict[str, bytes]) -> str | None:
    """Load `files` (written under a temporary root shown as ROOT in the message); the error."""
    with tempfile.TemporaryDirectory() as folder:
        for rel, data in files.items():
            (Path(folder) / rel).parent.mkdir(parents=True, exist_ok=True)
            (Path(folder) / rel).write_bytes(data)
        try:
            LOADERS[name].load(Path(folder))
        except readers.DataFormatError as err:
            return str(err).replace(folder, "ROOT")
    return None


@pytest.mark.parametrize("name", sorted(LOADERS))
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(line=LINES, raw=st.binary(max_size=8))
def test_malformed_line_is_read_or_one_named_error(name: str, line: str, raw: bytes) -> None:
    loader = LOADERS[name]
    data = f"{loader.first}\n{line}\n".encode() + raw
    error = load_error(name, {loader.path: data, **loader.companions(data)})
    if error is not None:  # the first line is valid, so a line of this file is to blame
        assert re.match(rf"ROOT/{re.escape(loader.path)}:\d+: ", error), error


@pytest.mark.parametrize("name", sorted(LOADERS))
@pytest.mark.parametrize(
    ("data", "message"), [(None, "file not found"), (b"\n \n", "file is empty")]
)
def test_missing_or_empty_file_is_named(name: str, data: bytes | None, message: str) -> None:
    loader = LOADERS[name]
    companions = loader.companions(f"{loader.first}\n".encode())
    files = companions if data is None else {loader.path: data, **companions}
    assert load_error(name, files) == f"ROOT/{loader.path}: {message}"
