"""The loading options of transformers and transformers.js under their own names, translated to
``pipeline()``'s: each peer name is an accepted alias of one documented name here.

    dtype="q4" | {"encoder_model": "fp32", ...} | "auto"   -> variant=   (transformers.js dtype)
    torch_dtype=                                           -> the same (transformers' old name)
    device="cpu" | "gpu" | "cuda[:i]" | i | jax.Device    -> devices=  (one device, JAX)
    device="mps"                                           -> backend="mlx" (Apple silicon)
    device_map="auto" | "cuda" | ...                       -> as device= (one device)
    model_kwargs={...}                                     -> the loading options it holds

``model_file_name`` and ``subfolder`` (transformers.js) and ``revision``, ``token`` keep their
names: ``pipeline()`` takes them as they are.
"""

from ..errors import PipelineError
from ..hub.variants import normalize_dtype

# transformers' torch dtypes read as the ONNX file of that precision (dtype=torch.float16 loads
# the half-precision export, as from_pretrained(dtype=torch.float16) loads half weights)
_TORCH_DTYPES = {"float32": "fp32", "float16": "fp16", "half": "fp16", "float": "fp32"}
# transformers.js devices that are onnxruntime-web's execution providers, not a place JAX or MLX
# can run: refused with what to give instead
_BROWSER_DEVICES = {"webgpu", "wasm", "webnn", "webnn-npu", "webnn-gpu", "webnn-cpu", "dml"}
# what model_kwargs may hold: pipeline()'s loading options and their peer names (transformers'
# pipeline passes model_kwargs to from_pretrained, i.e. to loading)
LOADING = ("variant", "dtype", "torch_dtype", "device_map", "backend", "compute_type", "devices",
           "device", "revision", "cache_dir", "local_files_only", "token", "checks",
           "compile_cache", "compile_ahead", "trainable", "subfolder", "model_file_name")


def translate(options):
    """``options`` (pipeline()'s keywords, peer names included) with each peer name replaced by
    ours; a thing given under both names is refused, as is a peer value with no equal here."""
    options = dict(options)
    kwargs = options.pop("model_kwargs", None)
    if kwargs is not None:
        if not isinstance(kwargs, dict):
            raise PipelineError(f"model_kwargs must be a dict of loading options, got "
                                f"{kwargs!r:.80}")
        unknown = sorted(set(kwargs) - set(LOADING))
        if unknown:
            raise PipelineError(f"model_kwargs holds {unknown}, which are no loading options here; "
                                f"it takes: {', '.join(LOADING)}")
        _merge(options, kwargs, "model_kwargs")
    for name in ("dtype", "torch_dtype"):
        if name in options:
            _merge(options, {"variant": variant_of(options.pop(name))}, name, "variant")
    if "device_map" in options:
        device_map = options.pop("device_map")
        if isinstance(device_map, dict):
            raise PipelineError("device_map as a dict places modules on devices (accelerate); "
                                "Transmuter places the whole graph on one device (device=) or "
                                "splits each batch over several (devices=)")
        if options.get("device") is not None and device_map is not None:
            raise PipelineError("Give device= or device_map=, not both (transformers refuses "
                                "both too)")
        options["device"] = device_map
    if "device" in options:
        backend, devices = placement_of(options.pop("device"), options.get("backend"))
        found = {"backend": backend} if backend else {}
        if devices is not None:
            found["devices"] = devices
        _merge(options, found, "device", "backend/devices")
    return options


def _merge(options, found, source, ours=None):
    for key, value in found.items():
        if options.get(key) is not None and options[key] != value:
            raise PipelineError(f"{key}= and {source} both give it ({options[key]!r:.60} and "
                                f"{value!r:.60}); give {ours or key}= once")
        options[key] = value


def variant_of(dtype):
    """transformers.js' ``dtype`` as ``variant``: "auto" (the repo's config.json, else the
    default) is None; a dict per component keeps its other components' "auto" out."""
    if isinstance(dtype, dict):
        chosen = {k: variant_of(v) for k, v in dtype.items()}
        return {k: v for k, v in chosen.items() if v is not None} or None
    if dtype is None or dtype == "auto":
        return None
    name = str(dtype).removeprefix("torch.")
    if name in ("bfloat16", "bf16"):
        raise PipelineError(f"dtype={dtype!r}: no ONNX export holds bfloat16 weights; "
                            "compute_type='bf16' runs a float32 export in bfloat16")
    return normalize_dtype(_TORCH_DTYPES.get(name, name))


def placement_of(device, backend=None):
    """(backend, devices) for transformers' and transformers.js' ``device``: "cpu", "gpu" /
    "cuda" / "cuda:1" / "tpu" (JAX's devices of that platform), an int (transformers: the
    accelerator's index, -1 the CPU; here jax.devices()[i]), a jax.Device, a torch.device (by
    its name), "mps" (Apple silicon: MLX), "auto" (JAX's default device)."""
    if type(device).__module__.startswith("torch"):
        device = str(device)  # torch.device("cuda:0") -> "cuda:0"
    if device is None or device == "auto":
        return None, None
    if device == "mps":
        if backend not in (None, "mlx"):
            raise PipelineError(f"device='mps' runs on MLX (Apple silicon), but backend="
                                f"{backend!r} was given: give one of them")
        return "mlx", None
    if backend not in (None, "jax"):
        raise PipelineError(f"device={device!r} places the model with JAX; backend={backend!r} "
                            "runs on its own default device: leave device= out")
    import jax

    if not isinstance(device, (str, int)) or isinstance(device, bool):
        if isinstance(device, jax.Device):
            return "jax", [device]
        raise PipelineError(f"device must be 'cpu', 'gpu'/'cuda', 'cuda:<i>', 'tpu', 'mps', an "
                            f"int or a jax.Device, got {type(device).__name__}: {device!r:.60}")
    if isinstance(device, int):
        platform, index = (None, device) if device >= 0 else ("cpu", 0)
    else:
        if device in _BROWSER_DEVICES:
            raise PipelineError(f"device={device!r} is an onnxruntime-web backend of transformers"
                                ".js; Transmuter runs on JAX ('cpu', 'gpu'/'cuda', 'tpu') or MLX "
                                "('mps')")
        platform, _, index = device.partition(":")
        platform = {"cuda": "gpu", "rocm": "gpu"}.get(platform, platform)
        if platform not in ("cpu", "gpu", "tpu") or (index and not index.isdigit()):
            raise PipelineError(f"Unknown device {device!r}: use 'cpu', 'gpu'/'cuda', "
                                "'cuda:<i>', 'tpu', 'mps' (MLX), an int or a jax.Device")
        index = int(index or 0)
    return "jax", [_jax_device(jax, platform, index, device)]


def _jax_device(jax, platform, index, asked):
    try:
        found = jax.devices(platform) if platform else jax.devices()
    except RuntimeError:
        found = []
    if index >= len(found):
        hint = " (install JAX for the GPU: pip install -U 'jax[cuda12]')" if platform == "gpu" \
            else ""
        raise PipelineError(f"device={asked!r}: JAX sees {len(found)} {platform or 'default'} "
                            f"device(s) ({', '.join(map(str, found)) or 'none'}); it has "
                            f"{jax.devices()}{hint}")
    return found[index]
