"""Fine-tune a sentence-embedding export on (anchor, positive) pairs, save it, embed with it.

    python examples/finetune_embeddings.py MODEL --pairs pairs.jsonl --out tuned/ [--epochs 1]

MODEL is a Hub id or a folder holding the fp32 export (``onnx/model.onnx``; a quantized or half
export cannot train: fine-tune the fp32 one and quantize afterwards) and its sentence-transformers
files. ``pairs.jsonl`` holds one ``{"anchor": ..., "positive": ...}`` per line; without
``--pairs``, a few built-in pairs. The loss is sentence-transformers'
MultipleNegativesRankingLoss (in-batch negatives), the optimizer optax's AdamW. The tuned model is
written with ``save_pretrained`` (the same graph, new weights, the repo's other files copied) and
loaded back through ``transmuter.pipeline("text-embedding", out)``.
"""

import argparse
import json
import pathlib

import numpy as np
import optax
import transmuter
from transmuter import training

PAIRS = [("How do I reset my password?", "Open settings, choose Account, then Reset password."),
         ("Where is the nearest station?", "The train station is two streets north."),
         ("What time does the shop open?", "We open at nine every weekday."),
         ("Can I bring my dog?", "Pets are welcome on a lead."),
         ("Is breakfast included?", "The room rate includes a morning buffet."),
         ("How long is the warranty?", "Every device is covered for two years.")]


def read_pairs(path):
    if path is None:
        return PAIRS
    rows = [json.loads(line) for line in pathlib.Path(path).read_text().splitlines() if line]
    return [(row["anchor"], row["positive"]) for row in rows]


def finetune(model, pairs, out, *, epochs=1, batch_size=16, learning_rate=2e-5,
             sequence_length=128):
    """Train ``model`` on ``pairs``; returns (the saved folder, the loss of each step)."""
    embed = transmuter.pipeline("text-embedding", model, trainable=True,
                                sequence_length=sequence_length)
    data = training.batches(embed, pairs, batch_size=batch_size, shuffle=True, seed=0)
    step = training.step(embed, optax.adamw(learning_rate))  # MNRL: the task's default
    params = embed.model.trainable_params
    state, losses = step.init(params), []
    for epoch in range(epochs):
        for batch in data:
            params, state, loss = step(params, state, batch)
            losses.append(float(loss))
        print(f"epoch {epoch + 1}: loss {np.mean(losses[-len(data):]):.4f}")
    transmuter.save_pretrained(embed.model, out, params=params)
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
    tuned = transmuter.pipeline("text-embedding", out)
    anchors, positives = tuned([a for a, _ in pairs]), tuned([p for _, p in pairs])
    scores = np.array(anchors) @ np.array(positives).T  # cosine: the vectors are normalized
    hits = np.mean(scores.argmax(axis=1) == np.arange(len(pairs)))
    print(f"saved to {out}; each anchor's best match is its own positive for {hits:.0%}")


if __name__ == "__main__":
    main()
