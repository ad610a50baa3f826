"""Ask a PaSeR-trained model's decoder to reconstruct masked phrases (PaSeR Table 7).

    python -m sentemb.reconstruct --model models/paser-42 "Do I need a transit visa for London?"

Prints, per sentence, the original, the masked copy (its top RAKE phrases masked, as in
training) and the decoder's greedy reconstruction of the masked phrases, each ended by its
end-of-phrase token ([SEP] for BERT tokenizers), as generated.
"""

from __future__ import annotations

from pathlib import Path

import torch

from sentemb.cli import Parser, run_stage
from sentemb.config import ConfigError
from sentemb.encoder import Encoder
from sentemb.methods.paser import decoding_signal
from sentemb.methods.paser.decoder import DECODER_DIR, load_decoder
from sentemb.methods.paser.inputs import mask_phrases
from sentemb.phrases import Extractor, PhrasesConfig


def reconstruct(model: Path, sentences: list[str], language: str) -> list[dict[str, str]]:
    """Original, masked and generated text for each sentence."""
    if not (model / DECODER_DIR).is_dir():
        raise ConfigError(f"{model}: no {DECODER_DIR}/ (was it trained with method paser?)")
    encoder = Encoder.from_pretrained(str(model), "auto").eval()
    decoder, k = load_decoder(model)
    extractor = Extractor(PhrasesConfig(language=language, top_k=k), idf=None)
    tokenizer, embeddings = encoder.tokenizer, encoder.backbone.get_input_embeddings()
    rows = []
    for sentence in sentences:
        spans = [(p[2], p[3]) for p in extractor.phrases(sentence)]
        copy = mask_phrases(tokenizer, sentence, spans, k, encoder.max_length - 2)
        with torch.inference_mode():
            pooled = encoder(**encoder.tokenize([sentence, copy.text])).pooled
            signal = decoding_signal(pooled[:1], pooled[1:], decoder.config.m, decoder.config.n)
        tokens = decoder.generate(signal[0], embeddings, max(1, len(copy.targets)))
        generated = tokenizer.decode(tokens)  # phrases in text order, each ended by [SEP]
        rows.append({"original": sentence, "masked": copy.text, "generated": generated})
    return rows


def parser() -> Parser:
    parser = Parser(__doc__)
    parser.input("--model", required=True, folder=True, help="a PaSeR run, e.g. models/paser-42")
    parser.add_argument("--language", default="english", help="RAKE stopword language")
    parser.add_argument("sentences", nargs="+")
    return parser


def main() -> None:
    args = parser().parse_args()
    for row in reconstruct(args.model, args.sentences, args.language):
        for key, text in row.items():
            print(f"{key:>9}: {text}")
        print()


if __name__ == "__main__":
    run_stage(main)
