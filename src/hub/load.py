"""``transmuter.load``: a model from a path, bytes, a ModelProto, or a repo (a Hub id or a local
folder, resolved by repo.py with its variant chosen by variants.py)."""

import os

from ..engine.io.onnx_file import read_onnx
from ..engine.model import Model, read_proto
from ..errors import ModelLoadError
from .repo import is_repo_source, resolve


def load(source, file=None, *, backend="jax", compute_type=None, trainable=False, revision=None,
         cache_dir=None, local_files_only=False, token=None, variant=None, checks=True,
         compile_cache=None, devices=None, compile_ahead=None) -> Model:
    """Load an ONNX model.

    ``source`` is a path to an .onnx file, its bytes, an ``onnx.ModelProto``, or a repo: a Hub id
    ("org/name", downloaded through huggingface_hub at ``revision`` into its cache or ``cache_dir``,
    with ``token`` and ``local_files_only``) or a local folder. For a repo, ``file`` is the path
    inside it (e.g. "onnx/model_fp16.onnx"); without it, ``onnx/model*.onnx`` is chosen by
    ``variant`` ("fp32", "fp16", "q8", "q4", ...), else config.json's ``transformers.js_config``,
    else fp32, then the other variants the repo has. External data files come along.

    ``checks=True`` (the default) refuses out-of-range indices in the inputs of each call: an
    ``input_ids`` past the embedding table (or any input that reaches a Gather, GatherElements,
    GatherND or ScatterND index) is an InputError naming the input, the value and the valid range,
    where the compiled gather would read NaN or garbage. ``checks=False`` skips that min/max per
    index input (a few microseconds a call) when the inputs are known to be in range.

    ``trainable`` (fine-tuning): True makes every float32/float64 weight a gradient reaches a
    parameter (``model.trainable_params``, a dict by initializer name, small ones too; scalars
    stay constants); a list of names or a predicate ``name -> bool`` chooses some and freezes
    the rest. Integer, quantized and half weights are refused: fine-tune the fp32 export.
    ``model.apply(params, **inputs)`` is the function to differentiate; ``transmuter.save``
    writes the trained weights back into the ONNX file.

    ``compute_type``: None computes in the graph's own types; "f32" runs a half-precision
    graph in float32 (as onnxruntime does on CPU); "bf16" runs a float32 graph in bfloat16 with
    its weights kept float32 (mixed precision: each weight is read through a cast, so gradients
    and saved weights stay float32; for accelerators with bfloat16 units: on CPU it gains nothing).

    ``compile_cache`` (JAX): where compiled shapes are kept for the next process. None (the
    default) reads TRANSMUTER_COMPILE_CACHE, else ``~/.cache/transmuter/jax``; a folder puts
    them there; False writes none (docs/compile-cache.md).

    ``compile_ahead``: whether the shapes a pipeline or a generation will certainly run next
    compile in a background thread while the current call runs. None (the default) reads
    TRANSMUTER_COMPILE_AHEAD (on unless ``0``); False turns it off (docs/compile-cache.md).

    ``devices`` (JAX): a list of jax devices (``jax.devices()``) or a ``jax.sharding.Mesh``:
    the weights are replicated on each, and every call splits its inputs' batch axis over them
    (engine/sharding.py, docs/scaling.md); one device, or None, is the usual single-device path.
    """
    origin, external = None, {}  # for save_pretrained and the weight table
    if is_repo_source(source):
        repo = resolve(source, revision=revision, cache_dir=cache_dir,
                           local_files_only=local_files_only, token=token)
        file = file or repo.choose("model", variant=variant).path
        origin = (repo, file)
        # external data may sit behind the cache's symlinks
        source = read_onnx(repo.fetch_onnx(file), external)
    elif file is not None:
        raise ModelLoadError(f"file={file!r} applies only when source is a Hub id or a folder")
    elif isinstance(source, (str, os.PathLike)):
        origin = (None, os.fspath(source))
    return Model(read_proto(source, external), backend=backend, compute_type=compute_type,
                 trainable=trainable, checks=checks, compile_cache=compile_cache,
                 compile_ahead=compile_ahead,
                 external=external, origin=origin, devices=devices)


def load_beside(model, repo, file):
    """Another graph of ``model``'s repo (an encoder, a text half, a vocoder) on the same backend,
    compute type, ``checks``, ``compile_cache`` and devices: a pipeline's side models take the
    options of its main one."""
    return load(repo, file, backend=model.backend.name, compute_type=model.compute_type,
                checks=model.checks, compile_cache=model.compile_cache,
                compile_ahead=model.compile_ahead,
                devices=None if model.placement is None else model.placement.mesh)
