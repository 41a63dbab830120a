"""Detect objects in every photo of a folder and draw the boxes on copies of the photos.

    python examples/draw_detections.py photos/ --out boxed/ --model Xenova/detr-resnet-50
    python examples/draw_detections.py photos/ --out boxed/ --threshold 0.7 --batch-size 4

Each photo is saved under --out with its boxes and labels drawn, and every detection is one
line of --out/detections.jsonl ({"file", "score", "label", "box"}). Photos stream through the
pipeline (a generator over the folder), with a progress bar; a photo that cannot be read (a
corrupt or truncated file) is reported and skipped.
"""

import argparse
import json
import pathlib

from PIL import Image, ImageDraw

import transmuter

SUFFIXES = {".jpg", ".jpeg", ".png", ".bmp", ".webp", ".tif", ".tiff"}
COLORS = ["#e6194b", "#3cb44b", "#4363d8", "#f58231", "#911eb4", "#46f0f0", "#f032e6"]


def photos(folder):
    return sorted(p for p in pathlib.Path(folder).rglob("*") if p.suffix.lower() in SUFFIXES)


def draw(image, detections):
    """A copy of ``image`` with each detection's box and "label score" drawn on it."""
    image = image.convert("RGB")
    pen = ImageDraw.Draw(image)
    labels = sorted({d["label"] for d in detections})
    for d in detections:
        box, color = d["box"], COLORS[labels.index(d["label"]) % len(COLORS)]
        pen.rectangle([box["xmin"], box["ymin"], box["xmax"], box["ymax"]], outline=color, width=2)
        pen.text((box["xmin"] + 2, box["ymin"] + 1), f"{d['label']} {d['score']:.2f}", fill=color)
    return image


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("folder")
    parser.add_argument("--out", required=True)
    parser.add_argument("--model", default="Xenova/detr-resnet-50")
    parser.add_argument("--threshold", type=float, default=0.9)
    parser.add_argument("--batch-size", type=int, default=4)
    args = parser.parse_args(argv)

    files = photos(args.folder)
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    detect = transmuter.pipeline("object-detection", args.model, threshold=args.threshold)
    results = detect((str(f) for f in files), batch_size=args.batch_size, progress=True,
                     on_error="return")  # a corrupt photo gets its error, the others run on
    skipped = 0
    with open(out / "detections.jsonl", "w", encoding="utf-8") as lines:
        for file, detections in zip(files, results):
            if isinstance(detections, Exception):
                print(f"skipped: {detections}")
                skipped += 1
                continue
            draw(Image.open(file), detections).save(out / f"{file.stem}.png")
            for d in detections:
                lines.write(json.dumps({"file": str(file), **d}) + "\n")
    print(f"{len(files) - skipped} photos -> {out}" + (f" ({skipped} skipped)" if skipped else ""))


if __name__ == "__main__":
    main()
