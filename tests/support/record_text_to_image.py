"""References of the text-to-image pipeline on tests/fixtures/stable-diffusion, from diffusers 0.42:

  * ``onnx``:  OnnxStableDiffusionPipeline on the fixture's own ONNX files (onnxruntime);
  * ``torch``: StableDiffusionPipeline on the same tiny torch models (families_diffusion.models(),
    rebuilt from the same seed), where the case allows (see TORCH_CASES).

Each case (CASES) names a scheduler (its class swapped in with ``from_config`` over the fixture's
scheduler_config.json plus the case's overrides) and a call. Every call draws from
``np.random.RandomState(seed)`` as the ONNX pipeline does: the latents first
(``generator.randn(n, 4, h/8, w/8)``), then each step's noise. diffusers' schedulers draw their
step noise from torch's generator; here their ``randn_tensor`` is replaced by a draw from the
same RandomState, so that a seed fixes the whole run and Transmuter's pipeline, drawing in that
order, can be compared step noise and all.

Written:
  references/text_to_image.json   the cases (scheduler, call options) and each scheduler's
                                  timesteps / sigmas / init_noise_sigma as diffusers sets them
  references/text_to_image.npz    "{case}/{which}/latents" (the latents after every step,
                                  [steps, n, 4, h, w], from the pipeline's callback),
                                  "{case}/{which}/images" ([n, H, W, 3] floats in [0, 1])

    /work/venvs/sd/bin/python tests/support/record_text_to_image.py
"""

import json
import sys
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).parent))
import families_diffusion as fd  # noqa: E402

FX = fd.FX
PROMPT = "a photo of a cat"
# (name, scheduler class, config overrides, call options); all at 32x32 (4x4 latents)
CASES = [
    ("euler-1", "EulerDiscreteScheduler", {}, dict(num_inference_steps=1, guidance_scale=0.0)),
    ("euler-4-cfg", "EulerDiscreteScheduler", {},
     dict(num_inference_steps=4, guidance_scale=3.0, negative_prompt="blurry")),
    ("euler-linspace-v", "EulerDiscreteScheduler",
     {"timestep_spacing": "linspace", "prediction_type": "v_prediction"},
     dict(num_inference_steps=3, guidance_scale=2.0)),
    ("euler-leading-2", "EulerDiscreteScheduler", {"timestep_spacing": "leading"},
     dict(num_inference_steps=3, guidance_scale=1.0, num_images_per_prompt=2)),
    ("euler-ancestral-4", "EulerAncestralDiscreteScheduler", {},
     dict(num_inference_steps=4, guidance_scale=2.0)),
    ("ddim-4", "DDIMScheduler", {"timestep_spacing": "leading"},
     dict(num_inference_steps=4, guidance_scale=2.0)),
    ("ddim-eta", "DDIMScheduler", {"timestep_spacing": "trailing"},
     dict(num_inference_steps=3, guidance_scale=2.0, eta=0.5)),
    ("lcm-4", "LCMScheduler", {"original_inference_steps": 50},
     dict(num_inference_steps=4, guidance_scale=1.0)),
]
SEED = 7
# the PyTorch pipeline feeds the UNet its float timestep; the ONNX graph takes int64 timesteps
# (optimum's), which truncate linspace's fractional ones: those cases differ by design.
TORCH_CASES = [name for name, _, over, _ in CASES if over.get("timestep_spacing") != "linspace"]


class _Draws:
    """The RandomState a case's call draws from; schedulers' randn_tensor draws here too."""
    state = None

    @classmethod
    def randn_tensor(cls, shape, generator=None, device=None, dtype=None, layout=None):
        return torch.from_numpy(cls.state.randn(*shape).astype(np.float32))


def _patch_schedulers():
    import diffusers.schedulers.scheduling_ddim as ddim
    import diffusers.schedulers.scheduling_euler_ancestral_discrete as ancestral
    import diffusers.schedulers.scheduling_euler_discrete as euler
    import diffusers.schedulers.scheduling_lcm as lcm

    for module in (ddim, ancestral, euler, lcm):
        module.randn_tensor = _Draws.randn_tensor


def _float_sigma(scheduler):
    """diffusers 0.42's ONNX pipeline multiplies its NumPy latents by init_noise_sigma, which the
    sigma schedulers give as a torch tensor: a TypeError. Read as a float (the same float32
    value), the product is the one torch would make."""
    cls = type(scheduler)
    if isinstance(scheduler.init_noise_sigma, torch.Tensor):
        patched = type(cls.__name__, (cls,), {
            "init_noise_sigma": property(lambda self: float(cls.init_noise_sigma.fget(self)))})
        scheduler.__class__ = patched
    return scheduler


def _scheduler(name, overrides):
    import diffusers

    config = json.loads((FX / "scheduler/scheduler_config.json").read_text())
    return getattr(diffusers, name).from_config({**config, **overrides})


def _schedule(scheduler, steps):
    scheduler.set_timesteps(steps)
    sigma = scheduler.init_noise_sigma
    out = {"timesteps": scheduler.timesteps.double().tolist(),
           "init_noise_sigma": float(sigma)}
    if hasattr(scheduler, "sigmas"):
        out["sigmas"] = scheduler.sigmas.double().tolist()
    return out


def _run(pipe, call, height=32, width=32):
    states = []
    _Draws.state = np.random.RandomState(SEED)
    kwargs = dict(call)
    if isinstance(pipe.unet, torch.nn.Module):
        kwargs["generator"] = torch.Generator().manual_seed(0)  # unused: draws are patched
        n = kwargs.get("num_images_per_prompt", 1)
        kwargs["latents"] = torch.from_numpy(
            _Draws.state.randn(n, 4, height // 8, width // 8).astype(np.float32))

        def keep(pipe_, i, t, names):
            states.append(names["latents"].numpy().copy())
            return {}
        kwargs["callback_on_step_end"] = keep
    else:
        kwargs["generator"] = _Draws.state
        kwargs["callback"] = lambda i, t, latents: states.append(np.asarray(latents).copy())
    with torch.no_grad():
        images = pipe(PROMPT, height=height, width=width, output_type="np", **kwargs).images
    return np.stack(states).astype(np.float32), np.asarray(images, np.float32)


def main():
    from diffusers import OnnxStableDiffusionPipeline, StableDiffusionPipeline
    from transformers import CLIPTokenizer

    _patch_schedulers()
    onnx_pipe = OnnxStableDiffusionPipeline.from_pretrained(
        str(FX), provider="CPUExecutionProvider", safety_checker=None, feature_extractor=None,
        requires_safety_checker=False)
    tok = CLIPTokenizer.from_pretrained(str(FX / "tokenizer"))
    text, unet, vae = fd.models(len(tok))
    torch_pipe = StableDiffusionPipeline(
        vae=vae, text_encoder=text, tokenizer=tok, unet=unet,
        scheduler=_scheduler("EulerDiscreteScheduler", {}), safety_checker=None,
        feature_extractor=None, requires_safety_checker=False)
    torch_pipe.set_progress_bar_config(disable=True)
    onnx_pipe.set_progress_bar_config(disable=True)
    arrays, record = {}, {"prompt": PROMPT, "seed": SEED, "height": 32, "width": 32,
                          "cases": []}
    for name, cls, overrides, call in CASES:
        onnx_pipe.scheduler = _float_sigma(_scheduler(cls, overrides))
        record["cases"].append({
            "name": name, "scheduler": cls, "overrides": overrides, "call": call,
            "schedule": _schedule(_scheduler(cls, overrides), call["num_inference_steps"]),
            "torch": name in TORCH_CASES})
        runs = {"onnx": onnx_pipe}
        if name in TORCH_CASES:
            torch_pipe.scheduler = _scheduler(cls, overrides)
            runs["torch"] = torch_pipe
        for which, pipe in runs.items():
            latents, images = _run(pipe, call)
            arrays[f"{name}/{which}/latents"] = latents
            arrays[f"{name}/{which}/images"] = images
        if "torch" in runs:
            diff = np.abs(arrays[f"{name}/onnx/images"] - arrays[f"{name}/torch/images"]).max()
            print(f"{name}: onnx vs torch images max |diff| {diff:.2e}")
    (FX / "references/text_to_image.json").write_text(json.dumps(record, indent=1) + "\n")
    np.savez_compressed(FX / "references/text_to_image.npz", **arrays)


if __name__ == "__main__":
    main()
