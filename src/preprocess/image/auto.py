"""Which image processor a preprocessor_config.json asks for: the one table from
`image_processor_type` to its family class, and the function that picks from it.

    from transmuter.preprocess.image.auto import image_processor_for
    proc = image_processor_for(config)      # a ViTImageProcessor, a DetrImageProcessorFast, ...

Each family class lists the type names it serves in its `names` (aliases included: Grounding
DINO's, Conditional and Deformable DETR's processors are DETR's); FAMILIES below is every class
that serves one, and PROCESSORS maps each name to its class. A family module registers nothing
when it is imported: a new family is added here.
"""

from ...errors import InputError
from .families import dense, dense_fast, fast, maskformer, owlv2_fast, resized, tjs
from .processor import check_fields

# Every image processor class a preprocessor config can name, by module.
FAMILIES = (
    # resized.py: resize, [center crop], rescale, normalize (Pillow)
    resized.ViTImageProcessor, resized.SiglipImageProcessor, resized.SegformerImageProcessor,
    resized.DeiTImageProcessor, resized.BeitImageProcessor, resized.CLIPImageProcessor,
    resized.BitImageProcessor, resized.MobileNetV1ImageProcessor,
    resized.MobileNetV2ImageProcessor, resized.OwlViTImageProcessor,
    resized.ConvNextImageProcessor, resized.MobileViTImageProcessor,
    # dense.py: detection, segmentation, depth, super-resolution, SAM (Pillow)
    dense.DetrImageProcessor, dense.YolosImageProcessor, dense.RTDetrImageProcessor,
    dense.DPTImageProcessor, dense.Swin2SRImageProcessor, dense.SamImageProcessor,
    dense.Owlv2ImageProcessor,
    # maskformer.py: MaskFormer / Mask2Former (Pillow)
    maskformer.MaskFormerImageProcessor,
    # tjs.py: transformers.js' generic ImageProcessor (sharp's resize)
    tjs.TransformersJsImageProcessor,
    # fast.py: the classification-style *ImageProcessorFast (torchvision's resize)
    fast.ViTImageProcessorFast, fast.SiglipImageProcessorFast, fast.CLIPImageProcessorFast,
    fast.BitImageProcessorFast, fast.DeiTImageProcessorFast, fast.OwlViTImageProcessorFast,
    fast.MobileNetV1ImageProcessorFast, fast.BeitImageProcessorFast,
    fast.SegformerImageProcessorFast, fast.MobileNetV2ImageProcessorFast,
    fast.ConvNextImageProcessorFast, fast.MobileViTImageProcessorFast,
    # dense_fast.py: the detection / dense *ImageProcessorFast, and RF-DETR's
    dense_fast.DetrImageProcessorFast, dense_fast.YolosImageProcessorFast,
    dense_fast.RTDetrImageProcessorFast, dense_fast.RfDetrImageProcessor,
    dense_fast.MaskFormerImageProcessorFast, dense_fast.DPTImageProcessorFast,
    dense_fast.SamImageProcessorFast, dense_fast.Sam2ImageProcessorFast,
    dense_fast.Sam3ImageProcessor,
    dense_fast.Swin2SRImageProcessorFast,
    # owlv2_fast.py
    owlv2_fast.Owlv2ImageProcessorFast,
)

# image_processor_type -> class
PROCESSORS = {name: cls for cls in FAMILIES for name in cls.names}


def supported():
    """The image_processor_type names we serve, sorted."""
    return sorted(PROCESSORS)


def processor_type(config):
    """The class name transformers' AutoImageProcessor would pick: `image_processor_type`, else
    `feature_extractor_type` with FeatureExtractor -> ImageProcessor (the old classes are
    aliases)."""
    name = config.get("image_processor_type")
    if name is None and config.get("feature_extractor_type"):
        name = config["feature_extractor_type"].replace("FeatureExtractor", "ImageProcessor")
    if name is None:
        raise InputError("The preprocessor config names no image_processor_type (nor "
                         f"feature_extractor_type); supported: {', '.join(supported())}")
    return name.replace("FeatureExtractor", "ImageProcessor")


def image_processor_for(config):
    """The image processor of a preprocessor_config.json dict: its fields checked, then the
    family its `image_processor_type` names (`processor_type`) built from it. An unknown type
    raises InputError listing the supported ones; a Fast type whose family has only the slow
    (Pillow) processor is refused with a hint at the slow type."""
    check_fields(config)
    name = processor_type(config)
    cls = PROCESSORS.get(name)
    if cls is None:
        hint = ""
        if name.endswith("Fast") and name[:-4] in PROCESSORS:
            hint = (f" ({name} resizes with torchvision, which differs from Pillow; set "
                    f"image_processor_type to {name[:-4]} to accept Pillow's resize)")
        raise InputError(f"Unsupported image processor type {name!r}{hint}; supported: "
                         f"{', '.join(supported())}")
    return cls(config)
