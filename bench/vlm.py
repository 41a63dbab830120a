"""image-text-to-text speed: Transmuter's pipeline vs an onnxruntime loop over the same three
files, on the SmolVLM-256M-sized model of bench/_vlm_models.py (random weights), batch 1.

    python bench/vlm.py [--new 32] [--repeat 2] [--splitting] [--backend jax|mlx]

One chat: a photo (scikit-image's astronaut, 512 x 512) and a question, greedy, --new tokens
(``min_new_tokens=new``: random weights would stop anywhere). Without --splitting the photo is
one 512-pixel tile (64 image tokens); with it, Idefics3's tiles of the repo's processor settings
plus the global image.

- Time to first token: a call that makes one new token (image decode, processor, vision encoder,
  prompt step). Decode tokens/s: (new - 1) / (t(new) - t(1)).
- Transmuter: ``pipeline("image-text-to-text", folder)(text=chat, images=[photo], ...)``, the
  whole pipeline call.
- onnxruntime: the same .onnx files, ORT_ENABLE_ALL, threads = cores. Its inputs come from the
  same preprocessing, timed with it: Transmuter's processor (``pipe.preprocess``; equal to
  transformers' Idefics3Processor, tests/test_pipelines_image_text_to_text.py). Then
  vision_encoder, embed_tokens, the image features in the image tokens' rows,
  decoder_model_merged with its growing past, argmax on the host.
Each peer runs once untimed first (compiles, warms caches), then --repeat times alternating with
the other; the best run counts. The two must make the same tokens (printed).
"""

import argparse
import os
import time

import numpy as np

import transmuter
from _vlm_models import model_folder

QUESTION = "Can you describe this image?"


def photo():
    from PIL import Image
    from skimage import data

    return Image.fromarray(data.astronaut())


def chat():
    return [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": QUESTION}]}]


class OrtLoop:
    """Greedy generation over the three graphs with onnxruntime, inputs from ``pipe.preprocess``."""

    def __init__(self, folder, pipe, split):
        import onnxruntime as ort

        options = ort.SessionOptions()
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        options.intra_op_num_threads = os.cpu_count()
        self.sessions = {name: ort.InferenceSession(str(folder / "onnx" / f"{name}.onnx"),
                                                    options, providers=["CPUExecutionProvider"])
                         for name in ("vision_encoder", "embed_tokens", "decoder_model_merged")}
        decoder = self.sessions["decoder_model_merged"]
        self.past = [i for i in decoder.get_inputs() if i.name.startswith("past_key_values")]
        self.pipe, self.split = pipe, split

    def __call__(self, image, new):
        chunk = next(iter(self.pipe.preprocess({"messages": chat(), "images": [image]},
                                               split=self.split)))
        ids = np.asarray([chunk["ids"]], np.int64)
        pixels, mask = chunk["vision"]  # Idefics3: tiles and their pixel mask
        features = self.sessions["vision_encoder"].run(None, {
            "pixel_values": pixels[None], "pixel_attention_mask": mask[None]})[0]
        embeds = self.sessions["embed_tokens"].run(None, {"input_ids": ids})[0]
        at = np.nonzero(ids[0] == self.pipe.image_token_id)[0]
        embeds[0, at] = features.reshape(-1, features.shape[-1])
        n = ids.shape[1]
        feeds = {"inputs_embeds": embeds, "attention_mask": np.ones((1, n), np.int64),
                 "position_ids": np.arange(n, dtype=np.int64)[None]}
        feeds.update({p.name: np.zeros((1, p.shape[1], 0, p.shape[3]), np.float32)
                      for p in self.past})
        names = [o.name for o in self.sessions["decoder_model_merged"].get_outputs()]
        tokens = []
        for _ in range(new):
            out = dict(zip(names, self.sessions["decoder_model_merged"].run(names, feeds)))
            token = int(out["logits"][0, -1].argmax())
            tokens.append(token)
            total = feeds["attention_mask"].shape[1]
            feeds = {"inputs_embeds": self.sessions["embed_tokens"].run(
                         None, {"input_ids": np.array([[token]], np.int64)})[0],
                     "attention_mask": np.ones((1, total + 1), np.int64),
                     "position_ids": np.array([[total]], np.int64)}
            feeds.update({p.name: out[p.name.replace("past_key_values", "present")]
                          for p in self.past})
        return tokens


def ours(pipe, split):
    def run(image, new):
        out = pipe(text=chat(), images=[image], max_new_tokens=new, min_new_tokens=new,
                   do_image_splitting=split, return_tensors=True)
        return out[0]["generated_token_ids"][-new:]
    return run


def timed(peers, image, new, repeat):
    """{peer: (tokens of the last run, best seconds)} for ``new`` tokens."""
    best, tokens = {}, {}
    for name, fn in peers.items():
        tokens[name] = fn(image, new)  # untimed: compiles and warms
    for _ in range(repeat):
        for name, fn in peers.items():
            start = time.perf_counter()
            tokens[name] = fn(image, new)
            best[name] = min(best.get(name, np.inf), time.perf_counter() - start)
    return tokens, best


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--new", type=int, default=32)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--splitting", action="store_true",
                        help="Idefics3's image splitting on (the repo's default; slow on a CPU)")
    parser.add_argument("--backend", default="jax", choices=["jax", "mlx"])
    args = parser.parse_args()
    folder = model_folder()
    pipe = transmuter.pipeline("image-text-to-text", str(folder), backend=args.backend)
    image = photo()
    peers = {"transmuter": ours(pipe, args.splitting),
             "onnxruntime": OrtLoop(folder, pipe, args.splitting)}
    first_tokens, first = timed(peers, image, 1, args.repeat)
    tokens, full = timed(peers, image, args.new, args.repeat)
    prompt = len(next(iter(pipe.preprocess({"messages": chat(), "images": [image]},
                                           split=args.splitting)))["ids"])
    print(f"SmolVLM-256M shape, batch 1, {prompt}-token prompt (image tokens included), "
          f"{args.new} new tokens, splitting {'on' if args.splitting else 'off'}, "
          f"backend {args.backend}, load {os.getloadavg()[0]:.1f}")
    print(f"{'peer':<12} {'TTFT s':>8} {'decode tok/s':>13} {'total s':>8}")
    rate = {}
    for name in peers:
        decode = full[name] - first[name]
        if decode <= 0:
            raise SystemExit(f"{name}: {args.new} tokens took no longer than 1 ({full[name]:.3f} s "
                             f"vs {first[name]:.3f} s): the machine is too busy; give more --new "
                             "and --repeat")
        rate[name] = (args.new - 1) / decode
        print(f"{name:<12} {first[name]:>8.3f} {rate[name]:>13.1f} {full[name]:>8.3f}")
    print(f"ratio transmuter / onnxruntime: decode tok/s {rate['transmuter'] / rate['onnxruntime']:.2f}x, "
          f"TTFT {first['onnxruntime'] / first['transmuter']:.2f}x (above 1: Transmuter faster)")
    same = sum(a == b for a, b in zip(tokens["transmuter"], tokens["onnxruntime"]))
    print(f"tokens equal: {same} of {args.new}; first token equal: "
          f"{first_tokens['transmuter'] == first_tokens['onnxruntime']}")


if __name__ == "__main__":
    main()
