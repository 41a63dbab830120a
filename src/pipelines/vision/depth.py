"""depth-estimation: transformers' DepthEstimationPipeline (DPT, Depth Anything).

    pipe("room.jpg") -> {"predicted_depth": float32 [H, W] at the image's size,
                         "depth": PIL "L" image, the depth scaled to 0..255}
"""

import numpy as np

from .base import VisionPipeline, image_size
from .interpolate import bicubic


class DepthEstimationPipeline(VisionPipeline):
    task = "depth-estimation"

    def postprocess(self, outputs):
        from PIL import Image

        out = outputs[0]
        # post_process_depth_estimation: bicubic back to the input image's size
        depth = bicubic(self.output(out, "predicted_depth"), image_size(out))
        span = depth.max() - depth.min()
        # as transformers: (d - min) / (max - min), NaN for a constant map; uint8 of NaN is 0
        with np.errstate(invalid="ignore", divide="ignore"):
            scaled = ((depth - depth.min()) / span * 255).astype("uint8")
        return {"predicted_depth": depth, "depth": Image.fromarray(scaled)}
