"""The Whisper models and recordings of bench/asr.py, built once into $TRANSMUTER_BENCH_CACHE
(default ~/.cache/transmuter-bench)/asr/.

- ``whisper-base``: openai/whisper-base's config.json as the Hub has it (d_model 512, 6 + 6
  layers, 8 heads, FFN 2048, 80 mels, vocab 51865, 1500 source / 448 target positions).
- ``whisper-tiny``: the same with openai/whisper-tiny's sizes (d_model 384, 4 + 4 layers, 6
  heads, FFN 1536) and its alignment heads; the two repos differ in nothing else.
- ``whisper-small``: openai/whisper-small's sizes (d_model 768, 12 + 12 layers, 12 heads, FFN
  3072), for a machine with time for it (not run by default).

Random weights (torch seed 0, transformers' init), so the texts are garbage; the shapes and
therefore the cost are the real ones. The tokenizer, generation_config.json and
preprocessor_config.json are openai/whisper-base's real files (multilingual: every size shares
them), read from $TRANSMUTER_HUB_FILES (default /work/shared/hub-files)/openai/whisper-base; the
Hub itself is never asked. The export environment ($TRANSMUTER_EXPORT_PYTHON: transformers 4.57.6,
torch CPU, optimum-onnx) saves the torch model and exports it with optimum-onnx's
``main_export`` (automatic-speech-recognition-with-past, opset 18) into ``onnx/``:
``encoder_model.onnx`` and ``decoder_model_merged.onnx``, the Hub's layout, which
``transmuter.pipeline`` and ``transformers.pipeline`` (torch weights beside them) both read.

The recordings are tests/fixtures/speech/long.flac (65 s of espeak-ng speech, 16 kHz): ``n``
slices of 60 s starting at evenly spread offsets within the first 5 s, so no two rows of a
batch hold the same samples.
"""

import os
import pathlib
import subprocess
import textwrap

import numpy as np

EXPORT_PYTHON = os.environ.get("TRANSMUTER_EXPORT_PYTHON",
                               "/root/.cache/transmuter-tests/venv-export/bin/python")
CACHE = pathlib.Path(os.environ.get("TRANSMUTER_BENCH_CACHE",
                                    pathlib.Path.home() / ".cache" / "transmuter-bench")) / "asr"
HUB_FILES = pathlib.Path(os.environ.get("TRANSMUTER_HUB_FILES", "/work/shared/hub-files"))
SOURCE = HUB_FILES / "openai" / "whisper-base"
SPEECH = pathlib.Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "speech" / "long.flac"
RATE = 16000
SECONDS = 60

# config.json overrides on whisper-base's, and generation_config.json's alignment_heads
# (openai/whisper-tiny's and -small's own; only word timestamps read them)
SIZES = {
    "whisper-tiny": ({"d_model": 384, "encoder_layers": 4, "decoder_layers": 4,
                      "num_hidden_layers": 4, "encoder_attention_heads": 6,
                      "decoder_attention_heads": 6, "encoder_ffn_dim": 1536,
                      "decoder_ffn_dim": 1536},
                     [[2, 2], [3, 0], [3, 2], [3, 3], [3, 4], [3, 5]]),
    "whisper-base": ({}, None),
    "whisper-small": ({"d_model": 768, "encoder_layers": 12, "decoder_layers": 12,
                       "num_hidden_layers": 12, "encoder_attention_heads": 12,
                       "decoder_attention_heads": 12, "encoder_ffn_dim": 3072,
                       "decoder_ffn_dim": 3072},
                      [[5, 3], [5, 9], [8, 0], [8, 4], [8, 7], [8, 8], [9, 0], [9, 7], [9, 9],
                       [10, 5]]),
}
# what the Hub repo holds besides config.json and the weights
HUB_COPIED = ["tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
              "added_tokens.json", "vocab.json", "merges.txt", "normalizer.json",
              "preprocessor_config.json"]

BUILD = textwrap.dedent("""
    import json, os, shutil, sys, pathlib
    out, source = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
    sizes, heads, copied = json.loads(sys.argv[3]), json.loads(sys.argv[4]), json.loads(sys.argv[5])
    import torch, transformers
    from optimum.exporters.onnx import main_export
    torch.set_num_threads(os.cpu_count())
    torch.manual_seed(0)
    config = transformers.WhisperConfig.from_pretrained(source)
    config.update(sizes)
    generation = json.loads((source / "generation_config.json").read_text())
    if heads is not None:
        generation["alignment_heads"] = heads
    model = transformers.WhisperForConditionalGeneration(config).eval()
    model.generation_config = transformers.GenerationConfig.from_dict(generation)
    model.save_pretrained(out)
    for name in copied:
        shutil.copyfile(source / name, out / name)
    (out / "generation_config.json").write_text(json.dumps(generation, indent=2))
    main_export(str(out), output=str(out / "export"), task="automatic-speech-recognition-with-past",
                opset=18, device="cpu", do_validation=False, local_files_only=True)
    (out / "onnx").mkdir(exist_ok=True)
    for stem in ("encoder_model", "decoder_model_merged"):
        for f in (out / "export").glob(stem + ".onnx*"):  # external data, if any
            shutil.move(f, out / "onnx" / f.name)
    shutil.rmtree(out / "export")
""")


def model_folder(name):
    """``CACHE/<name>``: config, torch weights, tokenizer, processor files, onnx/."""
    import json

    if name not in SIZES:
        raise SystemExit(f"unknown model {name!r}; choose from {list(SIZES)}")
    folder = CACHE / name
    if not (folder / "onnx" / "decoder_model_merged.onnx").exists():
        if not (SOURCE / "config.json").exists():
            raise SystemExit(f"{SOURCE} lacks openai/whisper-base's files (config.json, "
                             "tokenizer.json, ...): set TRANSMUTER_HUB_FILES")
        folder.mkdir(parents=True, exist_ok=True)
        print(f"building {name} into {folder} (once) ...", flush=True)
        sizes, heads = SIZES[name]
        with open(folder / "build.log", "w") as log:  # the exporter's warnings
            done = subprocess.run([EXPORT_PYTHON, "-c", BUILD, str(folder), str(SOURCE),
                                   json.dumps(sizes), json.dumps(heads), json.dumps(HUB_COPIED)],
                                  stdout=log, stderr=subprocess.STDOUT)
        if done.returncode:
            raise SystemExit(f"building {name} failed:\n"
                             + (folder / "build.log").read_text()[-3000:])
    return folder


def offsets(n):
    """Start samples of ``n`` 60 s recordings, spread over the recording's spare seconds."""
    spare = recording_samples() - SECONDS * RATE
    return [int(round(i * spare / n)) for i in range(n)]


def recording_samples():
    import soundfile

    return soundfile.info(str(SPEECH)).frames


def recordings(n):
    """``n`` float32 arrays of 60 s at 16 kHz (slices of long.flac, see the docstring)."""
    import soundfile

    samples, rate = soundfile.read(str(SPEECH), dtype="float32", always_2d=False)
    assert rate == RATE, rate
    return [np.ascontiguousarray(samples[a:a + SECONDS * RATE]) for a in offsets(n)]
