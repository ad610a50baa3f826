"""Models that cannot be loaded, each one error naming the param: a missing folder, a hub name
that cannot be downloaded (offline, or the hub unreachable: no retries), pickled weights (never
unpickled), a tokenizer without a pad token (pads with a defined one), and PaSeR's phrases of
another corpus, from the library up to the train stage."""

from __future__ import annotations

import json
import logging
import os
import shutil
import socketserver
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

from sentemb.config import ConfigError, read_yaml
from sentemb.encoder import Encoder
from sentemb.evaluation.encoders import load_encoder
from sentemb.losses import method_loss
from sentemb.pooling import POOLERS
from sentemb.st_model import st_model

from support import REPO
from support.stages import run_stage
from support.training import SENTENCES, STSB, paser_params

HUB_NAME = "sentemb-tests/tiny-bert"  # a hub name no hub has: only a test cache holds it


class Requests(socketserver.BaseRequestHandler):
    """Record the request line, then close the connection unanswered."""

    def handle(self) -> None:
        self.request.settimeout(10)
        line = self.request.recv(4096).split(b"\r\n")[0].decode("ascii", "replace")
        if line:  # a connection that asks nothing is no request
            self.server.requests.append(line)  # type: ignore[attr-defined]


class RefusingHub(socketserver.ThreadingTCPServer):
    """A local hub endpoint that answers no request, recording each request line: a client that
    retries asks more than once."""

    daemon_threads = False  # server_close() joins the handlers: every request is recorded

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), Requests)
        self.requests: list[str] = []

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


# -- a folder that does not exist ----------------------------------------------------------------


@pytest.mark.parametrize(
    "name",
    [
        "./no-such-model",
        "../no-such-model",
        "~/no-such-sentemb-model",
        "{tmp}/no-such-model",  # absolute
        "models/simcse-42",  # `models/` exists: a path, not the hub name models/simcse-42
        "models/simcse-42/checkpoint",
        "no such model",  # no valid hub name either
    ],
)
def test_missing_model_folder_is_named(
    name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "models").mkdir()
    name = name.format(tmp=tmp_path)
    with pytest.raises(ConfigError, match=rf"^model\.name_or_path: {name}: no such model folder$"):
        Encoder.from_pretrained(name)


@pytest.mark.parametrize(
    ("values", "language", "param"),
    [
        ({"model": {"pooler": "max"}}, "en", "model.pooler"),
        ({"eval": {"chinese": {"pooler": "max"}}}, "zh", "eval.chinese.pooler"),
    ],
)
def test_unknown_pooler_is_refused_naming_its_param_before_the_model_is_looked_up(
    values: dict, language: str, param: str, tmp_path: Path
) -> None:
    with pytest.raises(ConfigError, match=rf"^{param}: 'max' is not one of \['auto', 'cls', "):
        load_encoder("./no-such-model", language, values)


def test_a_file_is_no_model_folder(tmp_path: Path) -> None:
    (tmp_path / "model.txt").write_text("a model\n")
    with pytest.raises(ConfigError, match=r"model\.txt: a file, not a model folder$"):
        Encoder.from_pretrained(str(tmp_path / "model.txt"))


def test_missing_folder_names_the_param_that_set_it(tiny_st, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"^dclr\.complementary_model: \./nope: no such model"):
        method_loss("dclr", tiny_st, {"dclr": {"complementary_model": "./nope"}})
    params = {"eval": {"chinese": {"model": "./nope"}}}
    with pytest.raises(ConfigError, match=r"^eval\.chinese\.model: \./nope: no such model folder"):
        load_encoder("./nope", "zh", params)
    with pytest.raises(ConfigError, match=r"^model\.name_or_path: \./nope: no such model folder"):
        load_encoder("./nope", "zh", {})


# -- a hub name that cannot be downloaded --------------------------------------------------------


@pytest.fixture(scope="module")
def hub_cache(tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A Hugging Face cache (HF_HUB_CACHE layout) holding the tiny model as HUB_NAME."""
    cache = tmp_path_factory.mktemp("hf-cache")
    repo = cache / f"models--{HUB_NAME.replace('/', '--')}"
    commit = "0" * 40
    shutil.copytree(tiny_model_dir, repo / "snapshots" / commit)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(commit)
    return cache


# Loads a model as a stage does (run_stage prints one error line).
LOAD = """
import sys
from sentemb.cli import run_stage
from sentemb.encoder import Encoder

def main():
    encoder = Encoder.from_pretrained(sys.argv[1])
    print(encoder.encode(["a sentence"], show_progress=False).shape)

run_stage(main)
"""


def load_in_process(
    name: str, cache: Path, offline: bool
) -> tuple[subprocess.CompletedProcess, list[str]]:
    """Load `name` in a new process with `cache` as the Hugging Face cache and a hub endpoint that
    answers nothing (online mode unless `offline`); and the requests the hub received but
    `/api/agent-harnesses` (huggingface_hub asks it once per process)."""
    env = {  # no proxy: the requests go to the fake hub
        k: v
        for k, v in os.environ.items()
        if k not in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE") and not k.lower().endswith("_proxy")
    }
    with RefusingHub() as hub:
        threading.Thread(target=hub.serve_forever, daemon=True).start()
        env |= {"HF_HUB_CACHE": str(cache), "HF_ENDPOINT": hub.url}
        if offline:
            env["HF_HUB_OFFLINE"] = "1"
        try:
            done = subprocess.run(
                [sys.executable, "-c", LOAD, name],
                env=env,
                capture_output=True,
                text=True,
                timeout=300,
            )
        finally:
            hub.shutdown()
    return done, [r for r in hub.requests if " /api/agent-harnesses " not in r]


@pytest.mark.parametrize("offline", [True, False], ids=["HF_HUB_OFFLINE", "hub-unreachable"])
def test_hub_name_not_cached_cannot_be_downloaded(tmp_path: Path, offline: bool) -> None:
    """One error line at once: no traceback, and no retries (transformers' took 45 s): one
    request to the hub online, none offline."""
    done, requests = load_in_process("sentemb-tests/not-cached", tmp_path, offline)
    assert done.returncode == 1, done.stderr[-3000:]
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    error = done.stderr.strip().splitlines()[-1]
    prefix = "error: model.name_or_path: sentemb-tests/not-cached: no such local folder, and the "
    if offline:
        reason = "Hugging Face model of that name cannot be downloaded offline (HF_HUB_OFFLINE=1)"
    else:
        reason = "Hugging Face model of that name cannot be downloaded: the hub (http://127.0.0.1:"
    assert error.startswith(prefix + reason), error
    assert error.endswith(f"it is not in the cache {tmp_path}"), error
    assert len(requests) == (0 if offline else 1), requests


@pytest.mark.parametrize("offline", [True, False], ids=["HF_HUB_OFFLINE", "hub-unreachable"])
def test_cached_hub_model_loads_without_the_hub(hub_cache: Path, offline: bool) -> None:
    """A cached model loads with the hub asked once (online) or never (offline): after one failed
    request, nothing asks it again."""
    done, requests = load_in_process(HUB_NAME, hub_cache, offline)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip() == "(1, 32)"
    assert offline or "cannot be reached: offline?" in done.stderr
    assert len(requests) == (0 if offline else 1), requests


# -- weights saved as a pickle ---------------------------------------------------------------------


class Payload:
    """What a hostile pickle holds: unpickling it creates `marker`."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple:
        return Path.touch, (self.marker,)


@pytest.mark.parametrize("name", ["pytorch_model.bin", "pytorch_model.bin.index.json"])
def test_pickled_weights_are_refused_unopened(
    tiny_model_dir: Path, tmp_path: Path, name: str
) -> None:
    folder = tmp_path / "model"
    shutil.copytree(tiny_model_dir, folder)
    (folder / "model.safetensors").unlink()
    marker = tmp_path / "code-ran"
    if name.endswith(".json"):  # a sharded pickle: the index and its shard
        torch.save({"payload": Payload(marker)}, folder / "pytorch_model-00001-of-00001.bin")
        index = {
            "weight_map": {"embeddings.word_embeddings.weight": "pytorch_model-00001-of-00001.bin"}
        }
        (folder / name).write_text(json.dumps(index))
    else:
        torch.save({"payload": Payload(marker)}, folder / name)
    message = (
        rf"^model\.name_or_path: {folder / name}: weights saved as a pickle, which can run code "
        r"when loaded; the pipeline loads only safetensors: convert them where you trust the file"
    )
    with pytest.raises(ConfigError, match=message):
        Encoder.from_pretrained(str(folder))
    assert not marker.exists()


def test_safetensors_beside_a_pickle_are_what_loads(tiny_model_dir: Path, tmp_path: Path) -> None:
    folder = tmp_path / "model"
    shutil.copytree(tiny_model_dir, folder)
    marker = tmp_path / "code-ran"
    torch.save({"payload": Payload(marker)}, folder / "pytorch_model.bin")
    Encoder.from_pretrained(str(folder), "mean").encode(["a sentence"], show_progress=False)
    assert not marker.exists()


# -- a tokenizer without a pad token ---------------------------------------------------------------


def no_pad_copy(source: Path, target: Path, drop: tuple[str, ...] = ("pad_token",)) -> Path:
    """The tiny model with a generic fast tokenizer that has no pad token (nor the other special
    tokens in `drop`) and pads on the left."""
    shutil.copytree(source, target)
    config = json.loads((target / "tokenizer_config.json").read_text())
    for key in drop:
        config.pop(key, None)
    config |= {"tokenizer_class": "PreTrainedTokenizerFast", "padding_side": "left"}
    (target / "tokenizer_config.json").write_text(json.dumps(config))
    tokenizer = json.loads((target / "tokenizer.json").read_text())
    tokenizer["padding"] = None
    (target / "tokenizer.json").write_text(json.dumps(tokenizer))
    return target


@pytest.mark.parametrize("pooler", [name for name, spec in POOLERS.items() if not spec.dense])
def test_tokenizer_without_pad_token_pads_with_a_defined_one(
    tiny_model_dir: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture, pooler: str
) -> None:
    """It pads with [SEP] on the right: a sentence's vector is the same alone or in a batch."""
    folder = no_pad_copy(tiny_model_dir, tmp_path / "model")
    with caplog.at_level(logging.WARNING, logger="sentemb.model_checks"):
        encoder = Encoder.from_pretrained(str(folder), pooler)
    assert (encoder.tokenizer.pad_token, encoder.tokenizer.padding_side) == ("[SEP]", "right")
    assert f"model.name_or_path: the tokenizer of {folder} has no pad token" in caplog.text
    encoder.precision = "fp32"
    sentences = ["short", "a much longer sentence than the first one, with padding after short"]
    batch = encoder.encode(sentences, batch_size=2, show_progress=False)
    alone = np.stack([encoder.encode([s], show_progress=False)[0] for s in sentences])
    np.testing.assert_allclose(batch, alone, atol=1e-5)


def test_tokenizer_without_any_token_to_pad_with_is_refused(
    tiny_model_dir: Path, tmp_path: Path
) -> None:
    drop = ("pad_token", "sep_token", "unk_token", "cls_token", "mask_token")
    folder = no_pad_copy(tiny_model_dir, tmp_path / "model", drop)
    with pytest.raises(
        ConfigError, match=r"^model\.name_or_path: the tokenizer of .* no pad token"
    ):
        Encoder.from_pretrained(str(folder))


def test_paser_refuses_padding_with_its_end_of_phrase_token(
    tiny_model_dir: Path, tmp_path: Path
) -> None:
    """PaSeR's decoder masks padding: a pad that is [SEP] would hide every end of phrase."""
    model = st_model(str(no_pad_copy(tiny_model_dir, tmp_path / "model")), "cls_before_pooler", 32)
    with pytest.raises(ConfigError, match=r"^model\.name_or_path: paser needs distinct mask, st"):
        method_loss("paser", model, {"paser": paser_params(tmp_path / "phrases")})


# -- the train stage -------------------------------------------------------------------------------


@pytest.fixture
def train_workspace(tmp_path: Path, mirror: Path, tiny_model_dir: Path) -> Path:
    """A workspace for stages/train.py: 32 corpus sentences that are not SENTENCES, the STS-B
    dev set, PaSeR's phrases of SENTENCES (another corpus) and the tiny model."""
    dev = f"{STSB}/sts-dev.csv"
    (tmp_path / "data" / dev).parent.mkdir(parents=True)
    shutil.copyfile(mirror / dev, tmp_path / "data" / dev)
    corpus = [f"another corpus, line {i}, about {i % 3} things" for i in range(32)]
    (tmp_path / "data" / "corpus.txt").write_text("\n".join(corpus) + "\n")
    params = read_yaml(REPO / "params.yaml")
    params["model"]["name_or_path"] = str(tiny_model_dir)
    params["train"] |= {"batch_size": 8, "max_steps": 2}
    params["paser"] |= paser_params(tmp_path / "phrases")
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(params))
    (tmp_path / "models").mkdir()  # where trained models go: `models/x` is a path here
    return tmp_path


def train(workspace: Path, method: str, **model: str) -> str:
    """Run the train stage; it must fail with one error line and write nothing. The line."""
    if model:
        params = read_yaml(workspace / "params.yaml")
        params["model"] |= model
        (workspace / "params.yaml").write_text(yaml.safe_dump(params))
    before = sorted(p for p in workspace.rglob("*"))
    done = run_stage(
        "train.py",
        [
            *("--method", method, "--seed", "1", "--data", "data", "--out", "models/run"),
            *("--metrics", "m.json", "--plots", "plots", "--checkpoints", "checkpoints"),
        ],
        workspace,
        {**os.environ, "MLFLOW_TRACKING_URI": f"sqlite:///{workspace}/mlflow.db"},
    )
    assert done.returncode == 1, done.stderr[-3000:]
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    assert sorted(p for p in workspace.rglob("*")) == before, done.stderr[-3000:]
    return done.stderr.strip().splitlines()[-1]


def test_train_stage_refuses_a_missing_model_folder(train_workspace: Path) -> None:
    error = train(train_workspace, "simcse", name_or_path="models/simcse-42")
    assert error == "error: model.name_or_path: models/simcse-42: no such model folder"


def test_train_stage_refuses_phrases_of_another_corpus(train_workspace: Path) -> None:
    phrases = train_workspace / "phrases" / "rake.jsonl"
    error = train(train_workspace, "paser")
    assert error.startswith(
        f"error: paser.phrases: {phrases} was made from another corpus ({len(SENTENCES)} "
        "distinct sentences; the training corpus has 32, and it has no row for the training "
        "sentence 'another corpus, line 0, about 0 things')"
    ), error
