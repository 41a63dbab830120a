"""bench/text_to_image.py's diffusers side, run in the diffusers environment
($TRANSMUTER_DIFFUSERS_PYTHON: tests/support/requirements-diffusion.txt).

    python bench/_diffusion_models.py build FOLDER --scale S --text-layers N
    python bench/_diffusion_models.py time FOLDER --steps 1,4,20 --size 512 --repeat 3 ...

``build``: a random Stable Diffusion shaped as stabilityai/sd-turbo (SD 2.1's UNet: channels
320 / 640 / 1280 / 1280, two layers per block, heads of 64, linear projections, cross-attention
on 1024 wide states; OpenCLIP ViT-H's text encoder: 1024 wide, 23 layers, 16 heads; the SD VAE:
128 / 256 / 512 / 512), every width times ``--scale`` (1 is the real size: a 3.5 GB UNet), saved
as torch weights (``torch/``) and exported under optimum's names and folders as
tests/support/families_diffusion.py exports the fixture (with external data past 2 GB).

``time``: seconds per image of diffusers' OnnxStableDiffusionPipeline (onnxruntime, its
defaults: ORT_ENABLE_ALL, a thread per physical core) and StableDiffusionPipeline (PyTorch,
threads = cores) on it, one JSON line per (peer, steps): the best of --repeat calls after one
untimed call.
"""

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np
import torch

SUPPORT = Path(__file__).resolve().parents[1] / "tests" / "support"
sys.path.insert(0, str(SUPPORT))


def _width(channels, scale, multiple):
    return max(multiple, int(round(channels * scale / multiple)) * multiple)


def build(folder, scale, text_layers):
    import families_diffusion as fd
    from diffusers import AutoencoderKL, UNet2DConditionModel
    from transformers import CLIPTextConfig, CLIPTextModel, CLIPTokenizer

    folder = Path(folder)
    torch.manual_seed(0)
    groups = max(1, int(32 * scale)) if scale < 1 else 32
    # heads of 64 at full size; at a smaller scale as many heads, narrower
    heads = (5, 10, 20, 20)
    unet_channels = tuple(_width(c, scale, int(np.lcm(groups, h)))
                          for c, h in zip((320, 640, 1280, 1280), heads))
    text_width = _width(1024, scale, 16 * 4)
    unet = UNet2DConditionModel(
        sample_size=64, in_channels=4, out_channels=4, layers_per_block=2,
        block_out_channels=unet_channels, attention_head_dim=heads,
        down_block_types=("CrossAttnDownBlock2D",) * 3 + ("DownBlock2D",),
        up_block_types=("UpBlock2D",) + ("CrossAttnUpBlock2D",) * 3,
        cross_attention_dim=text_width, norm_num_groups=groups,
        use_linear_projection=True).eval()
    vae = AutoencoderKL(
        in_channels=3, out_channels=3, latent_channels=4, layers_per_block=2,
        block_out_channels=tuple(_width(c, scale, groups) for c in (128, 256, 512, 512)),
        norm_num_groups=groups, sample_size=512,
        down_block_types=("DownEncoderBlock2D",) * 4,
        up_block_types=("UpDecoderBlock2D",) * 4).eval()
    tok_folder = folder / "tokenizer"
    if not tok_folder.exists():
        fd.tokenizer(folder)
    tok = CLIPTokenizer.from_pretrained(str(tok_folder))
    text = CLIPTextModel(CLIPTextConfig(
        vocab_size=len(tok), hidden_size=text_width, intermediate_size=4 * text_width,
        num_hidden_layers=text_layers, num_attention_heads=16, max_position_embeddings=77,
        hidden_act="gelu", bos_token_id=len(tok) - 2, eos_token_id=len(tok) - 1)).eval()
    torch.save({"text": text.state_dict(), "unet": unet.state_dict(), "vae": vae.state_dict(),
                "configs": {"text": text.config.to_dict(), "unet": dict(unet.config),
                            "vae": dict(vae.config)}}, folder / "torch.pt")
    ids = torch.from_numpy(tok(["a photo"], padding="max_length", max_length=77,
                               return_tensors="np").input_ids.astype(np.int32))
    axes = {0: "batch_size", 2: "height", 3: "width"}
    fd.export(fd._Text(text), (ids,), folder / "text_encoder/model.onnx", ["input_ids"],
              ["last_hidden_state", "pooler_output"],
              {"input_ids": {0: "batch_size", 1: "sequence_length"},
               "last_hidden_state": {0: "batch_size", 1: "sequence_length"},
               "pooler_output": {0: "batch_size"}})
    fd.export(fd._Unet(unet), (torch.randn(2, 4, 64, 64), torch.tensor([999]),
                               torch.randn(2, 77, text_width)),
              folder / "unet/model.onnx", list(fd.UNET_INPUTS), ["out_sample"],
              {"sample": axes, "timestep": {0: "steps"},
               "encoder_hidden_states": {0: "batch_size", 1: "sequence_length"},
               "out_sample": axes})
    fd.export(fd._Decoder(vae), (torch.randn(1, 4, 64, 64),), folder / "vae_decoder/model.onnx",
              ["latent_sample"], ["sample"], {"latent_sample": axes, "sample": axes})
    fd.export(fd._Encoder(vae), (torch.randn(1, 3, 64, 64),), folder / "vae_encoder/model.onnx",
              ["sample"], ["latent_parameters"], {"sample": axes, "latent_parameters": axes})
    for name, model in (("unet", unet), ("vae_decoder", vae)):
        fd.fva.save_json(folder / name / "config.json", fd.ec.to_jsonable(
            dict(model.config, _class_name=type(model).__name__)))
    (folder / "scheduler").mkdir(exist_ok=True)
    fd.fva.save_json(folder / "scheduler/scheduler_config.json", fd.SCHEDULER)
    fd.fva.save_json(folder / "model_index.json", fd.MODEL_INDEX)
    print(json.dumps({"unet_parameters": int(sum(p.numel() for p in unet.parameters())),
                      "unet_channels": unet_channels, "text_width": text_width}))


def _pipelines(folder):
    import diffusers
    from diffusers import (AutoencoderKL, OnnxStableDiffusionPipeline, StableDiffusionPipeline,
                           UNet2DConditionModel)
    from transformers import CLIPTextConfig, CLIPTextModel, CLIPTokenizer

    folder = Path(folder)
    config = json.loads((folder / "scheduler/scheduler_config.json").read_text())
    # onnxruntime's defaults: ORT_ENABLE_ALL, one intra-op thread per physical core
    onnx = OnnxStableDiffusionPipeline.from_pretrained(
        str(folder), provider="CPUExecutionProvider", safety_checker=None,
        feature_extractor=None, requires_safety_checker=False)
    scheduler = diffusers.EulerDiscreteScheduler.from_config(config)
    cls = type(scheduler)
    # diffusers 0.42's ONNX pipeline multiplies NumPy latents by a torch init_noise_sigma (a
    # TypeError); read as a float it is the same float32 value
    scheduler.__class__ = type(cls.__name__, (cls,), {"init_noise_sigma": property(
        lambda self: float(cls.init_noise_sigma.fget(self)))})
    onnx.scheduler = scheduler
    saved = torch.load(folder / "torch.pt")
    text = CLIPTextModel(CLIPTextConfig(**saved["configs"]["text"])).eval()
    unet = UNet2DConditionModel(**{k: v for k, v in saved["configs"]["unet"].items()
                                   if not k.startswith("_")}).eval()
    vae = AutoencoderKL(**{k: v for k, v in saved["configs"]["vae"].items()
                           if not k.startswith("_")}).eval()
    for model, key in ((text, "text"), (unet, "unet"), (vae, "vae")):
        model.load_state_dict(saved[key])
    pt = StableDiffusionPipeline(
        vae=vae, text_encoder=text, tokenizer=CLIPTokenizer.from_pretrained(
            str(folder / "tokenizer")), unet=unet,
        scheduler=diffusers.EulerDiscreteScheduler.from_config(config), safety_checker=None,
        feature_extractor=None, requires_safety_checker=False)
    for pipe in (onnx, pt):
        pipe.set_progress_bar_config(disable=True)
    return {"onnxruntime": onnx, "torch": pt}


def time_peers(folder, steps, size, repeat, guidance, prompt, peers):
    torch.set_num_threads(os.cpu_count())
    pipes = _pipelines(folder)
    for name in peers:
        pipe = pipes[name]
        for n in steps:
            call = dict(height=size, width=size, num_inference_steps=n,
                        guidance_scale=guidance, output_type="np")
            best = None
            for i in range(repeat + 1):
                generator = np.random.RandomState(0) if name == "onnxruntime" else \
                    torch.Generator().manual_seed(0)
                start = time.perf_counter()
                with torch.no_grad():
                    pipe(prompt, generator=generator, **call)
                seconds = time.perf_counter() - start
                if i:  # the first call is untimed (allocations, caches)
                    best = seconds if best is None else min(best, seconds)
            print(json.dumps({"peer": name, "steps": n, "seconds": best}), flush=True)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("command", choices=["build", "time"])
    parser.add_argument("folder")
    parser.add_argument("--scale", type=float, default=1.0)
    parser.add_argument("--text-layers", type=int, default=23)
    parser.add_argument("--steps", default="1,4,20")
    parser.add_argument("--size", type=int, default=512)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--guidance", type=float, default=0.0)
    parser.add_argument("--prompt", default="a photo of a cat")
    parser.add_argument("--peers", default="onnxruntime,torch")
    args = parser.parse_args()
    if args.command == "build":
        build(args.folder, args.scale, args.text_layers)
    else:
        time_peers(args.folder, [int(s) for s in args.steps.split(",")], args.size, args.repeat,
                   args.guidance, args.prompt, args.peers.split(","))


if __name__ == "__main__":
    main()
