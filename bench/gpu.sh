#!/usr/bin/env bash
# Transmuter on a GPU against onnxruntime-gpu: text-embedding, image-classification, Whisper's
# encoder and a decoder's q4 / fp16 decode step, in one short run (bench/gpu.py says how each is
# timed). Run from a clone, on a machine with an NVIDIA GPU and the project installed:
#     bash bench/gpu.sh [bench/gpu.py options]
# It sets up what is missing: JAX's CUDA plugin, the real all-MiniLM-L6-v2 export, and the
# environment whose onnxruntime-genai builder makes the decoder files. It does not swap your
# onnxruntime for onnxruntime-gpu (the two packages share one import name); without it the
# onnxruntime column stays empty.
set -euo pipefail
cd "$(dirname "$0")/.."
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader \
    || { echo "bench/gpu.sh: nvidia-smi finds no GPU" >&2; exit 1; }
python -c "import jax, sys; sys.exit(jax.devices()[0].platform != 'gpu')" 2>/dev/null \
    || python -m pip install --quiet -U "jax[cuda12]"
python -c "import onnxruntime as o, sys; sys.exit('CUDAExecutionProvider' not in
o.get_available_providers())" || echo "onnxruntime has no CUDA provider: for its column," \
    "pip uninstall -y onnxruntime && pip install onnxruntime-gpu"
# The decoder files: onnxruntime-genai's builder, with transformers 5 and torch (CPU is enough).
GENAI=${TRANSMUTER_GENAI_PYTHON:-$HOME/.venvs/transmuter-genai/bin/python}
if [ ! -x "$GENAI" ]; then
    python -m venv "$(dirname "$(dirname "$GENAI")")"
    "$GENAI" -m pip install --quiet torch==2.13.0 --extra-index-url https://download.pytorch.org/whl/cpu
    "$GENAI" -m pip install --quiet "transformers>=5" onnxruntime-genai onnx onnx-ir
fi
export TRANSMUTER_GENAI_PYTHON=$GENAI
bash tests/support/setup_real_models.sh      # all-MiniLM-L6-v2 fp32 and the export environment
# onnxruntime and JAX share the GPU in this process: JAX takes memory as it needs it (docs/gpu.md)
export XLA_PYTHON_CLIENT_PREALLOCATE=false
python bench/gpu.py "$@"
