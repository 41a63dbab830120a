"""The image-classification style families: resize, maybe center crop, rescale, normalize.

Each `setup` has the keyword arguments and defaults of its transformers `__init__`
(transformers/models/<family>/image_processing_<family>.py, 4.57); each `transform` follows its
`preprocess` step by step. The detection / dense families are in dense.py.
"""

from .. import transforms as T
from ..processor import ImageProcessor
from ..sizes import require, shortest_edge_size, size_dict

# transformers.utils.constants
IMAGENET_DEFAULT_MEAN, IMAGENET_DEFAULT_STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]
IMAGENET_STANDARD_MEAN, IMAGENET_STANDARD_STD = [0.5, 0.5, 0.5], [0.5, 0.5, 0.5]
OPENAI_CLIP_MEAN = [0.48145466, 0.4578275, 0.40821073]
OPENAI_CLIP_STD = [0.26862954, 0.26130258, 0.27577711]

BILINEAR, BICUBIC = 2, 3
RESCALE = 1 / 255


class Resized(ImageProcessor):
    """Resize to size["height"] x size["width"], [center crop], rescale, normalize (ViT, SigLIP,
    SegFormer, DeiT, BEiT)."""

    do_center_crop = False

    def read(self, do_resize, size, resample, do_rescale, rescale_factor, do_normalize,
             image_mean, image_std, mean, std, default_to_square=True):
        self.do_resize = do_resize
        self.size = size_dict(size, default_to_square=default_to_square)
        if do_resize:
            self.check_size()
        self.resample = self.read_resample(do_resize, resample)
        self.read_common(do_rescale=do_rescale, rescale_factor=rescale_factor,
                         do_normalize=do_normalize, image_mean=image_mean, image_std=image_std,
                         default_mean=mean, default_std=std)

    def check_size(self):
        """The keys the family's resize reads (it raises on others), checked up front."""
        require(self.size, ("height", "width"), self.name)

    def read_crop(self, do_center_crop, crop_size):
        self.do_center_crop = do_center_crop
        self.crop_size = size_dict(crop_size, param_name="crop_size")
        if do_center_crop:
            require(self.crop_size, ("height", "width"), self.name, "crop_size")

    def transform_image(self, image):
        """Resize the PIL image itself, unless a subclass's own transform takes the array."""
        if not self.do_resize or type(self).transform is not Resized.transform:
            return super().transform_image(image)
        return self.after_resize(T.resize(image, self.output_size((image.height, image.width)),
                                          self.resample))

    def transform(self, pixels):
        if self.do_resize:
            pixels = T.resize(pixels, self.output_size(pixels.shape[:2]), self.resample)
        return self.after_resize(pixels)

    def after_resize(self, pixels):
        if self.do_center_crop:
            pixels = T.center_crop(pixels, (self.crop_size["height"], self.crop_size["width"]))
        return self.rescale_normalize(pixels), pixels.shape[:2]

    def output_size(self, image_hw):
        return (self.size["height"], self.size["width"])


class ViTImageProcessor(Resized):
    names = ("ViTImageProcessor",)

    def setup(self, *, do_resize=True, size=None, resample=BILINEAR, do_rescale=True,
              rescale_factor=RESCALE, do_normalize=True, image_mean=None, image_std=None,
              do_convert_rgb=None):
        self.read(do_resize, size if size is not None else {"height": 224, "width": 224}, resample,
                  do_rescale, rescale_factor, do_normalize, image_mean, image_std,
                  IMAGENET_STANDARD_MEAN, IMAGENET_STANDARD_STD)
        self.do_convert_rgb = bool(do_convert_rgb)


class SiglipImageProcessor(Resized):
    names = ("SiglipImageProcessor",)

    def setup(self, *, do_resize=True, size=None, resample=BICUBIC, do_rescale=True,
              rescale_factor=RESCALE, do_normalize=True, image_mean=None, image_std=None,
              do_convert_rgb=None):
        # preprocess reads size with default_to_square=False, then size["height"], size["width"]
        self.read(do_resize, size if size is not None else {"height": 224, "width": 224}, resample,
                  do_rescale, rescale_factor, do_normalize, image_mean, image_std,
                  IMAGENET_STANDARD_MEAN, IMAGENET_STANDARD_STD, default_to_square=False)
        self.do_convert_rgb = bool(do_convert_rgb)


class SegformerImageProcessor(Resized):
    names = ("SegformerImageProcessor",)

    def setup(self, *, do_resize=True, size=None, resample=BILINEAR, do_rescale=True,
              rescale_factor=RESCALE, do_normalize=True, image_mean=None, image_std=None,
              do_reduce_labels=False):
        # do_reduce_labels changes segmentation maps (labels) only, never pixel_values
        self.read(do_resize, size if size is not None else {"height": 512, "width": 512}, resample,
                  do_rescale, rescale_factor, do_normalize, image_mean, image_std,
                  IMAGENET_DEFAULT_MEAN, IMAGENET_DEFAULT_STD)


class DeiTImageProcessor(Resized):
    names = ("DeiTImageProcessor",)

    def setup(self, *, do_resize=True, size=None, resample=BICUBIC, do_center_crop=True,
              crop_size=None, rescale_factor=RESCALE, do_rescale=True, do_normalize=True,
              image_mean=None, image_std=None):
        self.read(do_resize, size if size is not None else {"height": 256, "width": 256}, resample,
                  do_rescale, rescale_factor, do_normalize, image_mean, image_std,
                  IMAGENET_STANDARD_MEAN, IMAGENET_STANDARD_STD)
        self.read_crop(do_center_crop, crop_size if crop_size is not None
                       else {"height": 224, "width": 224})


class BeitImageProcessor(DeiTImageProcessor):
    names = ("BeitImageProcessor",)

    def setup(self, *, do_resize=True, size=None, resample=BICUBIC, do_center_crop=True,
              crop_size=None, rescale_factor=RESCALE, do_rescale=True, do_normalize=True,
              image_mean=None, image_std=None, do_reduce_labels=False):
        super().setup(do_resize=do_resize, size=size, resample=resample,
                      do_center_crop=do_center_crop, crop_size=crop_size,
                      rescale_factor=rescale_factor, do_rescale=do_rescale,
                      do_normalize=do_normalize, image_mean=image_mean, image_std=image_std)


class _ShortestEdge(Resized):
    """CLIPImageProcessor.resize: size["shortest_edge"] keeps the aspect ratio
    (get_resize_output_image_size, default_to_square=False); height / width is exact."""

    def output_size(self, image_hw):
        if "shortest_edge" in self.size:
            return shortest_edge_size(image_hw, self.size["shortest_edge"], default_to_square=False)
        return (self.size["height"], self.size["width"])

    def check_size(self):
        if "shortest_edge" not in self.size:
            require(self.size, ("height", "width"), self.name)

    def read_shortest(self, do_resize, size, resample, do_rescale, rescale_factor, do_normalize,
                      image_mean, image_std, mean, std):
        self.read(do_resize, size, resample, do_rescale, rescale_factor, do_normalize, image_mean,
                  image_std, mean, std, default_to_square=False)


class CLIPImageProcessor(_ShortestEdge):
    names = ("CLIPImageProcessor",)

    def setup(self, *, do_resize=True, size=None, resample=BICUBIC, do_center_crop=True,
              crop_size=None, do_rescale=True, rescale_factor=RESCALE, do_normalize=True,
              image_mean=None, image_std=None, do_convert_rgb=True, use_square_size=False):
        self.read_shortest(do_resize, size if size is not None else {"shortest_edge": 224},
                           resample, do_rescale, rescale_factor, do_normalize, image_mean,
                           image_std, OPENAI_CLIP_MEAN, OPENAI_CLIP_STD)
        if use_square_size:  # Kosmos-2's old configs: a square of the shortest edge
            require(self.size, ("shortest_edge",), self.name)
            edge = self.size["shortest_edge"]
            self.size = {"height": edge, "width": edge}
        self.read_crop(do_center_crop, crop_size if crop_size is not None
                       else {"height": 224, "width": 224})
        self.do_convert_rgb = bool(do_convert_rgb)


class BitImageProcessor(_ShortestEdge):
    names = ("BitImageProcessor",)

    def setup(self, *, do_resize=True, size=None, resample=BICUBIC, do_center_crop=True,
              crop_size=None, do_rescale=True, rescale_factor=RESCALE, do_normalize=True,
              image_mean=None, image_std=None, do_convert_rgb=True):
        self.read_shortest(do_resize, size if size is not None else {"shortest_edge": 224},
                           resample, do_rescale, rescale_factor, do_normalize, image_mean,
                           image_std, OPENAI_CLIP_MEAN, OPENAI_CLIP_STD)
        self.read_crop(do_center_crop, crop_size if crop_size is not None
                       else {"height": 224, "width": 224})
        self.do_convert_rgb = bool(do_convert_rgb)


class MobileNetV1ImageProcessor(_ShortestEdge):
    names = ("MobileNetV1ImageProcessor",)

    def setup(self, *, do_resize=True, size=None, resample=BILINEAR, do_center_crop=True,
              crop_size=None, do_rescale=True, rescale_factor=RESCALE, do_normalize=True,
              image_mean=None, image_std=None):
        self.read_shortest(do_resize, size if size is not None else {"shortest_edge": 256},
                           resample, do_rescale, rescale_factor, do_normalize, image_mean,
                           image_std, IMAGENET_STANDARD_MEAN, IMAGENET_STANDARD_STD)
        self.read_crop(do_center_crop, crop_size if crop_size is not None
                       else {"height": 224, "width": 224})


class MobileNetV2ImageProcessor(MobileNetV1ImageProcessor):
    names = ("MobileNetV2ImageProcessor",)

    def setup(self, *, do_resize=True, size=None, resample=BILINEAR, do_center_crop=True,
              crop_size=None, do_rescale=True, rescale_factor=RESCALE, do_normalize=True,
              image_mean=None, image_std=None, do_reduce_labels=False):
        super().setup(do_resize=do_resize, size=size, resample=resample,
                      do_center_crop=do_center_crop, crop_size=crop_size, do_rescale=do_rescale,
                      rescale_factor=rescale_factor, do_normalize=do_normalize,
                      image_mean=image_mean, image_std=image_std)


class OwlViTImageProcessor(Resized):
    names = ("OwlViTImageProcessor",)

    def setup(self, *, do_resize=True, size=None, resample=BICUBIC, do_center_crop=False,
              crop_size=None, do_rescale=True, rescale_factor=RESCALE, do_normalize=True,
              image_mean=None, image_std=None):
        # an old config's `rescale` key never reaches do_rescale (__init__ overwrites it)
        self.read(do_resize, size if size is not None else {"height": 768, "width": 768}, resample,
                  do_rescale, rescale_factor, do_normalize, image_mean, image_std,
                  OPENAI_CLIP_MEAN, OPENAI_CLIP_STD)
        self.read_crop(do_center_crop, crop_size if crop_size is not None
                       else {"height": 768, "width": 768})


class ConvNextImageProcessor(Resized):
    names = ("ConvNextImageProcessor",)

    def setup(self, *, do_resize=True, size=None, crop_pct=None, resample=BILINEAR,
              do_rescale=True, rescale_factor=RESCALE, do_normalize=True, image_mean=None,
              image_std=None):
        self.read(do_resize, size if size is not None else {"shortest_edge": 384}, resample,
                  do_rescale, rescale_factor, do_normalize, image_mean, image_std,
                  IMAGENET_STANDARD_MEAN, IMAGENET_STANDARD_STD, default_to_square=False)
        self.crop_pct = crop_pct if crop_pct is not None else 224 / 256

    def check_size(self):
        require(self.size, ("shortest_edge",), self.name)

    def transform(self, pixels):
        if self.do_resize:
            pixels = self._resize(pixels)
        return self.rescale_normalize(pixels), pixels.shape[:2]

    def _resize(self, pixels):
        """ConvNextImageProcessor.resize: under 384, resize the shortest edge to
        int(shortest_edge / crop_pct) and center crop a square; from 384 on, warp to a square."""
        edge = self.size["shortest_edge"]
        if edge >= 384:
            return T.resize(pixels, (edge, edge), self.resample)
        resize_to = shortest_edge_size(pixels.shape[:2], int(edge / self.crop_pct),
                                       default_to_square=False)
        return T.center_crop(T.resize(pixels, resize_to, self.resample), (edge, edge))


class MobileViTImageProcessor(_ShortestEdge):
    names = ("MobileViTImageProcessor",)

    def setup(self, *, do_resize=True, size=None, resample=BILINEAR, do_rescale=True,
              rescale_factor=RESCALE, do_center_crop=True, crop_size=None,
              do_flip_channel_order=True, do_reduce_labels=False):
        self.read_shortest(do_resize, size if size is not None else {"shortest_edge": 224},
                           resample, do_rescale, rescale_factor, False, None, None, None, None)
        self.read_crop(do_center_crop, crop_size if crop_size is not None
                       else {"height": 256, "width": 256})
        self.do_flip_channel_order = do_flip_channel_order

    def transform(self, pixels):
        """MobileViTImageProcessor._preprocess: resize, rescale, center crop (after the rescale,
        so a crop larger than the image pads with 0.0), flip RGB to BGR; no normalization."""
        if self.do_resize:
            pixels = T.resize(pixels, self.output_size(pixels.shape[:2]), self.resample)
        if self.do_rescale:
            pixels = T.rescale(pixels, self.rescale_factor)
        if self.do_center_crop:
            pixels = T.center_crop(pixels, (self.crop_size["height"], self.crop_size["width"]))
        size = pixels.shape[:2]
        if self.do_flip_channel_order:
            pixels = T.flip_channel_order(pixels)
        return pixels, size
