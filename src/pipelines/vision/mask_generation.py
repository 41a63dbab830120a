"""mask-generation on the split SAM exports transformers.js loads: ``onnx/vision_encoder.onnx``
and ``onnx/prompt_encoder_mask_decoder.onnx``, in two layouts (the encoder's outputs tell them
apart):

- SAM (Xenova/sam-vit-base, Xenova/slimsam-77-uniform: optimum's export): the encoder gives
  image_embeddings and image_positional_embeddings; the decoder takes input_points and
  input_labels (no boxes).
- SAM 2 / 2.1 (onnx-community/sam2.1-hiera-*-ONNX) and the SAM 3 tracker
  (onnx-community/sam3-tracker-ONNX: transformers 5's Sam3TrackerModel, SAM 3's ViT encoder in front
  of SAM 2's prompt encoder and decoder; transformers.js' Sam3TrackerModel is a Sam2Model): the
  encoder gives image_embeddings.0, .1, .2; the decoder also takes input_boxes and gives
  object_score_logits.

Two modes:

    pipe("photo.jpg")            transformers' MaskGenerationPipeline: a grid of points over the
        -> {"masks": [bool (H, W) arrays], "scores": float32 array}
                                 image, masks filtered by predicted IoU and stability, then NMS
    pipe("photo.jpg", input_points=[[[450, 600]]], input_labels=[[1]])
    pipe("photo.jpg", input_boxes=[[75, 275, 1725, 850]])     (SAM 2, SAM 3 tracker)
        -> {"masks": bool (prompts, 3, H, W), "iou_scores": float32 (prompts, 3)}
           (SAM 2 / 3 add "object_score_logits": float32 (prompts, 1))
                                 Sam(2)Processor + Sam(2)Model + post_process_masks: per prompt,
                                 the decoder's three masks at the image's size and their scores

Either way the image embedding is computed once per image and reused by every prompt or point
batch. See docs/vision-tasks.md for the options and what is refused.
"""

import re

import numpy as np

from ...errors import PipelineError
from ...hub.load import load_beside
from . import sam
from .base import VisionPipeline
from .interpolate import bilinear

DECODER = "prompt_encoder_mask_decoder"
# transformers' MaskGenerationPipeline defaults (preprocess, _forward, postprocess)
AUTOMATIC = {"points_per_batch": 64, "points_per_crop": 32, "crops_n_layers": 0,
             "crop_overlap_ratio": 512 / 1500, "crop_n_points_downscale_factor": 1,
             "pred_iou_thresh": 0.88, "stability_score_thresh": 0.95, "stability_score_offset": 1,
             "crops_nms_thresh": 0.7, "output_bboxes_mask": False, "output_rle_mask": False}
UPSCALE_AT_ONCE = 16  # masks resized together in automatic mode (bounds the float memory)


class MaskGenerationPipeline(VisionPipeline):
    task = "mask-generation"

    def __init__(self, model, config=None, *, repo=None, prompt_encoder_mask_decoder=None,
                 **kwargs):
        self.family = _family(model)
        self.decoder = prompt_encoder_mask_decoder or _load_decoder(repo, model)
        missing = self.family.decoder_inputs - {v.name for v in self.decoder.inputs}
        if missing:
            raise PipelineError(f"The {DECODER} graph lacks input(s) {sorted(missing)}; "
                                f"{self.family.name}'s split export takes "
                                f"{sorted(self.family.decoder_inputs)}")
        super().__init__(model, config, repo=repo, **kwargs)

    @staticmethod
    def onnx_component(repo):
        return "vision_encoder"

    # --- options -------------------------------------------------------------------------------

    def _sanitize_parameters(self, input_points=None, input_labels=None, input_boxes=None,
                             multimask_output=True, mask_threshold=0.0, **options):
        unknown = sorted(set(options) - set(AUTOMATIC))
        if unknown:
            hint = (" (transformers' post_process_masks takes neither: its pipeline fails there)"
                    if {"max_hole_area", "max_sprinkle_area"} & set(unknown) else "")
            raise PipelineError(f"{self.task} takes no option(s) {unknown}{hint}")
        if input_boxes is not None and not self.family.boxes:
            raise PipelineError("input_boxes: this prompt_encoder_mask_decoder graph takes points "
                                "only (optimum's SAM export runs the prompt encoder with "
                                "input_boxes=None): give points inside the object as input_points")
        if multimask_output is not True:
            raise PipelineError("multimask_output=False: the exported decoder fixes "
                                "multimask_output=True (its pred_masks are the three multimask "
                                "outputs; the single-mask output is not in the graph): pick the "
                                "best of the three by iou_scores")
        mask_threshold = _number(mask_threshold, "mask_threshold")
        if input_points is None and input_boxes is None:
            if input_labels is not None:
                raise PipelineError("input_labels need input_points (one label per point)")
            auto = _automatic_options({**AUTOMATIC, **options})
            return {"grid": auto["points_per_crop"]}, {"batch": auto["points_per_batch"]}, {
                "mask_threshold": mask_threshold, "auto": auto}
        if options:
            raise PipelineError(f"{sorted(options)} apply to automatic mask generation (no "
                                "input_points or input_boxes); a prompted call takes "
                                "input_points, input_labels, input_boxes and mask_threshold")
        return {"prompts": _prompts(input_points, input_labels, input_boxes)}, {}, {
            "mask_threshold": mask_threshold, "auto": None}

    # --- the pipeline --------------------------------------------------------------------------

    def preprocess(self, image, prompts=None, grid=None):
        chunk = self.features(image)
        original = chunk["image"]["original_size"]
        size = self.image_processor.size
        if prompts is not None:
            points, labels, boxes = prompts
            chunk["points"] = self.family.scale_prompt(points, original, size).astype(np.float32)
            chunk["labels"] = labels
            chunk["boxes"] = self.family.scale_prompt(boxes.reshape(-1, 2, 2), original,
                                                      size).reshape(-1, 4).astype(np.float32)
        else:
            # generate_crop_boxes with crops_n_layers 0: the whole image is the one crop. The
            # pipeline scales the grid by the longest edge for SAM 2 too (its target size is
            # size["height"] there), as transformers 4.57 does.
            height, width = original
            grid_points = sam.point_grid(grid) * np.array([width, height])
            target = size.get("longest_edge", size.get("height"))
            points = sam.scale_points(grid_points, original, target)[:, None]  # 1 point a prompt
            chunk["points"] = points.astype(np.float32)
            chunk["labels"] = np.ones(chunk["points"].shape[:2], np.int64)
            chunk["boxes"] = np.zeros((0, 4), np.float32)
        yield chunk

    def _forward_group(self, chunks, batch=None):
        """The encoder runs once on the group's images; each image's prompts (or point batches)
        then run the decoder on its embeddings."""
        encoded = super()._forward_group(chunks)
        return [dict(c, decoded=self._decode(c, batch)) for c in encoded]

    def _decode(self, chunk, batch):
        """[decoder outputs of one batch of prompts, without the batch axis]: all prompts at
        once, or the grid's points ``batch`` at a time (the last batch padded with its first
        point: one shape)."""
        embeddings = {k: chunk[k][None] for k in self.family.embeddings}
        points, labels, boxes = chunk["points"], chunk["labels"], chunk["boxes"]
        size = len(labels) if batch is None else batch
        out = []
        for start in range(0, len(labels), size):
            p, l = points[start:start + size], labels[start:start + size]
            n = len(l)
            if batch is not None and n < size:
                p = np.concatenate([p, np.repeat(p[:1], size - n, 0)])
                l = np.concatenate([l, np.repeat(l[:1], size - n, 0)])
            feed = {"input_points": p[None], "input_labels": l[None], **embeddings}
            if self.family.boxes:
                feed["input_boxes"] = boxes[None]
            result = self._run_model(feed, model=self.decoder)
            out.append({k: v[0, :n] for k, v in result.items()})
        return out

    def postprocess(self, outputs, mask_threshold=0.0, auto=None):
        out = outputs[0]
        upscale = self.family.upscaler(self.image_processor, out["image"])
        if auto is None:
            decoded, = out["decoded"]
            result = {"masks": upscale(decoded["pred_masks"]) > mask_threshold}
            return result | {k: decoded[k].astype(np.float32) for k in self.family.scores}
        original = out["image"]["original_size"]
        kept = [self._filter(d["iou_scores"], d["pred_masks"], upscale, original, mask_threshold,
                             auto) for d in out["decoded"]]
        return _select(kept, auto)

    def _filter(self, iou, low_res, upscale, original, mask_threshold, auto):
        """SamImageProcessor.filter_masks on one point batch: (scores, boxes, RLEs) kept. The IoU
        filter runs before the masks are upscaled, and they are upscaled a few at a time, kept
        binarized (the same masks survive; SAM's 192 float masks of a batch at 1024 x 1024 and at
        the image's size would take gigabytes)."""
        iou, low_res = iou.reshape(-1).astype(np.float32), low_res.reshape(-1, *low_res.shape[-2:])
        if auto["pred_iou_thresh"] > 0.0:
            keep = iou > auto["pred_iou_thresh"]
            iou, low_res = iou[keep], low_res[keep]
        kept, masks = [], []
        for start in range(0, len(iou), UPSCALE_AT_ONCE):
            logits = upscale(low_res[start:start + UPSCALE_AT_ONCE])
            keep = np.ones(len(logits), bool)
            if auto["stability_score_thresh"] > 0.0:
                stable = sam.stability_scores(logits, mask_threshold,
                                              auto["stability_score_offset"])
                keep = stable > auto["stability_score_thresh"]
            kept.append(iou[start:start + UPSCALE_AT_ONCE][keep])
            masks.append(logits[keep] > mask_threshold)
        iou = np.concatenate(kept) if kept else iou
        masks = np.concatenate(masks) if masks else np.zeros((0, *original), bool)
        # filter_masks' next filter drops boxes near a crop's edge but not the image's: with one
        # crop, the whole image, it drops none
        return iou, sam.mask_boxes(masks), [sam.mask_to_rle(m) for m in masks]


def _select(kept, auto):
    """post_process_for_mask_generation: NMS over every batch's masks by their boxes."""
    scores = np.concatenate([k[0] for k in kept])
    boxes = np.concatenate([k[1] for k in kept]).reshape(-1, 4)
    rles = [rle for k in kept for rle in k[2]]
    order = sam.nms(boxes, scores, auto["crops_nms_thresh"])
    result = {"masks": [sam.rle_to_mask(rles[i]) for i in order], "scores": scores[order]}
    if auto["output_rle_mask"]:
        result["rle_mask"] = [rles[i] for i in order]
    if auto["output_bboxes_mask"]:
        result["bounding_boxes"] = boxes[order]
    return result


class _Sam:
    """SAM (optimum's export): points only; prompts scaled as the image, by its longest edge;
    masks upscaled to the padded input, cropped to the resized image, upscaled to the image."""

    name = "SAM"
    embeddings = ("image_embeddings", "image_positional_embeddings")
    decoder_inputs = {"input_points", "input_labels", *embeddings}
    boxes = False
    scores = ("iou_scores",)

    @staticmethod
    def scale_prompt(points, original_hw, size):
        return sam.scale_points(points, original_hw, size["longest_edge"])

    @staticmethod
    def upscaler(processor, features):
        pad = processor.pad_size
        sizes = (pad["height"], pad["width"]), features["size"], features["original_size"]
        return lambda low_res: sam.upscale_masks(low_res, *sizes)


class _Sam2:
    """SAM 2 / 2.1 and the SAM 3 tracker (the onnx-community layout): points and boxes; the image
    is squeezed to a square, and prompts with it (Sam2Processor and Sam3TrackerProcessor scale
    both axes by size["height"], their target_size); masks upscaled straight to the image
    (Sam2ImageProcessorFast's and Sam3ImageProcessor's post_process_masks)."""

    name = "SAM 2 / SAM 3 tracker"
    boxes = True
    scores = ("iou_scores", "object_score_logits")

    def __init__(self, levels):
        self.embeddings = tuple(levels)
        self.decoder_inputs = {"input_points", "input_labels", "input_boxes", *levels}

    @staticmethod
    def scale_prompt(points, original_hw, size):
        points = np.array(points, np.float64)
        points[..., 0] *= size["height"] / original_hw[1]
        points[..., 1] *= size["height"] / original_hw[0]
        return points

    @staticmethod
    def upscaler(processor, features):
        return lambda low_res: bilinear(low_res, features["original_size"])


def _family(model):
    outputs = {v.name for v in model.outputs}
    levels = sorted((n for n in outputs if re.fullmatch(r"image_embeddings\.\d+", n)),
                    key=lambda n: int(n.split(".")[1]))
    if levels:
        return _Sam2(levels)
    if {"image_embeddings", "image_positional_embeddings"} <= outputs:
        return _Sam()
    raise PipelineError(f"mask-generation runs a split SAM export: a vision_encoder.onnx giving "
                        "image_embeddings and image_positional_embeddings (SAM), or "
                        "image_embeddings.0, .1, ... (SAM 2, SAM 3 tracker); this graph gives "
                        f"{sorted(outputs)}")


def _load_decoder(repo, model):
    if repo is None:
        raise PipelineError(f"A SAM vision encoder loaded by hand needs {DECODER}= (the decoder's "
                            "transmuter.Model) or config= its repo folder")
    names = [f.rsplit("/", 1)[-1] for f in repo.onnx_files()]
    if not any(n.startswith(DECODER) for n in names):
        raise PipelineError(f"{repo.label} has no onnx/{DECODER}*.onnx beside vision_encoder "
                            f"(SAM's split export); it has {', '.join(sorted(names))}")
    return load_beside(model, repo, repo.choose(DECODER, None).path)


def _prompts(points, labels, boxes):
    """input_points [prompts][points][x, y], input_labels [prompts][points] and input_boxes
    [boxes][x0, y0, x1, y1] of one image (the per-image level of Sam(2)Processor's inputs), as
    arrays; labels default to 1 (SamModel). Boxes are prompts of their own, or go with the points
    of a single prompt (Sam2Model needs as many boxes as prompts, transformers.js' export one)."""
    boxes = _boxes(boxes)
    if points is None:
        if labels is not None:
            raise PipelineError("input_labels need input_points (one label per point)")
        # transformers.js' boxes-only layout: one row of no points, a row of no labels per box
        # (each box a prompt)
        return np.zeros((1, 0, 2)), np.zeros((len(boxes), 0), np.int64), boxes
    points, labels = _points(points, labels)
    if len(boxes) and (len(boxes), len(points)) != (1, 1):
        raise PipelineError(f"input_points with input_boxes take one prompt and one box (the "
                            f"box around that prompt's points); got {len(points)} prompt(s) and "
                            f"{len(boxes)} box(es): give the boxes alone, one prompt each")
    return points, labels, boxes


def _boxes(boxes):
    if boxes is None:
        return np.zeros((0, 4))
    try:
        boxes = np.array(boxes, np.float64)
    except (TypeError, ValueError) as e:
        raise PipelineError(f"input_boxes must be numbers nested [boxes][x0, y0, x1, y1]: {e}") \
            from None
    if boxes.ndim != 2 or boxes.shape[-1] != 4 or len(boxes) == 0 \
            or not np.isfinite(boxes).all():
        raise PipelineError(f"input_boxes must be finite numbers shaped [boxes][x0, y0, x1, y1], "
                            f"e.g. [[75, 275, 1725, 850]] for one box; got shape {boxes.shape}")
    return boxes


def _points(points, labels):
    try:
        points = np.array(points, np.float64)
    except (TypeError, ValueError) as e:
        raise PipelineError(f"input_points must be numbers nested [prompts][points][x, y] with as "
                            f"many points in every prompt (pad with label -10): {e}") from None
    if points.ndim != 3 or points.shape[-1] != 2 or 0 in points.shape \
            or not np.isfinite(points).all():
        raise PipelineError(f"input_points must be finite numbers shaped [prompts][points][x, y], "
                            f"e.g. [[[450, 600]]] for one point; got shape {points.shape}")
    if labels is None:
        return points, np.ones(points.shape[:2], np.int64)
    try:
        raw = np.array(labels)
    except (TypeError, ValueError) as e:
        raise PipelineError(f"input_labels must be ints nested [prompts][points]: {e}") from None
    if raw.shape != points.shape[:2] or not np.issubdtype(raw.dtype, np.integer):
        raise PipelineError(f"input_labels must be ints shaped [prompts][points] = "
                            f"{list(points.shape[:2])} (1 foreground, 0 background, -10 "
                            f"padding), got {raw.dtype} {raw.shape}")
    return points, raw.astype(np.int64)


def _automatic_options(auto):
    for name in ("points_per_crop", "crop_n_points_downscale_factor"):
        _positive(auto[name], name)
    if auto["points_per_batch"] is not None:
        _positive(auto["points_per_batch"], "points_per_batch")
    if auto["crops_n_layers"] != 0:
        raise PipelineError(
            f"crops_n_layers={auto['crops_n_layers']!r}: only 0 (the whole image) is supported; "
            "transformers 4.57's pipeline fails on crops too (one point batch for the embeddings "
            "of several crops)")
    for name in ("crop_overlap_ratio", "pred_iou_thresh", "stability_score_thresh",
                 "stability_score_offset", "crops_nms_thresh"):
        auto[name] = _number(auto[name], name)
    return auto


def _number(value, name):
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not np.isfinite(value):
        raise PipelineError(f"{name} must be a finite number, got {value!r}")
    return float(value)


def _positive(value, name):
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise PipelineError(f"{name} must be a positive int, got {value!r}")
