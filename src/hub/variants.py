"""Which ONNX file of a repo to load: transformers.js' dtype suffixes and variant rules
(packages/transformers/src/models/session.js `getSession`, src/utils/dtypes.js,
src/utils/model-loader.js `getModelDataFiles`), and the external data files a graph needs."""

import logging
import posixpath
import re
from dataclasses import dataclass

from ..engine.io.onnx_file import join_path
from ..errors import HubError

log = logging.getLogger("transmuter.hub")

# transformers.js src/utils/dtypes.js DEFAULT_DTYPE_SUFFIX_MAPPING: dtype -> file-name suffix.
DTYPE_SUFFIXES = {"fp32": "", "fp16": "_fp16", "int8": "_int8", "uint8": "_uint8",
                  "q8": "_quantized", "q4": "_q4", "q4f16": "_q4f16", "bnb4": "_bnb4"}
DTYPE_ALIASES = {"quantized": "q8"}
# Our order when nobody names a variant: full precision, half, 8-bit, then 4-bit.
FALLBACK_ORDER = ("fp32", "fp16", "q8", "int8", "uint8", "q4", "q4f16", "bnb4")
# transformers.js src/utils/hub.js MAX_EXTERNAL_DATA_CHUNKS.
MAX_EXTERNAL_DATA_CHUNKS = 100
# An .onnx file up to this size is read to find the external data files it references.


@dataclass(frozen=True)
class Variant:
    """One ONNX file chosen for a component: its dtype, path in the repo, and KV-cache dtype."""
    component: str
    dtype: str
    path: str
    kv_cache_dtype: str | None = None


# --- variant rules (pure functions over a file listing) -------------------------------------------

def normalize_dtype(name) -> str:
    dtype = DTYPE_ALIASES.get(name, name)
    if dtype not in DTYPE_SUFFIXES:
        raise HubError(f"Unknown variant {name!r}; use one of: {', '.join(DTYPE_SUFFIXES)}, "
                       "quantized (= q8), or a dict of them per component")
    return dtype


def kv_cache_dtype(js_config: dict, dtype: str) -> str | None:
    """session.js: a string applies to every dtype; a dict maps dtype -> "float16"/"float32",
    "float32" when absent; None when unset."""
    value = (js_config or {}).get("kv_cache_dtype")
    if not value:
        return None
    return value if isinstance(value, str) else value.get(dtype, "float32")


def choose_variant(files, component="model", *, variant=None, config=None, task_default=None,
                   subfolder="onnx", name="the repo") -> Variant:
    """The ONNX file of ``component`` among ``files``: ``variant`` (a dtype, or a dict per
    component; its file must exist), else the first present of config.json's
    ``transformers.js_config.dtype`` (a string or a dict per component, as session.js reads it),
    ``task_default`` and FALLBACK_ORDER. Files are ``<subfolder>/<component><suffix>.onnx``."""
    files = set(files)
    js_config = (config or {}).get("transformers.js_config") or {}
    folder = _component_folder(files, component, subfolder)

    def pick(dtype):
        return Variant(component, dtype, join_path(folder, f"{component}{DTYPE_SUFFIXES[dtype]}.onnx"),
                       kv_cache_dtype(js_config, dtype))

    explicit = _for_component(variant, component)
    # "auto" (transformers.js): as if none were named
    if explicit is not None and explicit != "auto":
        chosen = pick(normalize_dtype(explicit))
        if chosen.path not in files:
            raise missing_file_error(name, chosen.path, files)
        return chosen
    configured = _for_component(js_config.get("dtype"), component)
    for dtype in (configured, task_default, *FALLBACK_ORDER):
        if dtype is None or dtype == "auto":
            continue
        chosen = pick(normalize_dtype(dtype))
        if chosen.path in files:
            return chosen
        if dtype == configured:
            log.warning("%s: config.json asks for %s, which is missing; trying others",
                        name, chosen.path)
    raise missing_file_error(name, pick("fp32").path, files)


def external_data_files(files, onnx_path, use_external_data_format=None) -> list[str]:
    """External data of ``onnx_path``: the chunks ``<file>_data``, ``<file>_data_1``, ... that
    ``use_external_data_format`` (bool, count, or dict by file or base name) requires, as
    model-loader.js does, plus any ``<file>_data[_N]`` / ``<file>.data[_N]`` (genai) present."""
    files = set(files)
    folder, file_name = posixpath.split(onnx_path)
    count = _chunk_count(use_external_data_format, file_name)
    if count > MAX_EXTERNAL_DATA_CHUNKS:
        raise HubError(f"use_external_data_format asks for {count} chunks of {onnx_path}; "
                       f"at most {MAX_EXTERNAL_DATA_CHUNKS} are allowed")
    required = [join_path(folder, f"{file_name}_data" + (f"_{i}" if i else "")) for i in range(count)]
    for path in required:
        if path not in files:
            raise HubError(f"{onnx_path} needs external data {path} "
                           "(transformers.js_config.use_external_data_format), which is missing")
    pattern = re.compile(re.escape(file_name) + r"(_data|\.data)(_\d+)?")
    found = [f for f in files
             if posixpath.dirname(f) == folder and pattern.fullmatch(posixpath.basename(f))]
    return sorted(set(required) | set(found))


def missing_file_error(name, path, files) -> HubError:
    onnx = sorted(f for f in files if f.endswith(".onnx"))
    has = ("its ONNX files are:\n" + "\n".join(f"  - {f}" for f in onnx)) if onnx else \
        "it has no ONNX files at all"
    return HubError(f"{name} has no file {path!r}; {has}\n"
                    "Choose one: pipeline(..., variant=...) (transformers.js' dtype=) picks "
                    "the precision ('fp32', 'fp16', 'q8', 'q4', ...), model_file_name=... (and "
                    "subfolder=...) another graph name; transmuter.load(repo, file=...) takes a "
                    "path in the repo")


def _for_component(value, component):
    return value.get(component) if isinstance(value, dict) else value


def _component_folder(files, component, subfolder):
    def has_any(folder):
        return any(join_path(folder, f"{component}{s}.onnx") in files for s in DTYPE_SUFFIXES.values())
    if subfolder and not has_any(subfolder) and has_any(""):
        return ""  # older repos keep model.onnx at the root
    return subfolder or ""


def _chunk_count(config, file_name) -> int:
    # model-loader.js resolveExternalDataFormat: a dict by file name, then by base name
    # ("model" for model_q4.onnx); true -> 1 chunk, false -> 0.
    if isinstance(config, dict):
        base = re.sub(r"(_(fp16|u?int8|quantized|q4|q4f16|bnb4))?\.onnx$", "", file_name)
        config = config.get(file_name, config.get(base, False))
    return int(config or 0)
