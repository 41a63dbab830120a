"""Idefics3ImageProcessor (transformers 4.57 ``image_processing_idefics3.py``, the slow one that
Idefics3Processor and SmolVLM repos name): an image becomes tiles plus the whole image at tile
size, with the (rows, cols) the processor writes into the prompt. The steps are
image_transforms', so pixels equal transformers' (Pillow resizes, same dtypes)."""

import numpy as np

from .. import transforms as T

MAX_IMAGE_SIZE = 4096  # image_processing_idefics3.MAX_IMAGE_SIZE
IMAGE, FAKE, GLOBAL = "<image>", "<fake_token_around_image>", "<global-img>"


class Idefics3Images:
    """Idefics3ImageProcessor (transformers 4.57, slow): the longest edge resized to ``size``,
    then (``do_image_splitting``) resized up to multiples of ``max_image_size`` and cut into
    tiles plus the whole image at tile size, or (no splitting) resized to one square tile;
    rescaled, normalized, padded to the largest tile with a pixel mask."""

    def __init__(self, config):
        self.config = dict(config)
        self.longest = int((config.get("size") or {}).get("longest_edge", 4 * 364))
        self.tile = int((config.get("max_image_size") or {}).get("longest_edge", 364))
        self.resample = T.check_resample(config.get("resample", 1), "Idefics3ImageProcessor")
        self.split = bool(config.get("do_image_splitting", True))

    def process(self, images, split=None):
        """``(pixel_values [N, 3, H, W], pixel_attention_mask [N, H, W] bool)`` of all tiles of
        ``images`` (None without images), and each image's (rows, cols)."""
        split = self.split if split is None else bool(split)
        frames, grids = [], []
        for image in images:
            tiles, grid = self._tiles(np.asarray(image), split)
            frames += tiles
            grids.append(grid)
        if not frames:
            return None, grids
        c = self.config
        frames = [T.rescale(f, c.get("rescale_factor", 1 / 255)) if c.get("do_rescale", True)
                  else f.astype(np.float32) for f in frames]
        if c.get("do_normalize", True):
            frames = [T.normalize(f, c.get("image_mean", [0.5] * 3), c.get("image_std", [0.5] * 3))
                      for f in frames]
        height, width = max(f.shape[0] for f in frames), max(f.shape[1] for f in frames)
        pixels = np.zeros((len(frames), 3, height, width), np.float32)
        mask = np.zeros((len(frames), height, width), bool)
        for i, f in enumerate(frames):
            pixels[i, :, :f.shape[0], :f.shape[1]] = f.transpose(2, 0, 1)
            mask[i, :f.shape[0], :f.shape[1]] = True
        return (pixels, mask), grids

    def _tiles(self, image, split):
        if self.config.get("do_resize", True):
            image = T.resize(image, _longest_edge(*image.shape[:2], self.longest), self.resample)
        if not split:
            return [T.resize(image, (self.tile, self.tile), self.resample)], (0, 0)
        image = T.resize(image, _multiples(*image.shape[:2], self.tile), self.resample)
        height, width = image.shape[:2]
        if height <= self.tile and width <= self.tile:
            return [image], (0, 0)
        rows, cols = -(-height // self.tile), -(-width // self.tile)
        th, tw = -(-height // rows), -(-width // cols)
        tiles = [image[r * th:min((r + 1) * th, height), c * tw:min((c + 1) * tw, width)]
                 for r in range(rows) for c in range(cols)]
        if (height, width) != (self.tile, self.tile):
            image = T.resize(image, (self.tile, self.tile), self.resample)
        return tiles + [image], (rows, cols)


def _longest_edge(height, width, longest):
    """image_processing_idefics3's _resize_output_size_rescale_to_max_len (min 1), then its
    _resize_output_size_scale_below_upper_bound (4096)."""
    ratio = width / height
    if width >= height:
        width, height = longest, int(longest / ratio)
        height += height % 2
    else:
        height, width = longest, int(longest * ratio)
        width += width % 2
    height, width = max(height, 1), max(width, 1)
    ratio = width / height
    if width >= height and width > MAX_IMAGE_SIZE:
        width, height = MAX_IMAGE_SIZE, int(MAX_IMAGE_SIZE / ratio)
    elif height > width and height > MAX_IMAGE_SIZE:
        height, width = MAX_IMAGE_SIZE, int(MAX_IMAGE_SIZE * ratio)
    return max(height, 1), max(width, 1)


def _multiples(height, width, tile):
    """resize_for_vision_encoder: both sides up to multiples of the tile, the aspect kept."""
    ratio = width / height
    if width >= height:
        width = -(-width // tile) * tile
        height = -(-int(width / ratio) // tile) * tile
    else:
        height = -(-height // tile) * tile
        width = -(-int(height * ratio) // tile) * tile
    return height, width


def expand_prompt(text, grids, image_seq_len):
    """Idefics3Processor's prompt: each <image> of ``text`` as its tiles' rows (``grids``: the
    (rows, cols) of each image; (0, 0) for an unsplit one) and then the global image."""
    pieces = text.split(IMAGE)
    out = pieces[0]
    for (rows, cols), rest in zip(grids, pieces[1:]):
        image = IMAGE * image_seq_len
        if rows == 0 and cols == 0:
            block = f"{FAKE}{GLOBAL}{image}{FAKE}"
        else:
            block = "".join("".join(f"{FAKE}<row_{r + 1}_col_{c + 1}>{image}"
                                    for c in range(cols)) + "\n" for r in range(rows))
            block += f"\n{FAKE}{GLOBAL}{image}{FAKE}"
        out += block + rest
    return out
