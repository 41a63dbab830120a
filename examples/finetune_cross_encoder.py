"""Fine-tune a cross-encoder (reranker) export on labelled (query, document) pairs, save it, rank
with it.

    python examples/finetune_cross_encoder.py MODEL --pairs pairs.jsonl --out tuned/ [--epochs 1]

MODEL is a Hub id or a folder holding a one-logit cross-encoder's fp32 export (``onnx/model.onnx``)
and its tokenizer. ``pairs.jsonl`` holds one ``{"query": ..., "document": ..., "label": 0 or 1}``
per line; without ``--pairs``, a few built-in ones. The loss is sentence-transformers'
CrossEncoder default for one logit (binary cross-entropy), the optimizer optax's AdamW. The tuned
model is written with ``save_pretrained`` and loaded back through
``transmuter.pipeline("text-ranking", out)``.
"""

import argparse
import json
import pathlib

import numpy as np
import optax
import transmuter
from transmuter import training

PAIRS = [("how do i reset my password", "Open settings, choose Account, then Reset password.", 1),
         ("how do i reset my password", "The train station is two streets north.", 0),
         ("when does the shop open", "We open at nine every weekday.", 1),
         ("when does the shop open", "Pets are welcome on a lead.", 0),
         ("is breakfast included", "The room rate includes a morning buffet.", 1),
         ("is breakfast included", "Every device is covered for two years.", 0)]


def read_pairs(path):
    if path is None:
        return PAIRS
    rows = [json.loads(line) for line in pathlib.Path(path).read_text().splitlines() if line]
    return [(row["query"], row["document"], float(row["label"])) for row in rows]


def finetune(model, pairs, out, *, epochs=1, batch_size=16, learning_rate=2e-5,
             sequence_length=256):
    """Train ``model`` on ``pairs``; returns (the saved folder, the loss of each step)."""
    rank = transmuter.pipeline("text-ranking", model, trainable=True,
                               sequence_length=sequence_length)
    data = training.batches(rank, [(q, d) for q, d, _ in pairs],
                            [float(label) for _, _, label in pairs],
                            batch_size=batch_size, shuffle=True, seed=0)
    step = training.step(rank, optax.adamw(learning_rate))  # binary cross-entropy for one logit
    params = rank.model.trainable_params
    state, losses = step.init(params), []
    for epoch in range(epochs):
        for batch in data:
            params, state, loss = step(params, state, batch)
            losses.append(float(loss))
        print(f"epoch {epoch + 1}: loss {np.mean(losses[-len(data):]):.4f}")
    transmuter.save_pretrained(rank.model, out, params=params)
    return pathlib.Path(out), losses


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("model")
    parser.add_argument("--pairs")
    parser.add_argument("--out", required=True)
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--learning-rate", type=float, default=2e-5)
    args = parser.parse_args(argv)
    pairs = read_pairs(args.pairs)
    out, _ = finetune(args.model, pairs, args.out, epochs=args.epochs,
                      batch_size=args.batch_size, learning_rate=args.learning_rate)
    tuned = transmuter.pipeline("text-ranking", out)
    query = pairs[0][0]
    documents = [d for q, d, _ in pairs if q == query]
    for hit in tuned({"query": query, "documents": documents}, return_documents=True):
        print(f"{hit['score']:.3f}  {hit['text']}")


if __name__ == "__main__":
    main()
