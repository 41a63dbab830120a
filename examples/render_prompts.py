"""Render a list of prompts (one a line of a text file) to PNG files with Stable Diffusion.

    python examples/render_prompts.py prompts.txt renders/
    python examples/render_prompts.py prompts.txt renders/ --model onnx-community/sd-turbo \\
        --steps 1 --guidance 0 --seed 42 --images 2

The prompts stream through one text-to-image pipeline with a progress bar; the UNet compiles once
for the first prompt and every later step and prompt reuses it. Prompt number i becomes
``renders/0000i.png`` (with --images n: ``0000i_0.png`` ... ``0000i_{n-1}.png``), and
``renders/prompts.tsv`` lists each file beside its prompt. The seed is the same for every
prompt (as diffusers' ``generator=np.random.RandomState(seed)``), so one prompt's image does not
depend on the others; SD-Turbo makes its images in 1 step without guidance.
"""

import argparse
import pathlib

import transmuter


def prompts(path):
    lines = pathlib.Path(path).read_text(encoding="utf-8").splitlines()
    return [line.strip() for line in lines if line.strip()]


def render(pipe, texts, folder, **options):
    """Write each prompt's images into ``folder``; returns the files, prompt by prompt."""
    folder = pathlib.Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    written, index = [], []
    for i, images in enumerate(pipe(iter(texts), progress=True, **options)):
        images = images if isinstance(images, list) else [images]
        names = [f"{i:05d}.png"] if len(images) == 1 else \
            [f"{i:05d}_{k}.png" for k in range(len(images))]
        for image, name in zip(images, names):
            image.save(folder / name)
            index.append(f"{name}\t{texts[i]}")
        written.append([folder / n for n in names])
    (folder / "prompts.tsv").write_text("".join(line + "\n" for line in index), encoding="utf-8")
    return written


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("prompts", help="a text file, one prompt a line")
    parser.add_argument("folder", help="where the PNG files go")
    parser.add_argument("--model", default="onnx-community/sd-turbo")
    parser.add_argument("--steps", type=int, default=1)
    parser.add_argument("--guidance", type=float, default=0.0)
    parser.add_argument("--negative-prompt")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--images", type=int, default=1, help="images per prompt")
    parser.add_argument("--size", type=int, help="height and width (default: the model's)")
    parser.add_argument("--backend", default="jax", choices=["jax", "mlx"])
    args = parser.parse_args(argv)
    pipe = transmuter.pipeline("text-to-image", args.model, backend=args.backend)
    size = {} if args.size is None else {"height": args.size, "width": args.size}
    files = render(pipe, prompts(args.prompts), args.folder, num_inference_steps=args.steps,
                   guidance_scale=args.guidance, negative_prompt=args.negative_prompt,
                   seed=args.seed, num_images_per_prompt=args.images, **size)
    print(f"{sum(map(len, files))} images in {args.folder}")


if __name__ == "__main__":
    main()
