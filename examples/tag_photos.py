"""Tag every photo of a folder: the best-fitting tags from a list you give (zero-shot image
classification) and the objects found in it (object detection), one JSON line per photo.

    python examples/tag_photos.py photos/ --tags beach mountain city forest --out tags.jsonl
    python examples/tag_photos.py photos/ --tags cat dog --top 2 --threshold 0.9 \\
        --classifier Xenova/clip-vit-base-patch32 --detector Xenova/detr-resnet-50

Photos stream through both pipelines (generators over the folder, --batch-size at a time) with a
progress bar; each line is {"file", "tags": [{"label", "score"}, ...], "objects": {label: count}},
or {"file", "error"} for a photo that cannot be read (a corrupt or truncated file).
"""

import argparse
import collections
import json
import pathlib

import transmuter

SUFFIXES = {".jpg", ".jpeg", ".png", ".bmp", ".webp", ".tif", ".tiff"}


def photos(folder):
    return sorted(p for p in pathlib.Path(folder).rglob("*") if p.suffix.lower() in SUFFIXES)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("folder")
    parser.add_argument("--tags", nargs="+", required=True, help="the tags to choose from")
    parser.add_argument("--out", default="tags.jsonl")
    parser.add_argument("--classifier", default="Xenova/clip-vit-base-patch32")
    parser.add_argument("--detector", default="Xenova/detr-resnet-50")
    parser.add_argument("--top", type=int, default=3, help="tags kept per photo")
    parser.add_argument("--threshold", type=float, default=0.9, help="detection score to count")
    parser.add_argument("--batch-size", type=int, default=8)
    args = parser.parse_args(argv)

    files = photos(args.folder)
    classify = transmuter.pipeline("zero-shot-image-classification", args.classifier)
    detect = transmuter.pipeline("object-detection", args.detector, threshold=args.threshold)
    # on_error="return": a photo that cannot be read gets its error, the others run on
    tags = classify((str(f) for f in files), candidate_labels=args.tags,
                    batch_size=args.batch_size, progress=True, on_error="return")
    objects = detect((str(f) for f in files), batch_size=args.batch_size, on_error="return")
    failed = 0
    with open(args.out, "w", encoding="utf-8") as out:
        for file, ranked, found in zip(files, tags, objects):
            if isinstance(ranked, Exception):
                line, failed = {"file": str(file), "error": str(ranked)}, failed + 1
            else:
                counts = collections.Counter(d["label"] for d in found)
                line = {"file": str(file), "tags": ranked[:args.top],
                        "objects": dict(counts.most_common())}
            out.write(json.dumps(line) + "\n")
    print(f"{len(files) - failed} photos tagged -> {args.out}"
          + (f" ({failed} could not be read)" if failed else ""))


if __name__ == "__main__":
    main()
