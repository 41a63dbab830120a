"""tests/fixtures/stable-diffusion: a tiny random Stable Diffusion laid out as optimum /
onnx-community export one (onnx-community/sd-turbo, optimum's ORTStableDiffusionPipeline):

    model_index.json
    text_encoder/model.onnx   input_ids int32 [batch, sequence] -> last_hidden_state, pooler_output
    unet/model.onnx           sample [batch, 4, h, w], timestep int64 [steps],
                              encoder_hidden_states [batch, sequence, dim] -> out_sample
    vae_decoder/model.onnx    latent_sample [batch, 4, h, w] -> sample [batch, 3, 8h, 8w]
    vae_encoder/model.onnx    sample [batch, 3, H, W] -> latent_parameters [batch, 8, H/8, W/8]
    tokenizer/                a tiny CLIP BPE vocabulary (CLIPTokenizer's files)
    scheduler/scheduler_config.json   sd-turbo's EulerDiscreteScheduler settings
    {text_encoder,unet,vae_decoder,vae_encoder}/config.json   the torch models' configs

Names, dtypes and dynamic axes are optimum's (optimum/exporters/onnx/model_configs.py:
CLIPTextOnnxConfig with int32 ids as diffusers' OnnxStableDiffusionPipeline feeds them,
UNetOnnxConfig with an int64 timestep, VaeEncoderOnnxConfig's latent_parameters (the moments,
not a sample), VaeDecoderOnnxConfig). Exported with torch.onnx (TorchScript) at opset 17; each
graph's references/*.npz holds onnxruntime's outputs (ORT_DISABLE_ALL) on fixed inputs.

    /work/venvs/sd/bin/python tests/support/families_diffusion.py

Versions: python 3.11, torch 2.13.0+cpu, diffusers 0.42.0, transformers 5.25.0,
onnxruntime 1.32.0, onnx 1.23.2 (requirements-diffusion.txt). ``models()`` rebuilds the same
torch models (seeded) for record_text_to_image.py, which records the pipeline references.
"""

import json
import shutil
import sys
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).parent))
import export_common as ec  # noqa: E402
import families_vision_audio as fva  # noqa: E402

FX = ec.FIXTURES_ROOT / "stable-diffusion"
OPSET = 17
TEXT_LENGTH = 77  # CLIP's model_max_length, as SD's tokenizers have it
# sd-turbo's scheduler/scheduler_config.json (stabilityai/sd-turbo), as onnx-community copies it
SCHEDULER = {
    "_class_name": "EulerDiscreteScheduler", "_diffusers_version": "0.24.0",
    "beta_end": 0.012, "beta_schedule": "scaled_linear", "beta_start": 0.00085,
    "clip_sample": False, "interpolation_type": "linear", "num_train_timesteps": 1000,
    "prediction_type": "epsilon", "sample_max_value": 1.0, "set_alpha_to_one": False,
    "skip_prk_steps": True, "steps_offset": 1, "timestep_spacing": "trailing",
    "trained_betas": None, "use_karras_sigmas": False,
}

UNET_INPUTS = ("sample", "timestep", "encoder_hidden_states")
MODEL_INDEX = {
    "_class_name": "OnnxStableDiffusionPipeline", "_diffusers_version": "0.42.0",
    "feature_extractor": [None, None], "requires_safety_checker": False,
    "safety_checker": [None, None], "scheduler": ["diffusers", "EulerDiscreteScheduler"],
    "text_encoder": ["diffusers", "OnnxRuntimeModel"],
    "tokenizer": ["transformers", "CLIPTokenizer"], "unet": ["diffusers", "OnnxRuntimeModel"],
    "vae_decoder": ["diffusers", "OnnxRuntimeModel"],
    "vae_encoder": ["diffusers", "OnnxRuntimeModel"]}


def _bytes_to_unicode():
    """GPT-2's byte -> printable character table (transformers 5 no longer exports it, which
    families_vision_audio's _byte_encoder imports)."""
    bs = (list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1))
          + list(range(ord("®"), ord("ÿ") + 1)))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, map(chr, cs)))


def tokenizer(folder=FX):
    """A tiny CLIP vocabulary (families_vision_audio's), saved as SD repos hold it."""
    from transformers import CLIPTokenizer

    fva._byte_encoder = _bytes_to_unicode
    vocab, merges = fva.clip_style_vocab(60)
    tmp = folder / "_tok_src"
    vf, mf = fva.write_vocab_merges(tmp, vocab, merges)
    tok = CLIPTokenizer(vf, mf, model_max_length=TEXT_LENGTH, pad_token="<|endoftext|>")
    tok.save_pretrained(folder / "tokenizer")
    shutil.rmtree(tmp)
    return tok


def models(vocab_size):
    from diffusers import AutoencoderKL, UNet2DConditionModel
    from transformers import CLIPTextConfig, CLIPTextModel

    ec.seed_everything()
    text = CLIPTextModel(CLIPTextConfig(
        vocab_size=vocab_size, hidden_size=16, intermediate_size=32, num_hidden_layers=2,
        num_attention_heads=2, max_position_embeddings=TEXT_LENGTH, projection_dim=16,
        hidden_act="gelu", bos_token_id=vocab_size - 2, eos_token_id=vocab_size - 1)).eval()
    # SD 2 / sd-turbo's shape in miniature: linear projections, head dims per block, 2 levels
    unet = UNet2DConditionModel(
        sample_size=8, in_channels=4, out_channels=4, layers_per_block=1,
        block_out_channels=(4, 8), down_block_types=("CrossAttnDownBlock2D", "DownBlock2D"),
        up_block_types=("UpBlock2D", "CrossAttnUpBlock2D"), cross_attention_dim=16,
        attention_head_dim=(2, 2), norm_num_groups=4, use_linear_projection=True).eval()
    # four levels, so that a latent pixel is 8x8 image pixels as in every SD VAE
    vae = AutoencoderKL(
        in_channels=3, out_channels=3, latent_channels=4, layers_per_block=1,
        block_out_channels=(4, 4, 8, 8), norm_num_groups=2, sample_size=64,
        down_block_types=("DownEncoderBlock2D",) * 4,
        up_block_types=("UpDecoderBlock2D",) * 4).eval()
    return text, unet, vae


class _Encoder(torch.nn.Module):
    def __init__(self, vae):
        super().__init__()
        self.vae = vae

    def forward(self, sample):
        return self.vae.encode(sample).latent_dist.parameters


class _Decoder(torch.nn.Module):
    def __init__(self, vae):
        super().__init__()
        self.vae = vae

    def forward(self, latent_sample):
        return self.vae.decode(latent_sample).sample


class _Unet(torch.nn.Module):
    def __init__(self, unet):
        super().__init__()
        self.unet = unet

    def forward(self, sample, timestep, encoder_hidden_states):
        return self.unet(sample, timestep, encoder_hidden_states, return_dict=False)[0]


class _Text(torch.nn.Module):
    def __init__(self, text):
        super().__init__()
        self.text = text

    def forward(self, input_ids):
        out = self.text(input_ids=input_ids)
        return out.last_hidden_state, out.pooler_output


def export(module, args, path, inputs, outputs, axes):
    path.parent.mkdir(parents=True, exist_ok=True)
    with torch.no_grad():
        torch.onnx.export(module, args, str(path), input_names=inputs, output_names=outputs,
                          dynamic_axes=axes, opset_version=OPSET, dynamo=False)


def main():
    if FX.exists():
        shutil.rmtree(FX)
    FX.mkdir(parents=True)
    tok = tokenizer()
    text, unet, vae = models(len(tok))
    rng = np.random.RandomState(0)
    ids = tok(["a photo of a cat", ""], padding="max_length", max_length=TEXT_LENGTH,
              return_tensors="np").input_ids.astype(np.int32)
    feeds = {
        "text_encoder": {"input_ids": ids},
        "unet": {"sample": rng.randn(2, 4, 8, 8).astype(np.float32),
                 "timestep": np.array([999], np.int64),
                 "encoder_hidden_states": rng.randn(2, TEXT_LENGTH, 16).astype(np.float32)},
        "vae_decoder": {"latent_sample": rng.randn(1, 4, 8, 8).astype(np.float32)},
        "vae_encoder": {"sample": rng.uniform(-1, 1, (1, 3, 64, 64)).astype(np.float32)},
    }
    image_axes = {0: "batch_size", 2: "height", 3: "width"}
    export(_Text(text), (torch.from_numpy(ids),), FX / "text_encoder/model.onnx", ["input_ids"],
           ["last_hidden_state", "pooler_output"],
           {"input_ids": {0: "batch_size", 1: "sequence_length"},
            "last_hidden_state": {0: "batch_size", 1: "sequence_length"},
            "pooler_output": {0: "batch_size"}})
    u = feeds["unet"]
    export(_Unet(unet), tuple(torch.from_numpy(u[k]) for k in u), FX / "unet/model.onnx",
           list(u), ["out_sample"],
           {"sample": image_axes, "timestep": {0: "steps"},
            "encoder_hidden_states": {0: "batch_size", 1: "sequence_length"},
            "out_sample": image_axes})
    export(_Decoder(vae), (torch.from_numpy(feeds["vae_decoder"]["latent_sample"]),),
           FX / "vae_decoder/model.onnx", ["latent_sample"], ["sample"],
           {"latent_sample": image_axes, "sample": image_axes})
    export(_Encoder(vae), (torch.from_numpy(feeds["vae_encoder"]["sample"]),),
           FX / "vae_encoder/model.onnx", ["sample"], ["latent_parameters"],
           {"sample": image_axes, "latent_parameters": image_axes})
    graphs = {}
    for name, feed in feeds.items():
        rel = f"{name}/model.onnx"
        ref = f"references/{name}.npz"
        ec.save_reference(FX / ref, ec.encoder_reference(FX / rel, feed))
        graphs[rel] = {"reference": ref, "static_inputs": []}
    for name, model in (("text_encoder", text), ("unet", unet), ("vae_decoder", vae),
                        ("vae_encoder", vae)):
        c = model.config
        config = c.to_dict() if hasattr(c, "to_dict") else dict(c, _class_name=type(model).__name__)
        config = {k: v for k, v in config.items() if not k.startswith("_") or k == "_class_name"}
        fva.save_json(FX / name / "config.json", ec.to_jsonable(config))
    (FX / "scheduler").mkdir()
    fva.save_json(FX / "scheduler/scheduler_config.json", SCHEDULER)
    fva.save_json(FX / "model_index.json", MODEL_INDEX)
    ec.write_manifest(FX, "stable-diffusion", "StableDiffusionPipeline", "text-to-image", OPSET,
                      graphs, exporter=f"torch.onnx {torch.__version__} (TorchScript), "
                                       "optimum's names")
    ec.verify_fixture(FX)
    print(json.dumps({p.relative_to(FX).as_posix(): p.stat().st_size
                      for p in sorted(FX.rglob("*")) if p.is_file()}, indent=1))


if __name__ == "__main__":
    main()
