"""Embed every .txt file of a folder (recursively) into Parquet with Ray Data.

    pip install -e ".[ray]"
    python examples/ray_embed_folder.py DOCS/ MODEL out/ [--concurrency 2] [--batch-size 1024]

Writes Parquet files under ``out/``, one row per non-empty file: ``path`` (absolute),
``embedding`` (float32, the model's width) and ``error`` (None, or why that file failed: it is
kept, with a null embedding, instead of failing the job). MODEL is a Hub id or a folder that
every Ray node can read (made absolute here; workers do not run in this directory), e.g. the
real all-MiniLM-L6-v2 of ``bash tests/support/setup_real_models.sh``
(~/.cache/transmuter-tests/all-MiniLM-L6-v2). Without a running cluster (RAY_ADDRESS), Ray
starts one on this machine; ``--concurrency`` actors each build the pipeline once.
"""

import argparse
import os
import pathlib


def text_files(folder):
    return sorted(str(p.resolve()) for p in pathlib.Path(folder).rglob("*.txt") if p.is_file())


def decode(batch):
    """read_binary_files' ``bytes`` as UTF-8 ``text``; blank files are left out."""
    import numpy as np

    texts = [b.decode("utf-8", errors="replace") for b in batch["bytes"]]
    keep = np.array([bool(t.strip()) for t in texts], dtype=bool)
    return {"path": np.asarray(batch["path"])[keep],
            "text": np.array([t for t, k in zip(texts, keep) if k], dtype=object)}


def model_argument(model):
    """A local folder made absolute (Ray workers run elsewhere); a Hub id as it is."""
    return str(pathlib.Path(model).resolve()) if os.path.isdir(model) else model


def embed_folder(folder, model, out, concurrency=2, batch_size=1024, cpus_per_actor=1.0):
    """Embed the .txt files under ``folder`` into Parquet under ``out``; returns the number of
    rows written and of rows whose ``error`` is set."""
    import pyarrow.parquet
    import ray
    import ray.data

    from transmuter.integrations.ray import TransmuterPredictor

    files = text_files(folder)
    if not files:
        raise SystemExit(f"No .txt files under {folder}")
    if not ray.is_initialized():
        ray.init()
    ds = ray.data.read_binary_files(files, include_paths=True).map_batches(decode)
    ds = ds.map_batches(TransmuterPredictor, batch_size=batch_size, num_cpus=cpus_per_actor,
                        compute=ray.data.ActorPoolStrategy(size=concurrency),
                        fn_constructor_kwargs=dict(task="text-embedding",
                                                   model=model_argument(model),
                                                   on_error="column"))
    ds.drop_columns(["text"]).write_parquet(str(out))
    errors = pyarrow.parquet.read_table(str(out), columns=["error"])["error"]
    return len(errors), len(errors) - errors.null_count


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("folder", help="folder of .txt files (searched recursively)")
    parser.add_argument("model", help="Hub id or folder (readable on every node)")
    parser.add_argument("out", help="output folder of Parquet files")
    parser.add_argument("--concurrency", type=int, default=2, help="actors (default 2)")
    parser.add_argument("--cpus-per-actor", type=float, default=1.0,
                        help="Ray CPUs each actor holds (default 1; leave some for reading)")
    parser.add_argument("--batch-size", type=int, default=1024,
                        help="rows per call of an actor, sorted by length inside (default 1024)")
    args = parser.parse_args(argv)
    rows, failed = embed_folder(args.folder, args.model, args.out, args.concurrency,
                                args.batch_size, args.cpus_per_actor)
    print(f"{rows} files embedded into {args.out} ({failed} failed: see their 'error' column)")


if __name__ == "__main__":
    main()
