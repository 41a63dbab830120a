"""The SmolVLM-sized model of bench/vlm.py, built once into $TRANSMUTER_BENCH_CACHE (default
~/.cache/transmuter-bench)/vlm/smolvlm-256m/.

HuggingFaceTB/SmolVLM-256M-Instruct's config.json as the Hub has it (SigLIP vision tower 768 wide,
12 layers, 512-pixel tiles of 16-pixel patches; pixel-shuffle connector with scale factor 4, so 64
tokens per tile; a Llama text model 576 wide, 30 layers, 9 heads over 3 KV heads, vocab 49280)
with random weights (torch seed 0, transformers' init), so the texts are garbage; the shapes and
therefore the cost are the real ones. The tokenizer, chat template and processor files are the
repo's real ones, read from $TRANSMUTER_HUB_FILES (default /work/shared/hub-files); the Hub itself
is never asked. The export environment ($TRANSMUTER_EXPORT_PYTHON: transformers 4.57.6, torch
CPU) exports it with tests/support/families_idefics3.py's ``export`` (torch.onnx, transformers.js'
three graphs: vision_encoder, embed_tokens, decoder_model_merged), its shape constants set to the
real model's.
"""

import os
import pathlib
import subprocess
import textwrap

EXPORT_PYTHON = os.environ.get("TRANSMUTER_EXPORT_PYTHON",
                               str(pathlib.Path.home() / ".cache/transmuter-tests/venv-export/bin/python"))
CACHE = pathlib.Path(os.environ.get("TRANSMUTER_BENCH_CACHE",
                                    pathlib.Path.home() / ".cache" / "transmuter-bench")) / "vlm"
HUB_FILES = pathlib.Path(os.environ.get("TRANSMUTER_HUB_FILES", "/work/shared/hub-files"))
SOURCE = HUB_FILES / "HuggingFaceTB" / "SmolVLM-256M-Instruct"
SUPPORT = pathlib.Path(__file__).resolve().parents[1] / "tests" / "support"
# what the Hub repo holds besides config.json and the weights
HUB_COPIED = ["tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
              "added_tokens.json", "vocab.json", "merges.txt", "chat_template.json",
              "preprocessor_config.json", "processor_config.json", "generation_config.json"]

BUILD = textwrap.dedent("""
    import json, os, shutil, sys, pathlib
    out, source, support = (pathlib.Path(a) for a in sys.argv[1:4])
    sys.path.insert(0, str(support))
    import torch, transformers
    import families_idefics3 as fi
    torch.set_num_threads(os.cpu_count())
    torch.manual_seed(0)
    config = transformers.Idefics3Config.from_pretrained(source)
    config._attn_implementation = "eager"
    config.vision_config._attn_implementation = config.text_config._attn_implementation = "eager"
    model = transformers.Idefics3ForConditionalGeneration(config).float().eval()  # config says bf16
    text, vision = config.text_config, config.vision_config
    fi.TILE, fi.PATCH = vision.image_size, vision.patch_size
    fi.LAYERS, fi.KV_HEADS = text.num_hidden_layers, text.num_key_value_heads
    fi.HEAD_DIM = getattr(text, "head_dim", None) or text.hidden_size // text.num_attention_heads
    config.save_pretrained(out)
    for name in json.loads(sys.argv[4]):
        shutil.copyfile(source / name, out / name)
    with torch.no_grad():
        fi.export(model, out / "onnx")
""")


def model_folder(name="smolvlm-256m"):
    """``CACHE/<name>``: config, tokenizer, processor files, onnx/ (three graphs)."""
    import json

    folder = CACHE / name
    if not (folder / "onnx" / "decoder_model_merged.onnx").exists():
        if not (SOURCE / "config.json").exists():
            raise SystemExit(f"{SOURCE} lacks SmolVLM-256M-Instruct's files (config.json, "
                             "tokenizer.json, ...): set TRANSMUTER_HUB_FILES")
        folder.mkdir(parents=True, exist_ok=True)
        print(f"building {name} into {folder} (once, a few minutes) ...", flush=True)
        with open(folder / "build.log", "w") as log:  # the exporter's warnings
            done = subprocess.run([EXPORT_PYTHON, "-c", BUILD, str(folder), str(SOURCE),
                                   str(SUPPORT), json.dumps(HUB_COPIED)],
                                  stdout=log, stderr=subprocess.STDOUT)
        if done.returncode:
            raise SystemExit(f"building {name} failed:\n"
                             + (folder / "build.log").read_text()[-3000:])
    return folder
