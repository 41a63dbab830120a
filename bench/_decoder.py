"""The benchmark decoders shared by bench/quantized.py, bench/generation.py and
bench/decode_step.py, by shape (``--shape``):

- ``toy``: a random LlamaConfig (12 layers, hidden 512, 8 heads / 4 KV heads, MLP 1408, vocab
  16384, untied);
- ``smollm2``: SmolLM2-135M's shape (30 layers, hidden 576, MLP 1536, 9 heads / 3 KV heads,
  head_dim 64, vocab 49152, tied embeddings: the builder's q4 file then shares one 4-bit matrix
  between the GatherBlockQuantized embedding and the MatMulNBits lm_head);
- ``qwen3``: Qwen3-0.6B's shape (28 layers, hidden 1024, MLP 3072, 16 heads / 8 KV heads,
  head_dim 128, vocab 151936, tied, q/k RMS norms),

random weights, built by onnxruntime-genai's model builder (fp32 and int4, CPU) in the genai
environment ($TRANSMUTER_GENAI_PYTHON, default /work/venvs/genai/bin/python: onnxruntime-genai
0.18, transformers 5, torch 2.13 CPU, no network), into $TRANSMUTER_BENCH_CACHE (default
~/.cache/transmuter-bench), once. The PyTorch model the files were built from stays beside them
(hf/), for the transformers peer."""

import json
import os
import pathlib
import subprocess
import textwrap

import numpy as np
import onnx
import onnxruntime as ort

_COMMON = dict(hidden_act="silu", bos_token_id=1, eos_token_id=2, pad_token_id=0)
SHAPES = {
    "toy": dict(arch="LlamaForCausalLM", layers=12, config=dict(
        hidden_size=512, num_attention_heads=8, num_key_value_heads=4, head_dim=64,
        intermediate_size=1408, vocab_size=16384, max_position_embeddings=2048,
        rms_norm_eps=1e-6, tie_word_embeddings=False, **_COMMON)),
    "smollm2": dict(arch="LlamaForCausalLM", layers=30, config=dict(  # SmolLM2-135M
        hidden_size=576, num_attention_heads=9, num_key_value_heads=3, head_dim=64,
        intermediate_size=1536, vocab_size=49152, max_position_embeddings=8192,
        rms_norm_eps=1e-5, rope_theta=100000.0, tie_word_embeddings=True, **_COMMON)),
    "qwen3": dict(arch="Qwen3ForCausalLM", layers=28, config=dict(  # Qwen3-0.6B
        hidden_size=1024, num_attention_heads=16, num_key_value_heads=8, head_dim=128,
        intermediate_size=3072, vocab_size=151936, max_position_embeddings=40960,
        rms_norm_eps=1e-6, rope_theta=1000000.0, tie_word_embeddings=True, **_COMMON)),
}
CONFIG = SHAPES["toy"]["config"]  # the default shape's config, for callers without --shape
GENAI_PYTHON = os.environ.get("TRANSMUTER_GENAI_PYTHON", "/work/venvs/genai/bin/python")

BUILD = textwrap.dedent("""
    import json, shutil, subprocess, sys, pathlib
    import torch, transformers
    out, layers, fixture = pathlib.Path(sys.argv[1]), int(sys.argv[2]), pathlib.Path(sys.argv[3])
    arch = sys.argv[5]
    hf = out / "hf"
    config_class = getattr(transformers, arch.replace("ForCausalLM", "Config"))
    cfg = config_class(num_hidden_layers=layers, **json.loads(sys.argv[4]))
    cfg.architectures = [arch]
    torch.manual_seed(0)
    if not (hf / "config.json").exists():  # a later call adds precisions to the same model
        model = getattr(transformers, arch)(cfg).eval()
        model.save_pretrained(hf)
    for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        shutil.copy(fixture / name, hf / name)  # the builder copies a tokenizer along
    for precision in sys.argv[6].split(","):
        # fp16 as the builder makes it for GPUs (the Hub's "gpu" folders); the rest for CPUs
        provider = "cuda" if precision == "fp16" else "cpu"
        subprocess.run([sys.executable, "-m", "onnxruntime_genai.models.builder", "-i", str(hf),
                        "-o", str(out / precision), "-p", precision, "-e", provider,
                        "-c", str(out / "cache")], check=True, stdout=subprocess.DEVNULL)
    shutil.rmtree(out / "cache", ignore_errors=True)  # the builder's copy of hf/
""")


def shape_config(shape="toy"):
    """The transformers config (a dict) of a bench shape."""
    return SHAPES[shape]["config"]


def shape_layers(shape="toy", layers=None):
    return layers or SHAPES[shape]["layers"]


def build(folder, layers, shape, precisions):
    fixture = pathlib.Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "llama-gqa"
    folder.mkdir(parents=True, exist_ok=True)
    print(f"building the {shape} model ({', '.join(precisions)}) into {folder} (once) ...",
          flush=True)
    subprocess.run([GENAI_PYTHON, "-c", BUILD, str(folder), str(layers), str(fixture),
                    json.dumps(shape_config(shape)), SHAPES[shape]["arch"],
                    ",".join(precisions)], check=True)


def model_folder(layers=None, shape="toy", precisions=("fp32", "int4")):
    """The folder holding hf/ and <precision>/model.onnx for each of ``precisions`` (built on
    first use, each from the same random model); ``layers`` defaults to the shape's own count."""
    layers = shape_layers(shape, layers)
    cache = pathlib.Path(os.environ.get("TRANSMUTER_BENCH_CACHE",
                                        pathlib.Path.home() / ".cache" / "transmuter-bench"))
    hidden = shape_config(shape)["hidden_size"]
    name = f"llama-gqa-{layers}x{hidden}" if shape == "toy" else f"{shape}-{layers}x{hidden}"
    folder = cache / name
    missing = [p for p in precisions if not (folder / p / "model.onnx").exists()]
    if missing:
        build(folder, layers, shape, missing)
    return folder


def level0_file(folder):
    """``folder``/int4-level0/model.onnx: the int4 file with its MatMulNBits nodes at
    accuracy_level 0, as the Hub's q4 files are (onnxruntime's MatMulNBitsQuantizer, which
    transformers.js' conversion runs, writes no level; onnxruntime-genai's builder writes 4).
    Made from the int4 file on first use."""
    path = folder / "int4-level0" / "model.onnx"
    if not path.exists():
        model = onnx.load(str(folder / "int4" / "model.onnx"))
        for node in model.graph.node:
            if node.op_type == "MatMulNBits":
                kept = [a for a in node.attribute if a.name != "accuracy_level"]
                del node.attribute[:]
                node.attribute.extend(kept)
        path.parent.mkdir(exist_ok=True)
        onnx.save(model, str(path), save_as_external_data=True, location="model.onnx.data")
    return path


def model_path(layers=None, shape="toy"):
    folder = model_folder(layers, shape)
    return {p: folder / p / "model.onnx" for p in ("fp32", "int4")}


def kv_names(layers):
    return [f"past_key_values.{i}.{kv}" for i in range(layers) for kv in ("key", "value")]


def ort_step(path):
    """``step(feeds) -> (logits, presents as past_key_values.* feeds)`` on onnxruntime,
    ORT_ENABLE_ALL, as many intra-op threads as cores."""
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.intra_op_num_threads = os.cpu_count()
    session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]

    def step(feeds):
        out = dict(zip(names, session.run(None, feeds)))
        return out["logits"], {k.replace("present.", "past_key_values."): v
                               for k, v in out.items() if k.startswith("present.")}

    return step


def file_mb(path):
    return sum(p.stat().st_size for p in path.parent.glob(path.name + "*")) / 1e6


def weight_bytes(model):
    """Bytes of the model's weights as they sit in memory: device params plus host constants
    (packed int4 weights count at their packed size)."""
    return sum(int(np.prod(v.shape)) * np.dtype(str(v.dtype).split(".")[-1]).itemsize
               for v in model.params.values()) + sum(
        np.asarray(v).nbytes for v in model.constants.values() if hasattr(v, "nbytes"))


def weight_breakdown(model):
    """MB of weights by kind: packed integers (uint8/int8: 4-bit weights, zero points), floats."""
    kinds = {"packed": 0, "float": 0}
    for v in list(model.params.values()) + [v for v in model.constants.values()
                                            if hasattr(v, "nbytes")]:
        dtype = np.dtype(str(v.dtype).split(".")[-1])
        kinds["float" if dtype.kind == "f" else "packed"] += int(np.prod(v.shape)) * dtype.itemsize
    return {k: b / 1e6 for k, b in kinds.items()}
