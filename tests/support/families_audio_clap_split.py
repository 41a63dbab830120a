"""The CLAP fixture split as transformers.js ships Xenova/clap-htsat-unfused: ``onnx/text_model.onnx``
(ClapTextModelWithProjection: input_ids + attention_mask -> text_embeds) and ``onnx/audio_model.onnx``
(ClapAudioModelWithProjection: input_features -> audio_embeds), both projections, not normalized.

  * clap-split  the SAME weights as tests/fixtures/clap: the torch ClapModel is rebuilt with
                families_vision_audio.py's build_clap (record_audio_pipelines.capture_model: nothing
                of the clap fixture is rewritten) and checked against the committed clap/onnx/model.onnx
                (1e-4); the halves are loaded from its state dict and exported by optimum's export_models
                with OnnxConfigs after transformers.js' scripts/extra/clap.py (optimum-onnx 0.1.0 has
                none for CLAP). The hub files (config, tokenizer, preprocessor) are the clap fixture's.

The pipeline reference is the clap fixture's references/pipeline_zero-shot-audio-classification.json,
copied: transformers' pipeline on the joint torch model, same weights. This script checks that the
halves give it: ClapModel.forward's logits_per_audio = exp(logit_scale_a) * unit(audio_embeds) @
unit(text_embeds).T from the split graphs (onnxruntime) against the joint graph's, and the normalized
embeddings against the joint graph's text_embeds / audio_embeds, all on the clap reference inputs.

Usage (export environment):

    ~/.cache/transmuter-tests/venv-export/bin/python tests/support/families_audio_clap_split.py

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

sys.path.insert(0, str(Path(__file__).resolve().parent))

import numpy as np  # noqa: E402
import onnx  # noqa: E402

import families_vision_audio as fva  # noqa: E402
import record_audio_pipelines as rap  # noqa: E402

TASK = "zero-shot-audio-classification"
HUB_FILES = ["config.json", "merges.txt", "preprocessor_config.json", "special_tokens_map.json",
             "tokenizer.json", "tokenizer_config.json", "vocab.json"]
SPLIT_ATOL = 1e-5  # onnxruntime on the split graphs vs on the joint graph: same float32 ops, reordered


def _split_configs(frames: int, mels: int):
    """transformers.js' scripts/extra/clap.py configs: text -> text_embeds, audio -> audio_embeds."""
    from optimum.exporters.onnx import OnnxConfig
    from optimum.exporters.onnx.config import TextEncoderOnnxConfig
    from optimum.utils import DummyInputGenerator, NormalizedConfig, NormalizedTextConfig

    class TextWithProjection(TextEncoderOnnxConfig):
        NORMALIZED_CONFIG_CLASS = NormalizedTextConfig
        DEFAULT_ONNX_OPSET = 18

        @property
        def inputs(self):
            return {"input_ids": {0: "batch_size", 1: "sequence_length"},
                    "attention_mask": {0: "batch_size", 1: "sequence_length"}}

        @property
        def outputs(self):
            return {"text_embeds": {0: "batch_size"}}

    class DummyFeatures(DummyInputGenerator):
        SUPPORTED_INPUT_NAMES = ("input_features",)

        def __init__(self, task, normalized_config, batch_size=2, **kwargs):
            self.batch_size = batch_size

        def generate(self, input_name, framework="pt", int_dtype="int64", float_dtype="fp32"):
            return self.random_float_tensor([self.batch_size, 1, frames, mels], framework=framework,
                                            dtype=float_dtype)

    class AudioWithProjection(OnnxConfig):
        NORMALIZED_CONFIG_CLASS = NormalizedConfig
        DUMMY_INPUT_GENERATOR_CLASSES = (DummyFeatures,)
        DEFAULT_ONNX_OPSET = 18

        @property
        def inputs(self):
            return {"input_features": {0: "batch_size"}}

        @property
        def outputs(self):
            return {"audio_embeds": {0: "batch_size"}}

    return TextWithProjection, AudioWithProjection


def _halves(model):
    """ClapTextModelWithProjection / ClapAudioModelWithProjection holding the joint model's weights."""
    from transformers import ClapAudioModelWithProjection, ClapTextModelWithProjection

    sd = model.state_dict()
    text = ClapTextModelWithProjection(model.config.text_config).eval()
    text.load_state_dict({k: v for k, v in sd.items() if k.startswith(("text_model.", "text_projection."))})
    audio = ClapAudioModelWithProjection(model.config.audio_config).eval()
    audio.load_state_dict({k: v for k, v in sd.items() if k.startswith(("audio_model.", "audio_projection."))})
    return text, audio


def _unit(x):
    return x / np.linalg.norm(x, axis=-1, keepdims=True)


def _check_against_joint(fx: Path, joint_fx: Path, scale_a: float) -> dict:
    """The split graphs (onnxruntime) give the joint graph's embeddings and logits_per_audio."""
    feeds = rap.reference_steps(joint_fx, "model")[0]
    joint = rap.ort_outputs(joint_fx, "onnx/model.onnx", feeds)
    text = rap.ort_outputs(fx, "onnx/text_model.onnx", {k: feeds[k] for k in ("input_ids", "attention_mask")})
    audio = rap.ort_outputs(fx, "onnx/audio_model.onnx", {"input_features": feeds["input_features"]})
    t, a = _unit(text["text_embeds"]), _unit(audio["audio_embeds"])
    diffs = {"text_embeds (normalized)": float(np.abs(t - joint["text_embeds"]).max()),
             "audio_embeds (normalized)": float(np.abs(a - joint["audio_embeds"]).max()),
             "logits_per_audio": float(np.abs(scale_a * a @ t.T - joint["logits_per_audio"]).max())}
    for name, d in diffs.items():
        if not d <= SPLIT_ATOL:
            raise SystemExit(f"STOP: split {name} differs from the joint clap graph by {d}")
        print(f"  split vs joint {name}: max |diff| {d:.2e}")
    return diffs


def _logit_scale_a(joint_fx: Path) -> float:
    graph = onnx.load(str(joint_fx / "onnx" / "model.onnx")).graph
    return float(onnx.numpy_helper.to_array(next(t for t in graph.initializer if t.name == "logit_scale_a")))


def build_clap_split():
    from optimum.exporters.onnx import export_models

    joint_fx = fva.FIXTURES / "clap"
    model = rap.capture_model(fva.build_clap)  # the clap fixture's seed, config and weights
    rap.check_configs("clap", model)
    onnx_check = rap.check_single_onnx(joint_fx, model, {n: n for n in ["logits_per_audio", "logits_per_text",
                                                                        "text_embeds", "audio_embeds"]})
    stored = float(model.logit_scale_a.detach())
    if abs(stored - _logit_scale_a(joint_fx)) > 1e-7:
        raise SystemExit("STOP: the rebuilt logit_scale_a differs from the joint graph's")
    fx = fva.fresh_fixture("clap-split")
    tmp = fva.tmpdir()
    text, audio = _halves(model)
    frames = rap.reference_steps(joint_fx, "model")[0]["input_features"].shape[2]
    TextCfg, AudioCfg = _split_configs(frames, model.config.audio_config.num_mel_bins)
    out = tmp / "out"
    out.mkdir()
    with fva.quiet():
        export_models({"text_model": (text, TextCfg(text.config, task="feature-extraction")),
                       "audio_model": (audio, AudioCfg(audio.config, task="feature-extraction"))},
                      output_dir=out, opset=18, device="cpu")
    fva.move_onnx(out, fx, {"text_model.onnx": "text_model.onnx", "audio_model.onnx": "audio_model.onnx"})
    for name in HUB_FILES:
        shutil.copy(joint_fx / name, fx / name)
    feeds = rap.reference_steps(joint_fx, "model")[0]
    graphs = {
        "onnx/text_model.onnx": {"reference": fva.reference_single(
            fx, "onnx/text_model.onnx", {k: feeds[k] for k in ("input_ids", "attention_mask")})},
        "onnx/audio_model.onnx": {"reference": fva.reference_single(
            fx, "onnx/audio_model.onnx", {"input_features": feeds["input_features"]})},
    }
    for g, want in [("onnx/text_model.onnx", (["input_ids", "attention_mask"], ["text_embeds"])),
                    ("onnx/audio_model.onnx", (["input_features"], ["audio_embeds"]))]:
        m = onnx.load(str(fx / g))
        got = ([i.name for i in m.graph.input], [o.name for o in m.graph.output])
        if got != want:
            raise SystemExit(f"STOP: {g} has inputs / outputs {got}, not {want}")
    split_check = _check_against_joint(fx, joint_fx, float(np.exp(stored)))
    ref = json.loads((joint_fx / "references" / f"pipeline_{TASK}.json").read_text())
    ref["notes"] = [*ref.get("notes", []),
                    "copied from the clap fixture (families_audio_clap_split.py): transformers' pipeline on the "
                    "joint torch ClapModel whose weights the split graphs hold; the sine case reads the clap "
                    "fixture's references/audio_*.npy",
                    "the split graphs hold no logit scale: a pipeline over them is given logit_scale = "
                    f"exp(logit_scale_a) = {np.exp(stored)!r} (the joint graph's initializer logit_scale_a)"]
    ref["split_vs_joint_max_abs_diff"] = split_check
    fva.save_json(fx / "references" / f"pipeline_{TASK}.json", ref)
    fva.write_manifest(
        fx, family="clap", architecture="ClapModel", task=TASK, opset=18, graphs=graphs,
        exporter=f"{fva.OPTIMUM_ONNX} export_models with custom OnnxConfigs (optimum-onnx 0.1.0 has none for clap)",
        notes=["Xenova's split layout (transformers.js scripts/extra/clap.py): ClapTextModelWithProjection "
               "(input_ids + attention_mask -> text_embeds) and ClapAudioModelWithProjection (input_features "
               "-> audio_embeds) loaded with the joint ClapModel's weights, exported together by optimum's "
               "export_models (TorchScript export, dynamic batch and sequence axes)",
               "text_embeds / audio_embeds are the projections, not L2-normalized (ClapModel.forward "
               "normalizes them before the logits; the joint graph's outputs are normalized)",
               "same config, seed and weights as the 'clap' fixture: the torch model rebuilt by its builder "
               f"agrees with clap/onnx/model.onnx within {onnx_check}",
               "references: the clap fixture's model.npz inputs (three texts padded to the longest, the two "
               "sine clips' features)",
               f"checked when made: split vs joint graph (onnxruntime) {split_check}",
               f"logit_scale_a = {stored!r} (exp: {np.exp(stored)!r}), logit_scale_t is unused by "
               "logits_per_audio"],
        text_inputs={"texts": fva.ZS_TEXTS, "tokenizer_kwargs": {"padding": True}})
    shutil.rmtree(tmp)
    return fx


BUILDERS = {"clap-split": build_clap_split}


if __name__ == "__main__":
    sys.exit(fva.main(sys.argv[1:], BUILDERS))
