"""Caption every image of a folder (recursively) into Parquet with Ray Data (image-to-text).

    pip install -e ".[ray]"
    python examples/ray_caption_images.py PHOTOS/ MODEL out/ [--concurrency 2] [--batch-size 16]

Writes Parquet files under ``out/``, one row per image: ``path``, ``generated_text`` and
``error`` (None, or why that image failed: kept with a null caption instead of failing the job).
MODEL is a Hub id (e.g. Xenova/vit-gpt2-image-captioning, Xenova/trocr-small-printed) or a
folder every Ray node can read (made absolute here). ``read_images`` decodes the files into HWC
arrays, which the pipeline takes as it takes PIL images.
"""

import argparse
import pathlib

from ray_embed_folder import model_argument

EXTENSIONS = [".png", ".jpg", ".jpeg", ".bmp", ".gif", ".tiff", ".webp"]


def image_files(folder):
    return sorted(str(p.resolve()) for p in pathlib.Path(folder).rglob("*")
                  if p.is_file() and p.suffix.lower() in EXTENSIONS)


def caption_images(folder, model, out, concurrency=2, batch_size=16, max_new_tokens=32,
                   cpus_per_actor=1.0):
    """Caption the images under ``folder`` into Parquet under ``out``; returns the rows written."""
    import ray
    import ray.data

    from transmuter.integrations.ray import TransmuterPredictor

    files = image_files(folder)
    if not files:
        raise SystemExit(f"No images ({', '.join(EXTENSIONS)}) under {folder}")
    if not ray.is_initialized():
        ray.init()
    ds = ray.data.read_images(files, include_paths=True, mode="RGB")
    ds = ds.map_batches(TransmuterPredictor, batch_size=batch_size, num_cpus=cpus_per_actor,
                        compute=ray.data.ActorPoolStrategy(size=concurrency),
                        fn_constructor_kwargs=dict(task="image-to-text",
                                                   model=model_argument(model),
                                                   max_new_tokens=max_new_tokens,
                                                   on_error="column"))
    ds.drop_columns(["image"]).write_parquet(str(out))
    return len(files)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("folder", help="folder of images (searched recursively)")
    parser.add_argument("model", help="Hub id or folder (readable on every node)")
    parser.add_argument("out", help="output folder of Parquet files")
    parser.add_argument("--concurrency", type=int, default=2, help="actors (default 2)")
    parser.add_argument("--cpus-per-actor", type=float, default=1.0,
                        help="Ray CPUs each actor holds (default 1; leave some for reading)")
    parser.add_argument("--batch-size", type=int, default=16, help="rows per batch (default 16)")
    parser.add_argument("--max-new-tokens", type=int, default=32)
    args = parser.parse_args(argv)
    rows = caption_images(args.folder, args.model, args.out, args.concurrency, args.batch_size,
                          args.max_new_tokens, args.cpus_per_actor)
    print(f"{rows} images captioned into {args.out}")


if __name__ == "__main__":
    main()
