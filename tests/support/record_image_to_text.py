"""transformers' ``pipeline("image-to-text")`` references for the VisionEncoderDecoder fixtures:
vision-encoder-decoder (ViT + GPT-2, families_vision_audio.py) and trocr (DeiT + TrOCR,
families_image_to_text.py).

Writes ``references/pipeline_image-to-text.json`` of each: greedy with the pipeline's defaults
(vision-encoder-decoder's generation_config max_length 16 wins over the pipeline's 256 new
tokens; trocr has no max_length, so 256 applies), ``max_new_tokens`` at two values, greedy,
beam (3, and 3 with two returned sequences) and the logits processors through
``generate_kwargs``, a batch; on the fixture's images and scikit-image's photos
(tests/support/image_cases.py, made the same way by the test). Each case keeps the token ids
``generate`` returned per image (what the pipeline decoded), and the record keeps the pipeline's
resolved generation settings. Sampling is not recorded: torch's random draws are not ours.

The PyTorch models are rebuilt with the fixtures' own builders (same seeds), never re-exported;
each must agree with onnxruntime on the committed graphs and reference inputs to 1e-4 (else the
script stops). The pipelines load the tokenizer and image processor from the fixture folder.

Format: {"task", "generation_config": {...}, "cases": [{"name", "images": [...],
"call_kwargs", "batch_size", "outputs": [...], "token_ids": [...]}, ...]}; an image is
{"path": relative to the fixture} or {"skimage": an image_cases name}.

Usage (export environment):

    ~/.cache/transmuter-tests/venv-export/bin/python tests/support/record_image_to_text.py
"""

from __future__ import annotations

import copy
import os
import shutil
import sys
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

sys.path.insert(0, str(Path(__file__).resolve().parent))

import numpy as np  # noqa: E402
import torch  # noqa: E402
from PIL import Image  # noqa: E402

import families_image_to_text as fit  # noqa: E402
import families_vision_audio as fva  # noqa: E402
import image_cases  # noqa: E402
import record_audio_pipelines as rap  # noqa: E402

TASK = "image-to-text"
FIXTURE_IMAGES = [{"path": "references/image_0.png"}, {"path": "references/image_1.png"}]
PHOTOS = [{"skimage": n} for n in ("astronaut", "coffee", "chelsea", "text_L", "camera_L", "page_L")]
# generation settings the pipeline resolved, as the test compares them
SETTINGS = ("max_new_tokens", "max_length", "num_beams", "do_sample", "decoder_start_token_id",
            "eos_token_id", "pad_token_id")


def load(fx: Path, spec: dict) -> Image.Image:
    if "path" in spec:
        return Image.open(fx / spec["path"])
    return image_cases.make(spec["skimage"])


def rebuild(name: str):
    if name == "vision-encoder-decoder":
        return rap.capture_model(fva.build_vision_encoder_decoder)
    tmp = fva.tmpdir()
    try:
        return fit.trocr_model(fit.trocr_tokenizer(tmp)).eval()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def check_onnx(fx: Path, model) -> None:
    """The rebuilt model against onnxruntime on the committed graphs: the encoder's states, and
    each recorded decoder step's logits from the torch decoder over the whole sequence so far."""
    enc_in = rap.reference_steps(fx, "encoder_model")[0]
    enc = rap.ort_outputs(fx, "onnx/encoder_model.onnx", enc_in)["last_hidden_state"]
    with torch.no_grad():
        states = model.encoder(torch.from_numpy(enc_in["pixel_values"])).last_hidden_state
    rap.assert_close(f"{fx.name} encoder", states, enc)
    ids = None
    for k, feeds in enumerate(rap.reference_steps(fx, "decoder_model_merged")):
        out = rap.ort_outputs(fx, "onnx/decoder_model_merged.onnx", feeds)["logits"]
        ids = feeds["input_ids"] if ids is None else np.concatenate([ids, feeds["input_ids"]], axis=1)
        with torch.no_grad():
            t = model(encoder_outputs=(torch.from_numpy(feeds["encoder_hidden_states"]),),
                      decoder_input_ids=torch.from_numpy(ids)).logits[:, -out.shape[1]:]
        rap.assert_close(f"{fx.name} decoder step {k}", t, out)


def pipeline_for(fx: Path, model):
    from transformers import AutoImageProcessor, AutoTokenizer, pipeline

    return pipeline(TASK, model=model, tokenizer=AutoTokenizer.from_pretrained(fx),
                    image_processor=AutoImageProcessor.from_pretrained(fx), device="cpu")


def run_case(p, fx: Path, name: str, images: list[dict], call_kwargs: dict, batch_size=None) -> dict:
    """One pipeline call per image (or one call on the list with ``batch_size``); the ids
    ``generate`` returned reach postprocess, which is spied on."""
    seen = []
    post = p.postprocess

    def spy(model_outputs, **kw):
        seen.append(model_outputs.tolist())
        return post(model_outputs, **kw)

    p.postprocess = spy
    if batch_size is not None and p.tokenizer.pad_token is None:
        # transformers' collate refuses a tokenizer without pad token (GPT-2's), though the images
        # need no padding; its error message's own fix, which changes no output
        p.tokenizer.pad_token = p.tokenizer.eos_token
    try:
        loaded = [load(fx, s) for s in images]
        if batch_size is None:
            outs = [p(im, **copy.deepcopy(call_kwargs)) for im in loaded]
        else:
            outs = p(loaded, batch_size=batch_size, **copy.deepcopy(call_kwargs))
    finally:
        p.postprocess = post
    case = {"name": name, "images": images, "call_kwargs": call_kwargs, "batch_size": batch_size,
            "outputs": outs, "token_ids": seen}
    texts = [r["generated_text"] for out in outs for r in out]
    print(f"  {name}: {[t[:24] for t in texts]}", flush=True)
    return case


def cases(p, fx: Path, stopping: list[dict]) -> list[dict]:
    """``stopping``: images whose greedy generation ends before 256 tokens (the default case)."""
    every = FIXTURE_IMAGES + PHOTOS
    gk = {"max_new_tokens": 8}
    out = [run_case(p, fx, "defaults", stopping, {}),
           run_case(p, fx, "max_new_tokens_5", every, {"max_new_tokens": 5}),
           run_case(p, fx, "max_new_tokens_12", every, {"max_new_tokens": 12}),
           run_case(p, fx, "greedy_generate_kwargs", every,
                    {"generate_kwargs": {**gk, "do_sample": False, "num_beams": 1}}),
           run_case(p, fx, "beam_3", every, {"generate_kwargs": {**gk, "num_beams": 3}}),
           run_case(p, fx, "beam_3_return_2", PHOTOS[:3],
                    {"generate_kwargs": {**gk, "num_beams": 3, "num_return_sequences": 2}}),
           run_case(p, fx, "no_repeat_ngram_2", every,
                    {"generate_kwargs": {"max_new_tokens": 10, "no_repeat_ngram_size": 2}}),
           run_case(p, fx, "repetition_penalty", every,
                    {"max_new_tokens": 10, "generate_kwargs": {"repetition_penalty": 1.5}}),
           run_case(p, fx, "batch_4", every, {"generate_kwargs": {**gk, "do_sample": False, "num_beams": 1}},
                    batch_size=4)]
    # transformers' batches of fixed-size images equal its one-by-one calls: the reference holds
    if out[-1]["outputs"] != out[3]["outputs"]:
        raise SystemExit("STOP: transformers' batch differs from one by one")
    return out


def record(name: str, stopping: list[dict]) -> None:
    fx = fva.FIXTURES / name
    print(f"[{name}] rebuilding the torch model", flush=True)
    model = rebuild(name)
    check_onnx(fx, model)
    p = pipeline_for(fx, model)
    settings = {k: getattr(p.generation_config, k) for k in SETTINGS}
    print(f"  pipeline generation settings: {settings}")
    found = cases(p, fx, stopping)
    default = found[0]
    for ids in default["token_ids"]:
        if len(ids[0]) >= 256:
            raise SystemExit(f"STOP: {name}'s default case ran to the length limit: pick images that stop")
    rap.write_record(name, TASK, found, generation_config=settings)


def main() -> int:
    record("vision-encoder-decoder", FIXTURE_IMAGES + PHOTOS)
    # trocr generates until </s>, 256 tokens by default: the images that stop early
    record("trocr", [{"skimage": "camera_L"}, {"skimage": "text_L"}])
    return 0


if __name__ == "__main__":
    sys.exit(main())
