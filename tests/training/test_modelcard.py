"""The trained model folder: a sentence-transformers folder with a model card (issue 17)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from sentemb.encoder import Encoder
from sentemb.io import MARKER
from sentemb.training.callback import TrainResult
from sentemb.training.modelcard import CARD, CardInfo, model_card, write_model_card

from support.training import make_job

SENTENCES = ["A man is playing a guitar.", "Two dogs run in the snow.", "A man plays music."]


def info(**changes: object) -> CardInfo:
    values: dict = {
        "base_model": "sentence-transformers/all-MiniLM-L6-v2",
        "pooler": "cls_before_pooler",
        "train_max_length": 32,
        "max_length": 512,
        "dim": 384,
        "method": "simcse+iscse",
        "seed": 42,
        "params": {"train": {"batch_size": 64, "learning_rate": 3e-5}, "iscse": {"k": 16}},
        "metrics": {"best_dev": 81.234567, "best_step": 250, "steps": 500},
    }
    return CardInfo(**{**values, **changes})


def test_card_says_model_training_results_and_how_to_load() -> None:
    card = model_card(info(warnings=["the loss was 0 at every logged step"]))
    front, body = card.split("---\n")[1], card.split("---\n", 2)[2]
    assert "library_name: sentence-transformers" in front
    assert "base_model: sentence-transformers/all-MiniLM-L6-v2" in front
    assert "- simcse\n- iscse" in front
    pooling = "`cls_before_pooler` (sentence-transformers `pooling_mode_cls_token`)"
    assert f"| pooling | {pooling} |" in body
    assert "| max length | 32 tokens (training), 512 (encoding) |" in body
    assert "| dimensions | 384 |" in body
    assert "### `iscse`" in body and "| `k` | 16 |" in body
    assert "| `learning_rate` | 3e-05 |" in body
    assert "| `best_dev` | 81.2346 |" in body and "| `steps` | 500 |" in body
    assert "- the loss was 0 at every logged step" in body
    assert 'SentenceTransformer("path/to/this/folder")' in body
    assert 'Encoder.from_pretrained("path/to/this/folder")' in body


def test_card_of_a_pooler_sentence_transformers_lacks_loads_with_sentemb_only() -> None:
    card = model_card(info(pooler="first_last_avg"))
    assert "library_name: transformers" in card
    assert "SentenceTransformer(" not in card and "Encoder.from_pretrained(" in card


def test_card_is_the_same_wherever_and_whenever_written(tmp_path: Path) -> None:
    for folder in (tmp_path / "a", tmp_path / "b"):
        folder.mkdir()
        write_model_card(folder, info())
    assert (tmp_path / "a" / CARD).read_bytes() == (tmp_path / "b" / CARD).read_bytes()
    assert str(tmp_path).encode() not in (tmp_path / "a" / CARD).read_bytes()


def test_trained_folder_is_a_sentence_transformers_folder_with_its_card(
    tiny_model_dir: Path, tmp_path: Path
) -> None:
    """The card is written inside the folder output (listed in its .sentemb-output, so a rerun
    may replace it), and sentence-transformers loads the folder: modules.json, the pooling
    config, and the vectors of our Encoder in fp32."""
    from sentence_transformers import SentenceTransformer

    job = make_job(tiny_model_dir, "simcse", tmp_path / "ck", max_steps=2, eval_steps=2)
    seen: list[TrainResult] = []

    def card(folder: Path, result: TrainResult) -> None:
        seen.append(result)
        write_model_card(folder, info(base_model=str(tiny_model_dir), dim=32))

    job.write_card = card
    out = tmp_path / "model"
    result = job.train(out, tmp_path / "ck")
    assert seen == [result]
    assert CARD in (out / MARKER).read_text().splitlines()
    assert {"modules.json", "sentence_bert_config.json", "1_Pooling"} <= {
        p.name for p in out.iterdir()
    }
    ours = Encoder.from_pretrained(str(out), precision="fp32").encode(SENTENCES, 2)
    theirs = SentenceTransformer(str(out), device="cpu").encode(SENTENCES)
    np.testing.assert_allclose(theirs, ours, atol=1e-5)
