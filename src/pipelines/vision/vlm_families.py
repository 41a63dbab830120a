"""What differs between the vision-language families that image-text-to-text runs: how images
become the vision encoder's inputs, how the prompt's image token expands, how the encoder is
called, and the prompt's positions. Everything else (chats, embeddings, generation, outputs) is
image_text_to_text.py's, the same for all.

A family: ``image_token`` (what a plain prompt writes per image), ``prepare(text, images,
split)`` -> (expanded prompt, vision inputs or None), ``features(run, vision)`` -> [tokens,
hidden] rows for the image tokens in order, ``positions(ids, vision)`` -> None (the token
index) or [3, n] (M-RoPE)."""

import numpy as np

from ...errors import InputError
from ...generation.mrope import rope_index
from ...preprocess.image.families import idefics3 as idefics3
from ...preprocess.image.families import qwen2vl as qwen2vl
from ... import buckets
from ...errors import PipelineError

# How far the padded features may stray from the unpadded ones on the first call (relative to
# their largest): XLA sums in another order at another shape (float32: ~1e-6), where an image
# attending to the filler's patches moves its features by their own scale.
PAD_CHECK = 1e-4


class Idefics3:
    """Idefics3 / SmolVLM: tiles plus the global image, ``<image>`` as its rows of tile tokens."""

    model_types = ("idefics3", "smolvlm")
    image_token = idefics3.IMAGE

    def __init__(self, repo, config):
        self.images = idefics3.Idefics3Images(_json(repo, "preprocessor_config.json"))
        processor = _json(repo, "processor_config.json")
        vision = config.get("vision_config") or {}
        self.image_seq_len = int(processor.get("image_seq_len") or (
            (vision.get("image_size", 364) // vision.get("patch_size", 14)) ** 2
            // config.get("scale_factor", 2) ** 2))

    def prepare(self, text, images, split=None, bounds=None):
        if bounds:
            raise PipelineError(f"{' / '.join(bounds)} are Qwen2-VL options: Idefics3 / SmolVLM "
                                "splits images into tiles (do_image_splitting); drop them")
        tiles, grids = self.images.process(images, split)
        return idefics3.expand_prompt(text, grids, self.image_seq_len), tiles

    def features(self, run, vision):
        """The tiles' features in chunks of a power of two tiles (13 tiles: 8, 4, 1): the encoder
        reads each tile on its own, so a handful of compiled shapes serve every tile count."""
        pixels, mask = vision
        out, at = [], 0
        for n in buckets.pow2_chunks(len(pixels)):
            part = run({"pixel_values": pixels[None, at:at + n],
                        "pixel_attention_mask": mask[None, at:at + n]})["image_features"]
            out.append(np.asarray(part).reshape(-1, part.shape[-1]))
            at += n
        return np.concatenate(out)

    def positions(self, ids, vision):
        return None


class Qwen2VL:
    """Qwen2-VL / Qwen2.5-VL: each image resized whole (min_pixels / max_pixels), its patches
    flattened with grid_thw, ``<|image_pad|>`` as one token per 2 x 2 merged patches, and M-RoPE
    positions (transformers' get_rope_index)."""

    model_types = ("qwen2_vl", "qwen2_5_vl")
    image_token = qwen2vl.IMAGE_PAD

    def __init__(self, repo, config):
        self.images = qwen2vl.Qwen2VLImages(_json(repo, "preprocessor_config.json"))
        self.image_token_id = config.get("image_token_id")
        self.vision_start_token_id = config.get("vision_start_token_id")
        self.merge = int((config.get("vision_config") or {}).get("spatial_merge_size", 2))
        self.pads = None  # whether an image runs alone with a filler (checked on the first call)

    def prepare(self, text, images, split=None, bounds=None):
        if split is not None:
            raise PipelineError("do_image_splitting is an Idefics3 / SmolVLM option: Qwen2-VL "
                                "resizes each image whole (min_pixels / max_pixels of "
                                "preprocessor_config.json); drop do_image_splitting")
        pixels, grids = self.images.process(images, **(bounds or {}))
        counts = [] if grids is None else [self.images.tokens(g) for g in grids]
        try:
            expanded = qwen2vl.expand_prompt(text, counts)
        except InputError as e:  # a count mismatch, said in the pipeline's terms
            raise PipelineError(str(e)) from None
        return expanded, None if pixels is None else (pixels, grids)

    def features(self, run, vision):
        """The images' features, each image run alone with a filler image of zeros that pads its
        patches to a bucket (buckets.patches), the filler's features dropped: an image attends
        only to its own patches (transformers' cu_seqlens), so a few compiled shapes serve every
        image size, and no image pays for another's patches in attention. The first call checks
        that on the graph: an encoder whose images see each other runs them together, unpadded,
        as it was exported."""
        pixels, grids = vision
        # transformers.js' Qwen2VL names the grid grid_thw, its Qwen2_5_VL image_grid_thw
        names = {v.name for v in run.model.inputs}
        grid = "image_grid_thw" if "image_grid_thw" in names else "grid_thw"

        def encode(pixels, grids):
            return np.asarray(run({"pixel_values": pixels, grid: grids})["image_features"])

        if self.pads is False:
            return encode(pixels, grids)
        sizes = np.prod(grids, axis=-1)
        if self.pads is None:
            together = encode(pixels, grids)
            first = self._alone(encode, pixels[:sizes[0]], grids[0])
            scale = float(np.abs(together).max())
            self.pads = bool(np.abs(first - together[:len(first)]).max() <= PAD_CHECK * scale)
            return together
        starts = np.cumsum(sizes) - sizes
        return np.concatenate([self._alone(encode, pixels[a:a + n], g)
                               for a, n, g in zip(starts, sizes, grids)])

    def _alone(self, encode, pixels, grid):
        """One image's features, run with a filler image of zeros (at least one merged token) up
        to the bucket of its patches."""
        rows, unit = len(pixels), self.merge * self.merge
        size = buckets.patches(rows + unit, unit)
        filler = np.zeros((size - rows,) + pixels.shape[1:], pixels.dtype)
        grids = np.array([grid, [1, self.merge, (size - rows) // self.merge]], grid.dtype)
        return encode(np.concatenate([pixels, filler]), grids)[:rows // unit]

    def positions(self, ids, vision):
        return rope_index(ids, None if vision is None else vision[1], self.image_token_id,
                          self.vision_start_token_id, self.merge)


FAMILIES = (Idefics3, Qwen2VL)
MODEL_TYPES = tuple(t for f in FAMILIES for t in f.model_types)


def family_of(config):
    """The family class of a config.json (PipelineError naming the supported model types)."""
    kind = (config or {}).get("model_type")
    for family in FAMILIES:
        if kind in family.model_types:
            return family
    raise PipelineError(f"image-text-to-text runs Idefics3 / SmolVLM and Qwen2-VL exports "
                        f"(model_type {', '.join(map(repr, MODEL_TYPES))}); this model is "
                        f"{kind!r}")


def _json(repo, name):
    return repo.json(name, {}) if repo else {}
