"""Output sizes, computed as transformers computes them (the same float expressions and the same
int() / round() truncations: a size one pixel off changes every value after it). Sizes are
(height, width) tuples; `size` dicts are those of preprocessor_config.json.
"""

import math

from ...errors import InputError

# transformers.image_processing_utils.VALID_SIZE_DICT_KEYS
VALID_SIZE_KEYS = ({"height", "width"}, {"shortest_edge"}, {"shortest_edge", "longest_edge"},
                   {"longest_edge"}, {"max_height", "max_width"})


def size_dict(size, max_size=None, default_to_square=True, height_width_order=True,
              param_name="size"):
    """transformers.image_processing_utils.get_size_dict: an int, a pair or a dict, as a dict."""
    if not isinstance(size, dict):
        size = _to_size_dict(size, max_size, default_to_square, height_width_order, param_name)
    if set(size) not in VALID_SIZE_KEYS:
        raise InputError(f"{param_name} must have one of the key sets "
                         f"{[sorted(k) for k in VALID_SIZE_KEYS]}, got {sorted(size)}")
    for key, value in size.items():  # fuzz 20261202:6645: shortest_edge null, a TypeError
        if value is None and key in ("longest_edge", "max_height", "max_width"):
            continue  # no cap
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
            raise InputError(f"{param_name}[{key!r}] = {value!r}: a size must be a positive "
                             "number of pixels (preprocessor_config.json)")
    return size


def _to_size_dict(size, max_size, default_to_square, height_width_order, param_name):
    """transformers.image_processing_utils.convert_to_size_dict."""
    if isinstance(size, int) and default_to_square:
        if max_size is not None:
            raise InputError(f"{param_name}: an int size with default_to_square and max_size")
        return {"height": size, "width": size}
    if isinstance(size, int):
        longest = {} if max_size is None else {"longest_edge": max_size}
        return {"shortest_edge": size, **longest}
    if isinstance(size, (tuple, list)) and len(size) == 2:
        h, w = size if height_width_order else size[::-1]
        return {"height": h, "width": w}
    if size is None and max_size is not None and not default_to_square:
        return {"longest_edge": max_size}
    raise InputError(f"Cannot read {param_name}={size!r} as an image size")


def require(size, keys, processor, param_name="size"):
    if not all(k in size for k in keys):
        raise InputError(f"{processor}: {param_name} must have the keys {list(keys)}, "
                         f"got {sorted(size)}")


def shortest_edge_size(image_hw, size, default_to_square=True, max_size=None):
    """transformers.image_transforms.get_resize_output_image_size (torchvision's rule): a pair is
    the size itself; an int is a square, or with default_to_square=False the shorter edge (the
    longer one int(size * long / short)), capped by max_size."""
    if isinstance(size, (tuple, list)):
        if len(size) == 2:
            return tuple(size)
        size = size[0]
    if default_to_square:
        return (size, size)
    height, width = image_hw
    short, long = (width, height) if width <= height else (height, width)
    new_short, new_long = size, int(size * long / short)
    if max_size is not None:
        if max_size <= size:
            raise InputError(f"max_size = {max_size} must be greater than the shortest edge {size}")
        if new_long > max_size:
            new_short, new_long = int(max_size * new_short / new_long), max_size
    return (new_long, new_short) if width <= height else (new_short, new_long)


def _clamped_short_edge(height, width, size, max_size):
    """(size, raw_size) of get_size_with_aspect_ratio: the short edge shrinks (raw_size, float)
    when the long one would pass ``max_size``."""
    if max_size is not None:
        min_original, max_original = float(min(height, width)), float(max(height, width))
        if max_original / min_original * size > max_size:
            raw_size = max_size * min_original / max_original
            return int(round(raw_size)), raw_size
    return size, None


def _scaled(long_side, short_side, size, raw_size):
    return int((raw_size if raw_size is not None else size) * long_side / short_side)


def aspect_ratio_size(image_hw, size, max_size=None):
    """transformers.models.detr.image_processing_detr.get_size_with_aspect_ratio: the shorter edge
    to `size` unless the longer would pass `max_size`, then the longer edge to max_size."""
    height, width = image_hw
    size, raw_size = _clamped_short_edge(height, width, size, max_size)
    if (height <= width and height == size) or (width <= height and width == size):
        return (height, width)
    if width < height:
        return (_scaled(height, width, size, raw_size), size)
    return (size, _scaled(width, height, size, raw_size))


def yolos_size(image_hw, size, max_size=None, mod_size=16):
    """transformers.models.yolos.image_processing_yolos.get_size_with_aspect_ratio: DETR's rule
    with the portrait branch first, then both edges rounded down to a multiple of 16."""
    height, width = image_hw
    size, raw_size = _clamped_short_edge(height, width, size, max_size)
    if width < height:
        oh, ow = _scaled(height, width, size, raw_size), size
    elif (height <= width and height == size) or (width <= height and width == size):
        oh, ow = height, width
    else:
        oh, ow = size, _scaled(width, height, size, raw_size)
    if mod_size is not None:
        oh, ow = oh - oh % mod_size, ow - ow % mod_size
    return (oh, ow)


def max_height_width_size(image_hw, max_height, max_width):
    """transformers.image_utils.get_image_size_for_max_height_width: fit inside, keep aspect."""
    height, width = image_hw
    scale = min(max_height / height, max_width / width)
    return (int(height * scale), int(width * scale))


def dpt_size(image_hw, output_hw, keep_aspect_ratio, multiple):
    """transformers.models.dpt.image_processing_dpt.get_resize_output_image_size."""
    height, width = image_hw
    scale_h, scale_w = output_hw[0] / height, output_hw[1] / width
    if keep_aspect_ratio:
        # scale as little as possible
        if abs(1 - scale_w) < abs(1 - scale_h):
            scale_h = scale_w
        else:
            scale_w = scale_h
    return (_multiple_of(scale_h * height, multiple), _multiple_of(scale_w * width, multiple))


def _multiple_of(value, multiple, min_val=0, max_val=None):
    """DPT's constrain_to_multiple_of (Python's round: halves to even)."""
    x = round(value / multiple) * multiple
    if max_val is not None and x > max_val:
        x = math.floor(value / multiple) * multiple
    if x < min_val:
        x = math.ceil(value / multiple) * multiple
    return x


def longest_edge_size(image_hw, longest_edge):
    """transformers.models.sam.image_processing_sam.SamImageProcessor._get_preprocess_shape."""
    height, width = image_hw
    scale = longest_edge * 1.0 / max(height, width)
    return (int(height * scale + 0.5), int(width * scale + 0.5))
