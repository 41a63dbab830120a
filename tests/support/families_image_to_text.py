"""Tiny image-to-text fixtures beyond families_vision_audio.py's vision-encoder-decoder (ViT +
GPT-2): ``trocr``, a VisionEncoderDecoderModel shaped as microsoft/trocr-small-printed (and
Xenova/trocr-small-printed, its optimum export): a DeiT encoder, a TrOCRForCausalLM decoder whose
cross-attention takes the encoder's wider states (``cross_attention_hidden_size``, no projection),
an XLM-RoBERTa sentencepiece tokenizer (<s>=0, <pad>=1, </s>=2), a DeiTFeatureExtractor
preprocessor_config.json without center crop (mean/std 0.5, bicubic) and a generation config with
no max_length, so transformers' pipeline default of 256 new tokens applies.

Same conventions as families_vision_audio.py (whose helpers this script uses): random weights
from transformers config classes, seeded and perturbed, exported offline with optimum-onnx
``main_export`` (task image-to-text-with-past: onnx/encoder_model.onnx +
onnx/decoder_model_merged.onnx), onnxruntime references on references/image_*.png. The
transformers pipeline references are record_image_to_text.py's (it rebuilds the model with
``trocr_model``).

A random decoder settles on one token and repeats it to the length limit. The output rows of
</s> and of the token it settles on for camera_L (``SETTLES_ON``) are swapped, so that generation
stops on some images (camera_L: 23 tokens and </s>, past the global default max_length of 20) and
runs to the limit on others; the recorded cases use both.

Usage (export environment):

    ~/.cache/transmuter-tests/venv-export/bin/python tests/support/families_image_to_text.py

Pinned versions: those of families_vision_audio.py (requirements-export.txt).
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

if __name__ == "__main__" and os.environ.get("PYTHONHASHSEED") != "0":
    # same as families_vision_audio.py: optimum picks some names from Python sets
    os.environ["PYTHONHASHSEED"] = "0"
    os.execv(sys.executable, [sys.executable, *sys.argv])

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

sys.path.insert(0, str(Path(__file__).resolve().parent))

import numpy as np  # noqa: E402
import torch  # noqa: E402

import families_text  # noqa: E402
import families_vision_audio as fva  # noqa: E402

BOS, PAD, EOS = 0, 1, 2  # XLM-RoBERTa's ids, TrOCR's bos / pad / eos and decoder start
SETTLES_ON = 64  # the token the perturbed decoder repeats on camera_L (see the module doc)
# trocr-small-printed's preprocessor_config.json at 32 pixels (the Hub file: size 384)
PREPROCESSOR = {"do_center_crop": False, "do_normalize": True, "do_resize": True,
                "feature_extractor_type": "DeiTFeatureExtractor", "image_mean": [0.5, 0.5, 0.5],
                "image_std": [0.5, 0.5, 0.5], "processor_class": "TrOCRProcessor", "resample": 3,
                "size": 32}


def trocr_tokenizer(tmp: Path):
    return families_text.xlmr_tokenizer(tmp / "trocr_tok")


def trocr_model(tok):
    """The seeded, perturbed torch model (same weights on every call)."""
    from transformers import (DeiTConfig, GenerationConfig, TrOCRConfig, VisionEncoderDecoderConfig,
                              VisionEncoderDecoderModel)

    enc = DeiTConfig(hidden_size=48, num_hidden_layers=2, num_attention_heads=2, intermediate_size=96,
                     image_size=32, patch_size=8, qkv_bias=True, encoder_stride=16)
    dec = TrOCRConfig(vocab_size=len(tok), d_model=32, decoder_layers=2, decoder_attention_heads=2,
                      decoder_ffn_dim=64, activation_function="relu", max_position_embeddings=512,
                      layernorm_embedding=True, scale_embedding=True, use_learned_position_embeddings=True,
                      cross_attention_hidden_size=48, init_std=families_text.DECODER_INIT,
                      bos_token_id=BOS, pad_token_id=PAD, eos_token_id=EOS, decoder_start_token_id=EOS,
                      tie_word_embeddings=False)
    cfg = VisionEncoderDecoderConfig.from_encoder_decoder_configs(enc, dec)
    cfg.decoder_start_token_id, cfg.pad_token_id, cfg.eos_token_id = EOS, PAD, EOS
    cfg.tie_word_embeddings = False
    cfg.architectures = ["VisionEncoderDecoderModel"]
    fva.seed(0)
    model = fva.perturb(VisionEncoderDecoderModel(config=cfg).eval())
    with torch.no_grad():
        w = model.decoder.output_projection.weight
        w[[EOS, SETTLES_ON]] = w[[SETTLES_ON, EOS]].clone()
    model.generation_config = GenerationConfig(bos_token_id=BOS, decoder_start_token_id=EOS,
                                               eos_token_id=EOS, pad_token_id=PAD)
    return model


def trocr_processor():
    from transformers import DeiTImageProcessor

    return DeiTImageProcessor(**{k: v for k, v in PREPROCESSOR.items()
                                 if k not in ("feature_extractor_type", "processor_class")})


def build_trocr():
    fx = fva.fresh_fixture("trocr")
    tmp = fva.tmpdir()
    tok = trocr_tokenizer(tmp)
    model = trocr_model(tok)
    proc = trocr_processor()
    d = fva.save_model_dir(model, tmp, proc, tok)
    out = fva.export_main(d, tmp / "out", "image-to-text-with-past", 18)
    fva.move_onnx(out, fx, {"encoder_model.onnx": "encoder_model.onnx",
                            "decoder_model_merged.onnx": "decoder_model_merged.onnx"})
    fva.copy_hub_files(d, fx, extra_skip=("preprocessor_config.json", "sentencepiece.bpe.model"))
    (fx / "preprocessor_config.json").write_text(json.dumps(PREPROCESSOR, indent=2) + "\n")
    images = fva.write_images(fx)
    pv = proc(images=images, return_tensors="np")["pixel_values"]
    es = fva.session(fx / "onnx/encoder_model.onnx")
    ef = fva.cast_feeds(es, {"pixel_values": pv})
    eo = fva.run(es, ef)
    graphs = {"onnx/encoder_model.onnx": {"reference": fva.save_reference(fx, "onnx/encoder_model.onnx",
                                                                          [(ef, eo)])}}
    ds = fva.session(fx / "onnx/decoder_model_merged.onnx")
    first = {"input_ids": np.array([[EOS]] * 2, np.int64), "encoder_hidden_states": eo["last_hidden_state"],
             "use_cache_branch": np.array([False]), **fva.empty_past(ds, 2)}
    graphs["onnx/decoder_model_merged.onnx"] = {
        "reference": fva.save_reference(fx, "onnx/decoder_model_merged.onnx", fva.decoder_steps(ds, first, 3)),
        "static_inputs": ["use_cache_branch"]}
    fva.write_manifest(fx, family="trocr", architecture="VisionEncoderDecoderModel",
                       task="image-to-text-with-past", opset=18, graphs=graphs,
                       notes=["encoder DeiT (32x32, patch 8, hidden 48: cls + distillation tokens), decoder "
                              "TrOCRForCausalLM (d_model 32, cross-attention over the 48-wide states)",
                              "shaped as microsoft/trocr-small-printed: XLM-R sentencepiece tokenizer, "
                              "DeiTFeatureExtractor without center crop, no max_length in generation_config",
                              f"output rows of </s> and token {SETTLES_ON} swapped so generation stops on "
                              "some images (families_image_to_text.py)",
                              "decoder prompt is decoder_start_token_id (</s>); 3 greedy KV-cache steps",
                              "pipeline references: record_image_to_text.py"])
    shutil.rmtree(tmp)
    return fx


BUILDERS = {"trocr": build_trocr}

if __name__ == "__main__":
    sys.exit(fva.main(sys.argv[1:], BUILDERS))
