"""Hub repos and local folders: resolve, list files, fetch what a model needs, choose variants.

    repo = hub.resolve("Xenova/all-MiniLM-L6-v2")   # or a folder; revision=, token=, cache_dir=
    path = repo.onnx_file("decoder_model_merged", task_default="q4")  # + its external data

Downloads go through huggingface_hub (its cache, HF_HOME, HF_ENDPOINT, HF_HUB_OFFLINE), and only
the files a load needs are fetched: an ONNX graph and its external data together in one
``snapshot_download`` (``allow_patterns`` naming exactly them: parallel, one progress bar, its
retries), as are a pipeline's settings files (``prefetch_settings``); a lone file comes through
``hf_hub_download``. Every request has a time-out: HF_HUB_ETAG_TIMEOUT for the API and file
metadata, HF_HUB_DOWNLOAD_TIMEOUT for silence while downloading (seconds, default 10 each;
huggingface_hub reads both when imported), but for the tree listing ``snapshot_download`` asks
first, once per commit (huggingface_hub 2.x's ``list_repo_tree`` takes no time-out).

huggingface_hub checks that a download has the size the server announced (and resumes one cut
short), but hashes no bytes that come over plain HTTP (file_download.py ``http_get``; only a
``local_dir`` copy is compared with its sha256); Xet-stored files are rebuilt by hf_xet from
content-addressed chunks.
Set TRANSMUTER_VERIFY_DOWNLOADS=1 to also check each fresh download against its ETag (sha256,
or git sha1; a file whose ETag is no hash is parsed instead) before it is kept.

Variant rules follow transformers.js (packages/transformers/src/models/session.js `getSession`,
src/utils/dtypes.js, src/utils/model-loader.js `getModelDataFiles`).
"""

import contextlib
import json
import logging
import os
import posixpath
import re

from ..errors import HubError
from .verify import corruption
from ..engine.io.onnx_file import referenced_files
from .variants import choose_variant, external_data_files, missing_file_error

log = logging.getLogger(__name__)

SCAN_LIMIT = 64 << 20
_COMMIT = re.compile(r"[0-9a-f]{40}")
_REPO_ID = re.compile(r"[\w.-]+/[\w.-]+")


# --- repos ---------------------------------------------------------------------------------------

class Repo:
    """The files of a model repo. Subclasses set ``name``, ``_files`` and give ``_fetch(path)``."""

    name, label = "repo", "repo"  # label: the name as errors show it
    _scan_onnx = False  # read small .onnx files to fetch the external data they reference
    pipeline_tag = None  # the task the Hub's model info names (HubRepo, when online)

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
        """Parsed JSON file ``name``, or ``default`` when the repo lacks it. Settings files
        (``*config.json``, special_tokens_map.json) and those whose default is a dict or a list
        must hold that kind of value."""
        if not self.has(name):
            return default
        try:
            with open(self.file(name), encoding="utf-8") as f:
                value = json.load(f)
        except (OSError, ValueError) as e:
            raise HubError(f"{self.name}: cannot read {name} ({e})") from e
        kind = dict if name.endswith(SETTINGS_FILES) else type(default)
        if kind in (dict, list) and not isinstance(value, kind):
            raise HubError(f"{self.label}: {name} holds a JSON {type(value).__name__}, where a "
                           f"JSON {'object' if kind is dict else 'array'} belongs: fix the file")
        return value

    def config(self) -> dict:
        if getattr(self, "_config", None) is None:
            self._config = _checked_config(self.json("config.json", {}), self.label)
        return self._config

    def js_config(self) -> dict:
        """The ``transformers.js_config`` block of config.json (dtype, kv_cache_dtype, ...)."""
        return self.config().get("transformers.js_config") or {}

    def choose(self, component="model", variant=None, task_default=None, *, subfolder="onnx"):
        return choose_variant(self.files(), component, variant=variant, config=self.config(),
                              task_default=task_default, subfolder=subfolder, name=self.label)

    def decoder_component(self, subfolder="onnx"):
        """The decoder an encoder-decoder repo runs, as optimum's ORTModelFor*Seq2Seq picks it:
        ``decoder_model_merged`` when present, else ``decoder_model`` (a split pair: its
        ``decoder_with_past_model`` loads beside it, pipelines/encoder_decoder.py)."""
        names = {posixpath.basename(f) for f in self.onnx_files()
                 if posixpath.dirname(f) == subfolder}
        if any(n.startswith("decoder_model_merged") for n in names):
            return "decoder_model_merged"
        if any(n.startswith("decoder_model") for n in names) and \
                any(n.startswith("decoder_with_past_model") for n in names):
            return "decoder_model"
        return "decoder_model_merged"  # the missing-file error names what the repo has

    def onnx_file(self, component="model", variant=None, task_default=None, *, subfolder="onnx",
                  use_external_data_format=None) -> str:
        """Local path of the chosen ONNX file of ``component``, with its external data fetched."""
        chosen = self.choose(component, variant, task_default, subfolder=subfolder)
        return self.fetch_onnx(chosen.path, use_external_data_format)

    def fetch_onnx(self, path, use_external_data_format=None) -> str:
        """Fetch the ONNX file ``path`` and its external data; return its local path."""
        if use_external_data_format is None:
            use_external_data_format = self.js_config().get("use_external_data_format")
        if not self.has(path):
            raise missing_file_error(self.label, path, self.files())
        extras = external_data_files(self.files(), path, use_external_data_format)
        local = self.prefetch([path, *extras])[0]
        if self._scan_onnx and os.path.getsize(local) <= SCAN_LIMIT:
            # data named only inside the graph (already here when the name follows the rules)
            for extra in referenced_files(local, posixpath.dirname(path)):
                self.file(extra)
        return local

    def prefetch(self, paths) -> list[str]:
        """Local paths of ``paths`` (all in the repo), fetched together where the repo can."""
        return [self._fetch(path) for path in paths]

    def prefetch_settings(self) -> list[str]:
        """Fetch together the settings files (PIPELINE_SETTINGS) the repo has: a pipeline reads
        them one by one as its tokenizer, processor and generation settings load."""
        return self.prefetch([f for f in PIPELINE_SETTINGS if self.has(f)])


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


# files of settings: a JSON object at the top, whatever the caller's default
SETTINGS_FILES = ("config.json", "special_tokens_map.json")
# The small files beside the graphs that pipelines read (config, tokenizer, processor,
# generation, chat template, sentence-transformers), as transformers.js' AutoTokenizer /
# AutoProcessor / AutoConfig fetch them.
PIPELINE_SETTINGS = ("config.json", "generation_config.json", "tokenizer.json",
                     "tokenizer_config.json", "special_tokens_map.json",
                     "preprocessor_config.json", "processor_config.json", "chat_template.json",
                     "chat_template.jinja", "config_sentence_transformers.json", "modules.json")
# config.json's context lengths (generation reads the first present)
POSITION_LIMITS = ("max_position_embeddings", "n_positions", "n_ctx", "max_sequence_length")


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
    """A Hub repo at one commit: one API call lists its files, then the files a load needs
    download into huggingface_hub's cache. Offline (``local_files_only``, HF_HUB_OFFLINE, or the Hub
    unreachable) it lists the files the cache holds for the revision."""

    _scan_onnx = True

    def __init__(self, repo_id, *, revision=None, cache_dir=None, local_files_only=False,
                 token=None):
        from huggingface_hub import constants
        self.name, self.revision, self.token = repo_id, _check_revision(revision or "main"), token
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
            except HubError:
                raise
            except Exception as e:
                if not _transient(e):
                    raise self._error(e) from e
                # As huggingface_hub does: the Hub unreachable, slow or failing, use the cache.
                fault, hint, why = self._fault(e, f"resolve {self.name!r}", "HF_HUB_ETAG_TIMEOUT")
                self.offline = True
                if (cached := self._resolve_cached(why)) is None:
                    raise HubError(f"{_capital(fault)}, and {where}. {hint}.") from e
                log.warning("%s; using the cached %s", fault, self.name)
                return cached
        if (cached := self._resolve_cached()) is None:
            raise HubError(f"Offline (local_files_only=True or HF_HUB_OFFLINE=1), and {where}. Run "
                           "once online, point cache_dir/HF_HOME at a cache that has it, or pass "
                           "a local folder.")
        return cached

    def _resolve_online(self):
        from huggingface_hub import HfApi, constants
        # model_info has no time-out unless given one.
        info = HfApi(endpoint=self.endpoint, token=self.token).model_info(
            self.name, revision=self.revision, timeout=constants.HF_HUB_ETAG_TIMEOUT)
        if info.sha and not _COMMIT.fullmatch(info.sha):
            # The sha names the snapshot folder and goes into the ref file: a hostile server's
            # "../x" would lead both out of the cache.
            raise HubError(f"{self.endpoint} answered {info.sha!r} as the commit of {self.name!r} "
                           f"at {self.revision!r}, which is no 40-hex-digit commit id. Check "
                           "HF_ENDPOINT points at a Hugging Face Hub.")
        if info.sha and info.sha != self.revision:
            self._write_ref(info.sha)
        self.pipeline_tag = info.pipeline_tag  # pipeline(model=...) without a task reads it
        return info.sha or self.revision, _listing(info.siblings or [], self.name)

    def _write_ref(self, commit):
        """Remember revision -> commit in refs/<revision>, as huggingface_hub does, so that an
        offline run finds this snapshot (_check_revision keeps the path inside refs/)."""
        ref = os.path.join(self._storage(), "refs", *self.revision.split("/"))
        os.makedirs(os.path.dirname(ref), exist_ok=True)
        with open(ref, "w") as f:
            f.write(commit)

    def _resolve_cached(self, why="offline"):
        storage, commit = self._storage(), self.revision
        ref = os.path.join(storage, "refs", *commit.split("/"))
        if not _COMMIT.fullmatch(commit) and os.path.isfile(ref):
            with open(ref) as f:
                commit = f.read().strip()
        snapshot = os.path.join(storage, "snapshots", commit)
        if not _COMMIT.fullmatch(commit) or not os.path.isdir(snapshot):
            return None
        self.label = f"{self.name} ({why}: only its cached files are listed)"
        return commit, _walk(snapshot)

    def _storage(self):
        return os.path.join(self.cache_dir, "models--" + self.name.replace("/", "--"))

    def _fetch(self, path):
        from huggingface_hub import constants, hf_hub_download
        fresh = not self.offline and not os.path.exists(self._pointer(path))  # else no request
        step = "metadata"
        try:
            # Asked first, once, with the time-out: hf_hub_download retries a failed HEAD up to
            # 6 times with 60 s time-outs, and reports a 5xx or a 403 as "not in the cache".
            etag = self._metadata(path).etag if fresh else None
            step = "download"
            local = hf_hub_download(self.name, path, revision=self.commit, cache_dir=self.cache_dir,
                                    token=self.token, local_files_only=self.offline,
                                    endpoint=self.endpoint,
                                    etag_timeout=constants.HF_HUB_ETAG_TIMEOUT)
        except Exception as e:
            raise self._error(e, path, step) from e
        if fresh and verify_downloads():
            self._verify(path, local, etag)
        return local

    def prefetch(self, paths) -> list[str]:
        """Two or more files missing from the cache come in one ``snapshot_download`` of exactly
        those paths at the resolved commit (parallel, one progress bar, huggingface_hub's
        retries: a file's HEAD that fails with a 429, a 5xx or a time-out is asked again, with
        back-off and 60 s time-outs, so a stalled HEAD costs minutes here where ``_fetch`` stops
        at HF_HUB_ETAG_TIMEOUT). A lone file, or any offline, goes through ``_fetch``: a snapshot
        would first list the whole repo's tree."""
        missing = [p for p in dict.fromkeys(paths) if not os.path.exists(self._pointer(p))]
        if self.offline or len(missing) < 2:
            return [self._fetch(path) for path in paths]
        from huggingface_hub import constants, snapshot_download
        try:
            snapshot_download(self.name, revision=self.commit, cache_dir=self.cache_dir,
                              token=self.token, endpoint=self.endpoint,
                              allow_patterns=[_literal(p) for p in missing],
                              etag_timeout=constants.HF_HUB_ETAG_TIMEOUT,
                              max_workers=min(8, len(missing)))
        except Exception as e:
            failed = [p for p in missing if not os.path.exists(self._pointer(p))] or missing
            # huggingface_hub asks a failing HEAD again and resumes a silent download, but takes
            # a GET answered with a 5xx or a 429 as final: those files get one more try below.
            if not (_status(e) or 0) >= 500 and _status(e) != 429:
                raise self._error(e, failed, "download") from e
            log.warning("%s: %s failed (%s); trying again one by one", self.name, failed, e)
        if verify_downloads():
            for path in missing:  # the cache names each blob by its ETag
                if os.path.exists(local := self._pointer(path)):
                    self._verify(path, local, os.path.basename(os.path.realpath(local)))
        # Any the snapshot did not bring (a 5xx above, or its tree listing failed and it fell
        # back to the partial snapshot folder without a word) come one by one, with our errors.
        return [self._fetch(path) for path in paths]

    def _pointer(self, path):
        """Where the snapshot of ``self.commit`` holds ``path`` (a link to its blob)."""
        return os.path.join(self._storage(), "snapshots", self.commit, *path.split("/"))

    def _metadata(self, path):
        from huggingface_hub import constants, get_hf_file_metadata, hf_hub_url
        url = hf_hub_url(self.name, path, revision=self.commit, endpoint=self.endpoint)
        return get_hf_file_metadata(url, token=self.token, timeout=constants.HF_HUB_ETAG_TIMEOUT,
                                    endpoint=self.endpoint)

    def _verify(self, path, local, etag):
        """Keep a fresh download only if it is the file (TRANSMUTER_VERIFY_DOWNLOADS=1):
        huggingface_hub checks its size, not its hash, so wrong bytes would stay cached and fail
        every later load."""
        if (reason := corruption(local, path, etag, SCAN_LIMIT)) is None:
            return
        for stale in dict.fromkeys((os.path.realpath(local), local)):  # the blob, its link
            with contextlib.suppress(OSError):
                os.remove(stale)
        raise HubError(f"Downloading {path!r} of {self.name!r} from {self.endpoint} gave corrupt "
                       f"bytes: {reason}. They were removed from the cache; run again (if it "
                       "happens every time, a proxy or mirror alters the file).")

    def _error(self, e, path=None, step="metadata") -> HubError:
        from huggingface_hub import errors
        what, hint = repr(self.name), "pass token=... (or set HF_TOKEN, or run `hf auth login`)"
        # path: one file, or those a snapshot left missing
        names = ", ".join(map(repr, path)) if isinstance(path, list) else repr(path)
        if isinstance(e, errors.LocalEntryNotFoundError) and not self.offline and e.__cause__:
            e, step = e.__cause__, "metadata"  # hf_hub_download's HEAD failed: that is the news
        status = _status(e)
        if isinstance(e, errors.GatedRepoError):
            return HubError(f"{what} is gated: request access at {self.endpoint}/{self.name}, "
                            f"then {hint}.")
        if isinstance(e, errors.RepositoryNotFoundError):
            return HubError(f"{what} was not found at {self.endpoint}. Check the id; if the repo "
                            f"is private, {hint}.")
        if isinstance(e, errors.RevisionNotFoundError):
            return HubError(f"{what} has no revision {self.revision!r}.")
        if isinstance(e, errors.RemoteEntryNotFoundError):
            return HubError(f"{self.endpoint} has no {names} in {what} at {self.commit} (HTTP 404)"
                            ", though it lists it. The repo may be changing: run again later.")
        if isinstance(e, errors.HfHubHTTPError) and status in (401, 403):
            return HubError(f"{self.endpoint} refused access to {what} (HTTP {status}): {hint}.")
        if isinstance(e, errors.HFValidationError):
            return HubError(f"{what} is not a valid Hub repo id ({e}).")
        if isinstance(e, errors.FileMetadataError):
            return HubError(f"{self.endpoint} answered for {names} of {what} without a Hub's "
                            f"headers ({e}). Check HF_ENDPOINT.")
        if isinstance(e, errors.LocalEntryNotFoundError):
            return HubError(f"{names} of {what} is not in the cache at {self.cache_dir}, and "
                            "offline mode (local_files_only=True or HF_HUB_OFFLINE=1) forbids "
                            "downloading it. Run once online.")
        if path is None:  # _resolve handles the transient failures
            return HubError(f"Cannot resolve {what} at {self.endpoint}: {e}")
        if _transient(e):
            variable = "HF_HUB_ETAG_TIMEOUT" if step == "metadata" else "HF_HUB_DOWNLOAD_TIMEOUT"
            fault, fix, _ = self._fault(e, "download it", variable)
            return HubError(f"Downloading {names} of {what} failed: {fault}. It is not in the "
                            f"cache, and nothing partial was kept. {fix}.")
        if isinstance(e, OSError) and "Consistency check failed" in str(e):
            e = f"the download was incomplete ({str(e).splitlines()[0].rstrip('.')})"
        return HubError(f"Downloading {names} of {what} from {self.endpoint} failed: {e}. "
                        "Nothing partial was kept in the cache; run again to retry.")

    def _fault(self, e, doing, variable):
        """(what went wrong, what to do, how a cached listing is labelled) after a transient
        failure of the Hub's ``doing``."""
        from huggingface_hub import constants
        from huggingface_hub.errors import OfflineModeIsEnabled
        httpx, status, ep = _httpx(), _status(e), self.endpoint
        if isinstance(e, httpx.TimeoutException):
            return (f"{ep} did not answer within {getattr(constants, variable):g} s ({variable}) "
                    f"when asked to {doing}", "Check the connection; if the Hub is only slow, set "
                    f"{variable} to more seconds in the environment before Python starts",
                    "offline")
        if status:
            kind, fix = (("too many requests", "Wait a minute and try again (a token raises the "
                          "limit)") if status == 429 else
                         ("a server error", "The Hub is having trouble: try again later"))
            return (f"{ep} answered HTTP {status}, {kind}, when asked to {doing} "
                    f"({e.response.url})", fix, f"the Hub failing with HTTP {status}")
        if isinstance(e, (httpx.ConnectError, httpx.UnsupportedProtocol, OfflineModeIsEnabled)):
            return (f"cannot reach {ep} to {doing} ({e})",
                    "Check the connection, a proxy, or HF_ENDPOINT", "offline")
        return (f"the connection to {ep} broke when asked to {doing} ({e})", "Try again later",
                "the Hub's answer broken")


def _checked_config(config, label):
    """config.json with the fields every pipeline reads checked: label maps are objects, and
    position limits positive ints (each refused with the field, not a failure far inside)."""
    for key in ("id2label", "label2id"):
        if key in config and not isinstance(config[key], dict):
            raise HubError(f"{label}: config.json's {key} is a JSON {type(config[key]).__name__},"
                           " where transformers reads an object ({\"0\": \"LABEL\", ...})")
    for key in POSITION_LIMITS:
        value = config.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or
                                  value < 1):
            raise HubError(f"{label}: config.json's {key} must be a positive int, got "
                           f"{value!r:.80}")
    # read by every pipeline's choice of head and limits (a dict model_type escaped as an
    # unhashable TypeError, a float architectures as 'not subscriptable'; issue 14)
    kind, names, pad = (config.get(k) for k in ("model_type", "architectures", "pad_token_id"))
    if kind is not None and not isinstance(kind, str):
        raise HubError(f"{label}: config.json's model_type must be a string, got {kind!r:.80}")
    if names is not None and not (isinstance(names, list) and
                                  all(isinstance(n, str) for n in names)):
        raise HubError(f"{label}: config.json's architectures must be a list of class names, "
                       f"got {names!r:.80}")
    if pad is not None and (isinstance(pad, bool) or not isinstance(pad, int)):
        raise HubError(f"{label}: config.json's pad_token_id must be an int or null, got "
                       f"{pad!r:.80}")
    return config


def _check_revision(revision):
    """``revision`` if it is a safe ref name (``main``, ``v1.0``, ``refs/pr/1``, a commit id):
    it becomes the path refs/<revision> in the cache, so "../../x" or "/etc/x" would write a
    file outside it."""
    if (not isinstance(revision, str) or "\0" in revision or "\\" in revision
            or _is_absolute(revision)
            or any(part in ("", ".", "..") for part in revision.split("/"))):
        raise HubError(f"Revision {revision!r} is not a valid branch, tag or commit: use a name "
                       "like 'main', 'v1.0' or 'refs/pr/1', or a 40-hex-digit commit id (no "
                       "leading '/', no backslashes, no empty, '.' or '..' parts).")
    return revision


def _listing(siblings, name) -> list[str]:
    """The repo's file names, without those a hostile server could use to escape the snapshot
    folder (absolute, or with '..' parts): they are never asked of hf_hub_download."""
    files, dropped = [], []
    for path in (s.rfilename or "" for s in siblings):
        bad = (not path or "\0" in path or _is_absolute(path)
               or ".." in path.replace("\\", "/").split("/"))
        (dropped if bad else files).append(path)
    if dropped:
        log.warning("%s: ignoring file names that leave the repo: %s", name, dropped)
    return sorted(files)


def _is_absolute(path) -> bool:
    # Windows too: a leading backslash or a drive ("C:x") leaves a folder there, and since
    # Python 3.13 os.path.isabs no longer calls "/x" absolute there.
    return (path.startswith(("/", "\\")) or os.path.isabs(path)
            or bool(os.path.splitdrive(path)[0]))


def verify_downloads() -> bool:
    """Whether TRANSMUTER_VERIFY_DOWNLOADS asks to hash each fresh download (read per download)."""
    return os.environ.get("TRANSMUTER_VERIFY_DOWNLOADS", "").upper() in {"1", "ON", "YES", "TRUE"}


def _literal(path):
    """``path`` as an fnmatch pattern matching only itself (allow_patterns are patterns)."""
    return re.sub(r"([*?\[])", r"[\1]", path)


def _httpx():
    try:
        import httpx2 as httpx  # huggingface_hub's HTTP client since 2.x
    except ImportError:
        import httpx
    return httpx


def _capital(clause):
    return clause if clause.startswith(("http:", "https:")) else clause[:1].upper() + clause[1:]


def _status(e):
    return getattr(getattr(e, "response", None), "status_code", None)


def _transient(e) -> bool:
    """Whether ``e`` says the Hub is unreachable, slow or failing now (then the cache may do)."""
    from huggingface_hub.errors import OfflineModeIsEnabled
    status = _status(e) or 0
    return (isinstance(e, (_httpx().TransportError, OfflineModeIsEnabled))
            or status == 429 or status >= 500)
