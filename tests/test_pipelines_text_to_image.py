"""text-to-image against diffusers 0.42 on tests/fixtures/stable-diffusion (a tiny random SD):
OnnxStableDiffusionPipeline on the same ONNX files (onnxruntime) and StableDiffusionPipeline on
the same torch models, recorded by tests/support/record_text_to_image.py with the same seed (the
latents and every step's noise drawn from np.random.RandomState(seed), as the pipeline draws
them)."""

import json

import numpy as np
import pytest

import transmuter
from transmuter.errors import PipelineError, TransmuterError
from transmuter.pipelines import shared
from transmuter.pipelines.vision.diffusion.schedulers import scheduler_for
from tests import fixtures

FX = fixtures.ROOT / "stable-diffusion"
RECORD = json.loads((FX / "references/text_to_image.json").read_text())
CASES = {c["name"]: c for c in RECORD["cases"]}
BASE = json.loads((FX / "scheduler/scheduler_config.json").read_text())
# Latents: the UNet's float32 sums (convolutions, attention) run in another order than
# onnxruntime's and torch's, ~1e-6 of a value; the latents reach |x| = 40 (Euler's first sigma is
# 14.6), so 1e-4 absolute. Measured: <= 2.1e-5 on both backends against both references.
LATENTS_ATOL = 1e-4
# Images: the VAE decoder's output in [0, 1]; measured <= 1.8e-6.
IMAGES_ATOL = 1e-5

_PIPES = {}


def pipe(backend):
    if backend not in _PIPES:
        _PIPES[backend] = transmuter.pipeline("text-to-image", FX, backend=backend)
    return _PIPES[backend]


def _call(p, case, **options):
    p.scheduler_config = {**BASE, **case["overrides"], "_class_name": case["scheduler"]}
    try:
        return p(RECORD["prompt"], seed=RECORD["seed"], height=RECORD["height"],
                 width=RECORD["width"], **case["call"], **options)
    finally:
        p.scheduler_config = BASE


def _rows(case):
    """The UNet's rows: 2 with classifier-free guidance or two images, else 1."""
    call = case["call"]
    return (2 if call["guidance_scale"] > 1 else 1) * call.get("num_images_per_prompt", 1)


# XLA compiles the UNet once per row count (~11 s each on 2 cores): the default suite runs JAX
# on the two-row cases and MLX on all; the one-row JAX cases run under `slow`.
PARAMS = [pytest.param(backend, name, id=f"{backend}-{name}",
                       marks=[pytest.mark.slow] if backend == "jax" and _rows(c) == 1 else [])
          for backend in ("jax", "mlx") for name, c in CASES.items()]


@pytest.mark.parametrize("name", CASES)
def test_schedule_is_diffusers(name):
    # the same float32 operations as diffusers' (torch's linspace and cumprod reproduced): equal
    case = CASES[name]
    s = scheduler_for({**BASE, **case["overrides"], "_class_name": case["scheduler"]})
    s.set_timesteps(case["call"]["num_inference_steps"])
    want = case["schedule"]
    np.testing.assert_array_equal(s.timesteps.astype(np.float64), want["timesteps"])
    assert float(s.init_noise_sigma) == want["init_noise_sigma"]
    if "sigmas" in want:
        np.testing.assert_array_equal(s.sigmas.astype(np.float64), want["sigmas"])


@pytest.mark.parametrize("backend,name", PARAMS)
def test_matches_diffusers(backend, name):
    case, p = CASES[name], pipe(backend)
    n = case["call"].get("num_images_per_prompt", 1)
    ref = np.load(FX / "references/text_to_image.npz")
    latents = np.asarray(_call(p, case, output_type="latent"), np.float32).reshape(n, 4, 4, 4)
    images = np.asarray(_call(p, case, output_type="np")).reshape(n, 32, 32, 3)
    for which in ("onnx", "torch") if case["torch"] else ("onnx",):
        np.testing.assert_allclose(latents, ref[f"{name}/{which}/latents"][-1], rtol=0,
                                   atol=LATENTS_ATOL, err_msg=f"{name} latents vs {which}")
        np.testing.assert_allclose(images, ref[f"{name}/{which}/images"], rtol=0,
                                   atol=IMAGES_ATOL, err_msg=f"{name} images vs {which}")


@pytest.mark.parametrize("backend", ["jax", "mlx"])
def test_the_unet_compiles_once_for_all_steps(backend):
    # the module's pipeline: its UNet may have run this shape (then no compile) or not (one)
    p = pipe(backend)
    compiled = shared.per_model(p.unet, "compiled", None)
    before = compiled.cache_info()
    p("a cat", num_inference_steps=4, guidance_scale=2.0, height=32, width=32, seed=0)
    info = compiled.cache_info()
    misses, hits = info.misses - before.misses, info.hits - before.hits
    assert misses + hits == 4 and misses <= 1  # the timestep is an input, not a constant


def test_pil_images_are_the_arrays_rounded():
    p = pipe("mlx")
    options = dict(num_inference_steps=2, guidance_scale=2.0, height=32, width=32, seed=3)
    image = p("a cat", **options)
    array = p("a cat", output_type="np", **options)
    assert image.size == (32, 32) and image.mode == "RGB"
    np.testing.assert_array_equal(np.asarray(image), (array * 255).round().astype(np.uint8))
    two = p("a cat", num_images_per_prompt=2, **options)
    assert len(two) == 2 and not np.array_equal(np.asarray(two[0]), np.asarray(two[1]))
    assert len(p(["a cat", "a dog"], **options)) == 2


def test_given_latents_replace_the_seeds_draw():
    p = pipe("mlx")
    case = CASES["euler-4-cfg"]
    draws = np.random.RandomState(RECORD["seed"]).randn(1, 4, 4, 4).astype(np.float32)
    p.scheduler_config = BASE
    got = p(RECORD["prompt"], latents=draws, height=32, width=32, output_type="latent",
            **case["call"])
    ref = np.load(FX / "references/text_to_image.npz")
    np.testing.assert_allclose(got, ref["euler-4-cfg/onnx/latents"][-1][0], rtol=0,
                               atol=LATENTS_ATOL)


@pytest.mark.parametrize("options,words", [
    (dict(height=30), "multiple of 8"),
    (dict(num_inference_steps=0), "num_inference_steps"),
    (dict(num_images_per_prompt=0), "num_images_per_prompt"),
    (dict(output_type="pt"), "output_type"),
    (dict(seed="1"), "seed"),
    (dict(latents=np.zeros((1, 4, 8, 8))), "latents must have the shape (1, 4, 4, 4)"),
])
def test_bad_options_are_named(options, words):
    with pytest.raises(PipelineError, match=words.replace("(", r"\(").replace(")", r"\)")):
        pipe("mlx")("a cat", **{"height": 32, "width": 32, **options})


def test_an_unknown_scheduler_or_prompt_is_refused():
    p = pipe("mlx")
    p.scheduler_config = {**BASE, "_class_name": "PNDMScheduler"}
    try:
        with pytest.raises(PipelineError, match="PNDMScheduler"):
            p("a cat", height=32, width=32)
    finally:
        p.scheduler_config = BASE
    with pytest.raises(TransmuterError, match="empty"):
        p("  ", height=32, width=32, num_inference_steps=1)
    with pytest.raises(PipelineError, match="karras"):
        scheduler_for({**BASE, "use_karras_sigmas": True})


def test_the_task_of_a_diffusers_folder_is_text_to_image():
    assert transmuter.pipeline(model=str(FX), backend="mlx").task == "text-to-image"


def test_the_command_line_writes_a_png_per_prompt(tmp_path):
    from PIL import Image

    from transmuter import cli

    prompts = tmp_path / "prompts.txt"
    prompts.write_text(f"{RECORD['prompt']}\n{RECORD['prompt']}\n")
    case = CASES["euler-1"]
    options = {**case["call"], "seed": RECORD["seed"], "height": 32, "width": 32}
    out = tmp_path / "out.jsonl"
    assert cli.main(["run", "text-to-image", str(FX), "-i", str(prompts), "-o", str(out),
                     "--backend", "mlx", "--quiet", "--options", json.dumps(options)]) == 0
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert [line["input"] for line in lines] == [RECORD["prompt"]] * 2
    want = np.load(FX / "references/text_to_image.npz")["euler-1/onnx/images"][0]
    for line in lines:
        png = np.asarray(Image.open(line["output"]["file"]), np.int16)
        # diffusers' numpy_to_pil rounds x * 255; a value within IMAGES_ATOL of a half level
        # may round the other way
        assert np.abs(png - (want * 255).round()).max() <= 1


def test_the_example_renders_a_prompt_list(tmp_path, capsys):
    import importlib.util

    from PIL import Image

    path = fixtures.ROOT.parent.parent / "examples" / "render_prompts.py"
    spec = importlib.util.spec_from_file_location("render_prompts", path)
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    prompts = tmp_path / "prompts.txt"
    prompts.write_text(f"{RECORD['prompt']}\n\nsecond prompt\n")
    example.main([str(prompts), str(tmp_path / "out"), "--model", str(FX), "--steps", "1",
                  "--guidance", "0", "--seed", str(RECORD["seed"]), "--size", "32",
                  "--backend", "mlx"])
    index = (tmp_path / "out" / "prompts.tsv").read_text().splitlines()
    assert index == [f"00000.png\t{RECORD['prompt']}", "00001.png\tsecond prompt"]
    want = np.load(FX / "references/text_to_image.npz")["euler-1/onnx/images"][0]
    png = np.asarray(Image.open(tmp_path / "out" / "00000.png"), np.int16)
    assert np.abs(png - (want * 255).round()).max() <= 1  # rounding at a half level, as above
    assert "2 images" in capsys.readouterr().out


def test_clip_from_vocab_and_merges_is_the_tokenizer_json(tmp_path):
    # SD repos (stabilityai's, the exports made from them) keep CLIP's slow files only: built
    # from them, the ids equal transformers' tokenizer.json of the same vocabulary
    from transmuter.pipelines.vision.diffusion.pipeline import _tokenizer

    saved = json.loads((FX / "tokenizer/tokenizer.json").read_text())
    folder = tmp_path / "tokenizer"
    folder.mkdir()
    (folder / "vocab.json").write_text(json.dumps(saved["model"]["vocab"]))
    merges = [m if isinstance(m, str) else " ".join(m) for m in saved["model"]["merges"]]
    (folder / "merges.txt").write_text("#version: 0.2\n" + "\n".join(merges) + "\n")
    (folder / "tokenizer_config.json").write_text((FX / "tokenizer/tokenizer_config.json")
                                                  .read_text())
    slow = _tokenizer(transmuter.hub.resolve(str(tmp_path)))
    fast = _tokenizer(transmuter.hub.resolve(str(FX)))
    for text in ["a photo of a cat", "Hello,   World!! it's 42 o'clock", "Ünïcode café",
                 "<|startoftext|>x<|endoftext|>"]:
        assert slow.encode(text).ids == fast.encode(text).ids, text
    assert slow.backend.encode("").ids == fast.backend.encode("").ids
