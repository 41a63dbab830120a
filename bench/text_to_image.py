"""text-to-image, seconds per image at 1, 4 and 20 steps: Transmuter vs diffusers'
OnnxStableDiffusionPipeline (onnxruntime) vs diffusers' StableDiffusionPipeline (PyTorch), on a
random Stable Diffusion shaped as stabilityai/sd-turbo (bench/_diffusion_models.py).

    python bench/text_to_image.py [--scale 1] [--size 512] [--steps 1,4,20] [--repeat 3]
                                  [--guidance 0] [--backend jax|mlx] [--text-layers 23]
                                  [--no-torch]

--scale multiplies every width of the real model (1: SD-Turbo's sizes, a 3.5 GB UNet, for a
quiet machine with ~16 GB free; 0.125 runs in minutes on a laptop). The model is built and
exported once into $TRANSMUTER_BENCH_CACHE (default ~/.cache/transmuter-bench)/sd-<scale>/ by
the diffusers environment ($TRANSMUTER_DIFFUSERS_PYTHON, default /work/venvs/sd/bin/python:
tests/support/requirements-diffusion.txt), which also times the two diffusers pipelines (threads
= cores) in a subprocess.

A call is one prompt, one image, --size x --size, the fixture's SD-Turbo scheduler (Euler,
trailing), guidance_scale --guidance (0: SD-Turbo's, one UNet row; > 1 doubles the rows), timed
whole: tokenizing, the text encoder, every step, the VAE decoder, the image out. Each peer makes
one untimed call per step count first (Transmuter compiles its UNet there, once for all steps);
then the best of --repeat calls counts.
"""

import argparse
import json
import os
import pathlib
import subprocess
import sys
import time

import transmuter
from transmuter.pipelines import shared

HERE = pathlib.Path(__file__).resolve().parent
DIFFUSERS_PYTHON = os.environ.get("TRANSMUTER_DIFFUSERS_PYTHON", "/work/venvs/sd/bin/python")
CACHE = pathlib.Path(os.environ.get("TRANSMUTER_BENCH_CACHE",
                                    pathlib.Path.home() / ".cache" / "transmuter-bench"))


def model_folder(scale, text_layers):
    folder = CACHE / f"sd-{scale:g}-{text_layers}"
    if not (folder / "vae_decoder" / "model.onnx").exists():
        folder.mkdir(parents=True, exist_ok=True)
        print(f"building {folder} ...", file=sys.stderr)
        subprocess.run([DIFFUSERS_PYTHON, str(HERE / "_diffusion_models.py"), "build",
                        str(folder), "--scale", str(scale), "--text-layers", str(text_layers)],
                       check=True)
    return folder


def time_transmuter(folder, steps, size, repeat, guidance, backend, prompt):
    pipe = transmuter.pipeline("text-to-image", str(folder), backend=backend)
    out = {}
    for n in steps:
        call = dict(num_inference_steps=n, guidance_scale=guidance, height=size, width=size,
                    seed=0)
        start = time.perf_counter()
        pipe(prompt, **call)
        first = time.perf_counter() - start
        best = min(_seconds(pipe, prompt, call) for _ in range(repeat))
        out[n] = (best, first)
    info = shared.per_model(pipe.unet, "compiled", None).cache_info()
    return out, info.misses


def _seconds(pipe, prompt, call):
    start = time.perf_counter()
    pipe(prompt, **call)
    return time.perf_counter() - start


def time_diffusers(folder, args, peers):
    done = subprocess.run(
        [DIFFUSERS_PYTHON, str(HERE / "_diffusion_models.py"), "time", str(folder),
         "--steps", args.steps, "--size", str(args.size), "--repeat", str(args.repeat),
         "--guidance", str(args.guidance), "--prompt", args.prompt, "--peers", ",".join(peers)],
        check=True, capture_output=True, text=True)
    out = {}
    for line in done.stdout.splitlines():
        if line.startswith("{"):
            row = json.loads(line)
            out[row["peer"], row["steps"]] = row["seconds"]
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--scale", type=float, default=1.0)
    parser.add_argument("--text-layers", type=int, default=23)
    parser.add_argument("--size", type=int, default=512)
    parser.add_argument("--steps", default="1,4,20")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--guidance", type=float, default=0.0)
    parser.add_argument("--backend", default="jax", choices=["jax", "mlx"])
    parser.add_argument("--prompt", default="a photo of an astronaut riding a horse")
    parser.add_argument("--no-torch", action="store_true")
    args = parser.parse_args()
    steps = [int(s) for s in args.steps.split(",")]
    folder = model_folder(args.scale, args.text_layers)
    ours, compiles = time_transmuter(folder, steps, args.size, args.repeat, args.guidance,
                                     args.backend, args.prompt)
    peers = ["onnxruntime"] + ([] if args.no_torch else ["torch"])
    theirs = time_diffusers(folder, args, peers)
    print(f"SD-Turbo-shaped random model x{args.scale:g} ({folder.name}), {args.size}x"
          f"{args.size}, guidance {args.guidance:g}, {os.cpu_count()} cores, Transmuter on "
          f"{args.backend}; UNet compiles: {compiles} (one per row count and size)")
    head = f"{'steps':>5} {'transmuter s':>12} {'(1st call)':>10} {'onnxruntime s':>13} " \
           f"{'ort/ours':>8}"
    if "torch" in peers:
        head += f" {'torch s':>8} {'torch/ours':>10}"
    print(head)
    for n in steps:
        best, first = ours[n]
        ort = theirs[("onnxruntime", n)]
        line = f"{n:>5} {best:>12.3f} {first:>10.2f} {ort:>13.3f} {ort / best:>8.2f}"
        if "torch" in peers:
            pt = theirs[("torch", n)]
            line += f" {pt:>8.3f} {pt / best:>10.2f}"
        print(line)


if __name__ == "__main__":
    main()
