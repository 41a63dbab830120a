"""text-to-image: Stable Diffusion from its ONNX export (optimum / onnx-community: text_encoder/,
unet/, vae_decoder/, tokenizer/, scheduler/), as diffusers' OnnxStableDiffusionPipeline runs it.

    pipe = transmuter.pipeline("text-to-image", "onnx-community/sd-turbo")
    pipe("a red fox in the snow", num_inference_steps=1, guidance_scale=0.0, seed=0)
        -> PIL image (num_images_per_prompt=n: a list of n images)
    pipe(["a cat", "a dog"], seed=0)    -> [image, image]
    pipe("a cat", output_type="np")     -> float32 [H, W, 3] in [0, 1]
    pipe("a cat", output_type="latent") -> float32 [4, H / 8, W / 8], the latents undecoded

Each prompt runs as diffusers' pipeline runs one: CLIP's ids padded to model_max_length (77),
the text encoder's last_hidden_state, with classifier-free guidance (``guidance_scale`` > 1) the
negative prompt's ("" unless given) before it in one batch, the scheduler that
scheduler_config.json names (schedulers.py), latents ``randn(n, 4, height/8, width/8)`` from
``np.random.RandomState(seed)`` times the scheduler's init_noise_sigma, and for each timestep the
UNet on both halves at once, ``uncond + guidance_scale * (text - uncond)``, the scheduler's step;
then the VAE decoder on ``latents / 0.18215`` one image at a time, ``clip(x / 2 + 0.5, 0, 1)``.
A step that adds noise (Euler ancestral, LCM, DDIM with eta > 0) draws it from the same
RandomState after the latents: a seed fixes the image. ``latents=`` gives the starting latents
([n, 4, height/8, width/8]) instead.

The UNet is compiled once for a shape (rows, latent size) and reused by every step: the timestep
is one of its inputs, not a constant.
"""

import numpy as np

from ....errors import PipelineError, TransmuterError
from ....hub.load import load_beside
from ....preprocess.text.clip import clip_tokenizer
from ....preprocess.text.tokenizer import Tokenizer, check_text
from ...base import Pipeline
from .schedulers import scheduler_for

UNET_INPUTS = ("sample", "timestep", "encoder_hidden_states")
# diffusers' OnnxStableDiffusionPipeline divides by this constant (not the VAE's
# scaling_factor); every SD 1.x / 2.x / Turbo VAE has it
LATENT_SCALE = 0.18215
OUTPUT_TYPES = ("pil", "np", "latent")


class TextToImagePipeline(Pipeline):
    task = "text-to-image"
    onnx_subfolder = "unet"  # the graph the factory loads as the pipeline's model
    # the other graphs' folders; factory.pipeline passes variant= on as encoder_variant=
    encoder_component = "text_encoder"

    def __init__(self, model, config=None, *, repo=None, encoder_variant=None, **kwargs):
        names = [v.name for v in model.inputs]
        if not set(UNET_INPUTS) <= set(names):
            raise PipelineError(f"text-to-image runs a Stable Diffusion UNet (inputs "
                                f"{list(UNET_INPUTS)}); this graph takes {names}")
        if repo is None:
            raise PipelineError("A text-to-image UNet loaded by hand needs config= the repo or "
                                "folder it came from (text_encoder/, vae_decoder/, tokenizer/, "
                                "scheduler/)")
        self.unet = model
        self.text_encoder = _graph(model, repo, "text_encoder", encoder_variant)
        self.vae_decoder = _graph(model, repo, "vae_decoder", encoder_variant)
        self.tokenizer = _tokenizer(repo)
        self.scheduler_config = repo.json("scheduler/scheduler_config.json")
        if self.scheduler_config is None:
            raise PipelineError(f"{repo.label} has no scheduler/scheduler_config.json: it is not "
                                "a diffusers Stable Diffusion export")
        unet_config = repo.json("unet/config.json", {})
        vae_config = repo.json("vae_decoder/config.json", {})
        self.vae_scale = 2 ** (len(vae_config.get("block_out_channels", (0,) * 4)) - 1)
        self.default_size = int(unet_config.get("sample_size", 64)) * self.vae_scale
        self.latent_channels = int(unet_config.get("in_channels", 4))
        self._timestep = next(v for v in model.inputs if v.name == "timestep").dtype
        super().__init__(model, config, repo=repo, **kwargs)

    def _sanitize_parameters(self, num_inference_steps=50, guidance_scale=7.5,
                             negative_prompt=None, num_images_per_prompt=1, height=None,
                             width=None, eta=0.0, seed=None, latents=None, output_type="pil"):
        """diffusers' call options and defaults (OnnxStableDiffusionPipeline.__call__); the
        height and width default to the UNet's sample_size times the VAE's scale, as
        StableDiffusionPipeline's do."""
        height = self.default_size if height is None else height
        width = self.default_size if width is None else width
        for name, value in (("height", height), ("width", width)):
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1 \
                    or value % self.vae_scale:
                raise PipelineError(f"{name} must be a positive multiple of {self.vae_scale} "
                                    f"(the VAE's scale), got {value!r}")
        n = num_images_per_prompt
        if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
            raise PipelineError(f"num_images_per_prompt must be a positive int, got {n!r}")
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, (int, np.integer))):
            raise PipelineError(f"seed must be an int, got {seed!r}")
        if output_type not in OUTPUT_TYPES:
            raise PipelineError(f"output_type must be one of {OUTPUT_TYPES}, got {output_type!r}")
        if negative_prompt is not None:
            check_text(negative_prompt, "negative_prompt")
        shape = (n, self.latent_channels, height // self.vae_scale, width // self.vae_scale)
        if latents is not None:
            latents = np.asarray(latents, np.float32)
            if latents.shape != shape:
                raise PipelineError(f"latents must have the shape {shape} (num_images_per_prompt, "
                                    f"channels, height / {self.vae_scale}, width / "
                                    f"{self.vae_scale}), got {latents.shape}")
        scheduler = scheduler_for(self.scheduler_config, eta=float(eta))
        scheduler.set_timesteps(num_inference_steps)  # bad step counts fail here, not mid-run
        run = {"scheduler": scheduler, "guidance_scale": float(guidance_scale), "shape": shape,
               "seed": seed, "latents": latents, "decode": output_type != "latent"}
        return {"negative_prompt": negative_prompt}, run, {"output_type": output_type}

    def preprocess(self, prompt, negative_prompt=None):
        check_text(prompt, "prompt")
        yield {"ids": self._ids(prompt), "negative_ids": self._ids(negative_prompt or "")}

    def _ids(self, text):
        """CLIP's ids padded (pad_token) and truncated to model_max_length, as diffusers'
        ``tokenizer(prompt, padding="max_length", truncation=True)``."""
        tok, length = self.tokenizer, self.tokenizer.model_max_length
        # an empty text (the default negative prompt) is encoded as diffusers does: its ids are
        # the start and end tokens, which Tokenizer.encode's check of a user's text refuses
        ids = tok.encode(text, max_length=length).ids if text else \
            tok.backend.encode("").ids
        out = np.full(length, tok.pad_token_id if tok.pad_token_id is not None else 0)
        out[:len(ids)] = ids
        return out

    def _forward(self, chunks, decode, **run):
        """Each prompt alone (a seed fixes each prompt's draws); its latents, and where the
        output is an image, the VAE decoder's images."""
        out = []
        for chunk in chunks:
            latents = self._generate(chunk, **run)
            out.append(dict(chunk, latents=latents, images=self._decode(latents) if decode
                            else None))
        return out

    def _generate(self, chunk, scheduler, guidance_scale, shape, seed, latents):
        """One prompt's final latents [n, channels, height / 8, width / 8]."""
        n = shape[0]
        guided = guidance_scale > 1.0
        ids = [chunk["negative_ids"], chunk["ids"]] if guided else [chunk["ids"]]
        states = self._encode(np.stack(ids))
        states = np.repeat(states, n, axis=0)  # [uncond x n, text x n], as diffusers orders them
        draws = np.random.RandomState(seed) if seed is not None else np.random
        if latents is None:
            latents = draws.randn(*shape).astype(np.float32)
        latents = latents * scheduler.init_noise_sigma
        for i, t in enumerate(scheduler.timesteps):
            x = np.concatenate([latents] * 2) if guided else latents
            x = scheduler.scale_model_input(x, i)
            feed = {"sample": x, "timestep": np.array([t], self._timestep),
                    "encoder_hidden_states": states}
            noise = _first(self._run_model(feed, model=self.unet), "out_sample")
            if guided:
                uncond, text = np.split(noise, 2)
                noise = uncond + guidance_scale * (text - uncond)
            drawn = draws.randn(*shape).astype(np.float32) if scheduler.noise_at(i) else None
            latents = scheduler.step(noise, i, latents, drawn)
        return latents

    def _encode(self, ids):
        feed = {"input_ids": ids.astype(_dtype(self.text_encoder, "input_ids"))}
        out = self._run_model(feed, model=self.text_encoder)
        return _first(out, "last_hidden_state")

    def _decode(self, latents):
        """The VAE decoder on each latent alone (as diffusers runs it), to [n, H, W, 3]."""
        name = self.vae_decoder.inputs[0].name
        scaled = 1 / LATENT_SCALE * latents
        images = []
        for row in scaled:
            out = self._run_model({name: row[None]}, model=self.vae_decoder)
            images.append(_first(out, "sample"))
        image = np.clip(np.concatenate(images) / 2 + 0.5, 0, 1)
        return image.transpose(0, 2, 3, 1)

    def postprocess(self, outputs, output_type="pil"):
        if output_type == "latent":  # as StableDiffusionPipeline's output_type="latent"
            images = outputs[0]["latents"]
        else:
            images = outputs[0]["images"]
        if output_type == "pil":
            from PIL import Image

            # diffusers' numpy_to_pil
            images = [Image.fromarray((x * 255).round().astype("uint8")) for x in images]
        else:
            images = list(images)
        return images[0] if len(images) == 1 else images


def _graph(unet, repo, folder, variant):
    """The repo's ``folder``/model.onnx, loaded as the UNet was (backend, checks, devices)."""
    try:
        path = repo.choose("model", variant, subfolder=folder).path
    except TransmuterError as e:  # the variant chooser's error names what the repo has
        raise PipelineError(f"{repo.label}: no {folder}/model.onnx for text-to-image ({e})") \
            from e
    return load_beside(unet, repo, path)


def _tokenizer(repo):
    """tokenizer/'s CLIP tokenizer: its tokenizer.json, else its vocab.json and merges.txt (the
    slow files stabilityai's repos and the exports made from them hold), with
    tokenizer_config.json and special_tokens_map.json."""
    config = repo.json("tokenizer/tokenizer_config.json", {})
    config.update({k: v for k, v in repo.json("tokenizer/special_tokens_map.json", {}).items()
                   if k not in config})
    if repo.has("tokenizer/tokenizer.json"):
        from tokenizers import Tokenizer as Backend

        return Tokenizer(Backend.from_file(repo.file("tokenizer/tokenizer.json")), config)
    if repo.has("tokenizer/vocab.json") and repo.has("tokenizer/merges.txt"):
        return clip_tokenizer(repo.file("tokenizer/vocab.json"),
                              repo.file("tokenizer/merges.txt"), config)
    raise PipelineError(f"{repo.label} has no tokenizer/tokenizer.json, nor CLIP's "
                        "tokenizer/vocab.json and merges.txt: it is not a Stable Diffusion export")


def _dtype(model, name):
    return next(v.dtype for v in model.inputs if v.name == name)


def _first(outputs, name):
    """Output ``name``, else the graph's first output (as diffusers reads ``model(...)[0]``)."""
    return outputs[name] if name in outputs else next(iter(outputs.values()))
