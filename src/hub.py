"""Hub repos and local folders: resolve, list files, fetch what a model needs, choose variants.

    repo = hub.resolve("Xenova/all-MiniLM-L6-v2")   # or a folder; revision=, token=, cache_dir=
    path = repo.onnx_file("decoder_model_merged", task_default="q4")  # + its external data

Downloads go file by file through huggingface_hub (its cache, HF_HOME, HF_ENDPOINT,
HF_HUB_OFFLINE), so only the chosen variant is fetched. Variant rules follow transformers.js
(packages/transformers/src/models/session.js `getSession`, src/utils/dtypes.js,
src/utils/model-loader.js `getModelDataFiles`).
"""

import json
import logging
import os
import posixpath
import re
from dataclasses import dataclass

from .errors import HubError

log = logging.getLogger(__name__)

# transformers.js src/utils/dtypes.js DEFAULT_DTYPE_SUFFIX_MAPPING: dtype -> file-name suffix.
DTYPE_SUFFIXES = {"fp32": "", "fp16": "_fp16", "int8": "_int8", "uint8": "_uint8",
                  "q8": "_quantized", "q4": "_q4", "q4f16": "_q4f16", "bnb4": "_bnb4"}
DTYPE_ALIASES = {"quantized": "q8"}
# Our order when nobody names a variant: full precision, half, 8-bit, then 4-bit.
FALLBACK_ORDER = ("fp32", "fp16", "q8", "int8", "uint8", "q4", "q4f16", "bnb4")
# transformers.js src/utils/hub.js MAX_EXTERNAL_DATA_CHUNKS.
MAX_EXTERNAL_DATA_CHUNKS = 100
# An .onnx file up to this size is read to find the external data files it references.
SCAN_LIMIT = 64 << 20
_COMMIT = re.compile(r"[0-9a-f]{40}")
_REPO_ID = re.compile(r"[\w.-]+/[\w.-]+")


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
        return Variant(component, dtype, _join(folder, f"{component}{DTYPE_SUFFIXES[dtype]}.onnx"),
                       kv_cache_dtype(js_config, dtype))

    explicit = _for_component(variant, component)
    if explicit is not None:
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
    required = [_join(folder, f"{file_name}_data" + (f"_{i}" if i else "")) for i in range(count)]
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
                    "Pass one of them as file=..., or choose an available variant=...")


def _for_component(value, component):
    return value.get(component) if isinstance(value, dict) else value


def _component_folder(files, component, subfolder):
    def has_any(folder):
        return any(_join(folder, f"{component}{s}.onnx") in files for s in DTYPE_SUFFIXES.values())
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


def _join(folder, name):
    return f"{folder}/{name}" if folder else name


# --- repos ---------------------------------------------------------------------------------------

class Repo:
    """The files of a model repo. Subclasses set ``name``, ``_files`` and give ``_fetch(path)``."""

    name, label = "repo", "repo"  # label: the name as errors show it
    _scan_onnx = False  # read small .onnx files to fetch the external data they reference

    def files(self) -> list[str]:
        return self._files

    def has(self, path) -> bool:
        return path in self.files()

    def onnx_files(self) -> list[str]:
        return [f for f in self.files() if f.endswith(".onnx")]

    def file(self, path) -> str:
        """Local path of ``path`` (fetched if needed); HubError listing the ONNX files if absent."""
        if not self.has(path):
            raise missing_file_error(self.label, path, self.files())
        return self._fetch(path)

    def json(self, name, default=None):
        """Parsed JSON file ``name``, or ``default`` when the repo lacks it."""
        if not self.has(name):
            return default
        try:
            with open(self.file(name), encoding="utf-8") as f:
                return json.load(f)
        except (OSError, ValueError) as e:
            raise HubError(f"{self.name}: cannot read {name} ({e})") from e

    def config(self) -> dict:
        if getattr(self, "_config", None) is None:
            self._config = self.json("config.json", {})
        return self._config

    def js_config(self) -> dict:
        """The ``transformers.js_config`` block of config.json (dtype, kv_cache_dtype, ...)."""
        return self.config().get("transformers.js_config") or {}

    def choose(self, component="model", variant=None, task_default=None, *, subfolder="onnx"):
        return choose_variant(self.files(), component, variant=variant, config=self.config(),
                              task_default=task_default, subfolder=subfolder, name=self.label)

    def onnx_file(self, component="model", variant=None, task_default=None, *, subfolder="onnx",
                  use_external_data_format=None) -> str:
        """Local path of the chosen ONNX file of ``component``, with its external data fetched."""
        chosen = self.choose(component, variant, task_default, subfolder=subfolder)
        return self.fetch_onnx(chosen.path, use_external_data_format)

    def fetch_onnx(self, path, use_external_data_format=None) -> str:
        """Fetch the ONNX file ``path`` and its external data; return its local path."""
        if use_external_data_format is None:
            use_external_data_format = self.js_config().get("use_external_data_format")
        local = self.file(path)
        extras = external_data_files(self.files(), path, use_external_data_format)
        if self._scan_onnx and os.path.getsize(local) <= SCAN_LIMIT:
            extras += _referenced_files(local, posixpath.dirname(path))
        for extra in extras:
            self.file(extra)
        return local


class LocalRepo(Repo):
    """A folder laid out like a Hub repo (config.json, onnx/*.onnx, ...)."""

    def __init__(self, folder):
        self.folder = os.path.abspath(os.fspath(folder))
        self.name = self.label = f"folder {self.folder!r}"
        self._files = _walk(self.folder)

    def _fetch(self, path):
        return os.path.join(self.folder, *path.split("/"))


def _walk(folder) -> list[str]:
    files = []
    for root, dirs, names in os.walk(folder):
        dirs[:] = [d for d in dirs if not d.startswith(".")]
        rel = os.path.relpath(root, folder).replace(os.sep, "/")
        files += [n if rel == "." else f"{rel}/{n}" for n in names]
    return sorted(files)


def read_onnx(path):
    """``onnx.load`` that reads external data itself, following symlinks: huggingface_hub's
    snapshots link each file to its blob, and onnx refuses external data behind a symlink or a
    hard link. Locations must stay inside the model's folder."""
    model = _load_graph(path)
    folder = os.path.dirname(os.path.abspath(path))
    for tensor, location, info in _external_tensors(model):
        if location.startswith(("../", "/")) or location in ("..", "."):
            raise HubError(f"{path}: tensor {tensor.name!r} points outside the model's folder "
                           f"({info.get('location')!r})")
        try:
            with open(os.path.join(folder, *location.split("/")), "rb") as f:
                f.seek(int(info.get("offset", 0)))
                tensor.raw_data = f.read(int(info["length"]) if "length" in info else -1)
        except OSError as e:
            raise HubError(f"{path}: cannot read external data of {tensor.name!r}: {e}") from e
        tensor.data_location = tensor.DEFAULT
        del tensor.external_data[:]
    return model


def _referenced_files(local_path, folder) -> list[str]:
    """Repo paths of the external-data files an ONNX file references."""
    try:
        model = _load_graph(local_path)
    except HubError:
        return []  # let the model loader report it
    return sorted({posixpath.normpath(_join(folder, location))
                   for _, location, _ in _external_tensors(model)})


def _load_graph(path):
    import onnx
    try:
        return onnx.load(path, load_external_data=False)
    except Exception as e:
        raise HubError(f"Cannot read ONNX model {path!r}: {e}") from e


def _external_tensors(model):
    """(tensor, normalized location, external_data dict) of each tensor stored outside."""
    for tensor in _all_tensors(model.graph):
        if tensor.data_location == tensor.EXTERNAL:
            info = {e.key: e.value for e in tensor.external_data}
            yield tensor, posixpath.normpath(info.get("location", "").replace(os.sep, "/")), info


def _all_tensors(graph):
    yield from graph.initializer
    for sparse in graph.sparse_initializer:
        yield from (sparse.values, sparse.indices)
    for node in graph.node:
        for attr in node.attribute:
            if attr.HasField("t"):
                yield attr.t
            yield from attr.tensors
            for g in ([attr.g] if attr.HasField("g") else []) + list(attr.graphs):
                yield from _all_tensors(g)


def is_repo_id(source) -> bool:
    """Whether ``source`` reads as a Hub id "org/name" (and is no existing local path)."""
    return (isinstance(source, str) and bool(_REPO_ID.fullmatch(source))
            and ".." not in source and not source.endswith(".onnx") and not os.path.exists(source))


def is_repo_source(source) -> bool:
    """Whether ``load`` should treat ``source`` as a repo: a Hub id or a local folder."""
    return isinstance(source, Repo) or isinstance(source, (str, os.PathLike)) and (
        os.path.isdir(source) or is_repo_id(os.fspath(source)))


def resolve(source, *, revision=None, cache_dir=None, local_files_only=False, token=None) -> Repo:
    """A ``Repo`` for a local folder or a Hub id "org/name" (listing its files at ``revision``)."""
    if isinstance(source, Repo):
        return source
    path = os.fspath(source)
    if os.path.isdir(path):
        return LocalRepo(path)
    if is_repo_id(path):
        return HubRepo(path, revision=revision, cache_dir=cache_dir,
                       local_files_only=local_files_only, token=token)
    raise HubError(f"{path!r} is neither a local folder nor a Hub repo id like 'org/name'")


# --- the Hub, through huggingface_hub ------------------------------------------------------------

class HubRepo(Repo):
    """A Hub repo at one commit: one API call lists its files, then files download one by one
    into huggingface_hub's cache. Offline (``local_files_only``, HF_HUB_OFFLINE, or the Hub
    unreachable) it lists the files the cache holds for the revision."""

    _scan_onnx = True

    def __init__(self, repo_id, *, revision=None, cache_dir=None, local_files_only=False,
                 token=None):
        from huggingface_hub import constants
        self.name, self.revision, self.token = repo_id, revision or "main", token
        env = os.environ  # read now, not when huggingface_hub was imported
        self.endpoint = (env.get("HF_ENDPOINT") or constants.ENDPOINT).rstrip("/")
        self.cache_dir = os.fspath(cache_dir or env.get("HF_HUB_CACHE") or (
            os.path.join(env["HF_HOME"], "hub") if env.get("HF_HOME") else constants.HF_HUB_CACHE))
        self.offline = bool(local_files_only or constants.HF_HUB_OFFLINE
                            or env.get("HF_HUB_OFFLINE", "").upper() in {"1", "ON", "YES", "TRUE"})
        self.label = repo_id
        self.commit, self._files = self._resolve()

    def __repr__(self):
        return f"HubRepo({self.name!r}, revision={self.revision!r}, commit={self.commit!r})"

    def _resolve(self):
        where = (f"{self.name!r} at revision {self.revision!r} is not in the cache at "
                 f"{self.cache_dir}")
        if not self.offline:
            try:
                return self._resolve_online()
            except _unreachable_errors() as e:
                self.offline = True
                if (cached := self._resolve_cached()) is None:
                    raise HubError(f"Cannot reach {self.endpoint} to resolve {self.name!r} ({e}), "
                                   f"and {where}. Check the connection or HF_ENDPOINT.") from e
                log.warning("%s unreachable (%s); using the cached %s", self.endpoint, e, self.name)
                return cached
        if (cached := self._resolve_cached()) is None:
            raise HubError(f"Offline (local_files_only=True or HF_HUB_OFFLINE=1), and {where}. Run "
                           "once online, point cache_dir/HF_HOME at a cache that has it, or pass "
                           "a local folder.")
        return cached

    def _resolve_online(self):
        from huggingface_hub import HfApi
        try:
            info = HfApi(endpoint=self.endpoint, token=self.token).model_info(
                self.name, revision=self.revision)
        except _unreachable_errors():
            raise
        except Exception as e:
            raise self._error(e) from e
        if info.sha and info.sha != self.revision:
            # Remember revision -> commit in refs/<revision>, as huggingface_hub does, so that
            # an offline run finds this snapshot.
            ref = os.path.join(self._storage(), "refs", *self.revision.split("/"))
            os.makedirs(os.path.dirname(ref), exist_ok=True)
            with open(ref, "w") as f:
                f.write(info.sha)
        return info.sha or self.revision, sorted(s.rfilename for s in info.siblings or [])

    def _resolve_cached(self):
        storage, commit = self._storage(), self.revision
        ref = os.path.join(storage, "refs", *commit.split("/"))
        if not _COMMIT.fullmatch(commit) and os.path.isfile(ref):
            with open(ref) as f:
                commit = f.read().strip()
        snapshot = os.path.join(storage, "snapshots", commit)
        if not _COMMIT.fullmatch(commit) or not os.path.isdir(snapshot):
            return None
        self.label = f"{self.name} (offline: only its cached files are listed)"
        return commit, _walk(snapshot)

    def _storage(self):
        return os.path.join(self.cache_dir, "models--" + self.name.replace("/", "--"))

    def _fetch(self, path):
        from huggingface_hub import hf_hub_download
        try:
            return hf_hub_download(self.name, path, revision=self.commit, cache_dir=self.cache_dir,
                                   token=self.token, local_files_only=self.offline,
                                   endpoint=self.endpoint)
        except Exception as e:
            raise self._error(e, path) from e

    def _error(self, e, path=None) -> HubError:
        from huggingface_hub import errors
        what, hint = repr(self.name), "pass token=... (or set HF_TOKEN, or run `hf auth login`)"
        status = getattr(getattr(e, "response", None), "status_code", None)
        if isinstance(e, errors.GatedRepoError):
            return HubError(f"{what} is gated: request access at {self.endpoint}/{self.name}, "
                            f"then {hint}.")
        if isinstance(e, errors.RepositoryNotFoundError):
            return HubError(f"{what} was not found at {self.endpoint}. Check the id; if the repo "
                            f"is private, {hint}.")
        if isinstance(e, errors.RevisionNotFoundError):
            return HubError(f"{what} has no revision {self.revision!r}.")
        if isinstance(e, errors.HfHubHTTPError) and status in (401, 403):
            return HubError(f"{self.endpoint} refused access to {what} (HTTP {status}): {hint}.")
        if isinstance(e, errors.HFValidationError):
            return HubError(f"{what} is not a valid Hub repo id ({e}).")
        if path is None:
            return HubError(f"Cannot resolve {what} at {self.endpoint}: {e}")
        if isinstance(e, errors.LocalEntryNotFoundError):
            return HubError(f"{path!r} of {what} is not in the cache at {self.cache_dir}, and "
                            "offline mode forbids downloading it. Run once online.")
        return HubError(f"Downloading {path!r} of {what} from {self.endpoint} failed: {e}. "
                        "Nothing partial was kept in the cache; run again to retry.")


def _unreachable_errors():
    """Errors meaning "the Hub cannot be reached" (then the cache is used)."""
    from huggingface_hub.errors import OfflineModeIsEnabled
    try:
        import httpx2 as httpx  # huggingface_hub's HTTP client since 2.x
    except ImportError:
        import httpx
    return (httpx.ConnectError, httpx.TimeoutException, OfflineModeIsEnabled)
