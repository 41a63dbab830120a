"""A fake Hugging Face Hub on loopback that speaks the file API huggingface_hub 2.x calls.

- ``GET /api/models/{org}/{name}[/revision/{rev}]`` -> ``{"id", "sha", "siblings": [...]}``
  (hf_api.py ``model_info``);
- ``GET /api/models?filter=TAG&pipeline_tag=TASK&sort=downloads&limit=N`` -> the repos that have
  every tag and the task, most downloaded first, one page (hf_api.py ``list_models``; the
  ``tags``, ``pipeline_tag`` and ``downloads`` of ``add``);
- ``GET /api/models/{org}/{name}/tree/{rev}?recursive=True`` -> ``[{"type": "file", "path", "size",
  "oid", "lfs"?}]`` (hf_api.py ``list_repo_tree``, which ``snapshot_download`` calls);
- ``HEAD|GET /{org}/{name}/resolve/{rev}/{path}`` -> regular files with ``ETag`` (git blob sha1),
  ``X-Repo-Commit`` and ``Content-Length``; LFS-like files (``.onnx``, external data) answer
  ``302`` to a second "CDN" server (another port, hence another origin) with ``X-Linked-Etag``
  (sha256) and ``X-Linked-Size``, as the Hub does (file_download.py ``get_hf_file_metadata``);
- errors carry ``X-Error-Code`` (``RepoNotFound``, ``GatedRepo``, ``RevisionNotFound``,
  ``EntryNotFound``) which utils/_http.py ``hf_raise_for_status`` maps to its error types;
- the CDN honours ``Range`` (resumed downloads) and can die halfway through a chosen blob;
- ``fault(...)`` makes chosen requests stall, answer an HTTP error, or send wrong bytes (flipped,
  truncated with a matching Content-Length, or cut short of the Content-Length), and
  ``opaque_etags`` makes ETags no hash of the content (as some mirrors and proxies send).

Use the ``fake_hub`` fixture: it starts the server, points HF_ENDPOINT (and the constants
huggingface_hub read at import time) at it, and puts HF_HOME and the cache under tmp_path.
"""

import hashlib
import json
import socket
import sys
import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import SimpleNamespace
from urllib.parse import parse_qs, unquote, urlsplit

import pytest

GOOD_TOKEN = "hf_good_token"


def git_sha1(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def is_lfs(path: str) -> bool:
    name = path.rsplit("/", 1)[-1]
    return name.endswith(".onnx") or ".onnx_data" in name or ".onnx.data" in name


@dataclass
class Fault:
    """What the next ``times`` requests (None: all) on ``where`` for ``path`` (None: any) get.

    ``where``: "api" (model_info), "tree" (list_repo_tree), "head" / "get" (HEAD / GET on /resolve: metadata, and the
    bytes of regular files), "cdn" (the bytes of LFS files). ``stall``: seconds to wait before
    answering; ``status`` (+ ``code``, the X-Error-Code): an error answer instead; ``mangle``:
    "flip" (every byte inverted), "truncate" (half, with Content-Length saying half) or "cut"
    (half, with Content-Length saying all, then the connection closes)."""
    where: str
    path: str | None = None
    status: int | None = None
    code: str | None = None
    stall: float | None = None
    mangle: str | None = None
    times: int | None = None

    def apply(self, body: bytes) -> bytes:
        if self.mangle == "flip":
            return bytes(b ^ 0xFF for b in body)
        return body[: len(body) // 2] if self.mangle == "truncate" else body


class FakeHub:
    def __init__(self):
        self.repos = {}        # repo id -> {"refs": {rev: sha}, "commits": {sha: files}, ...}
        self.blobs = {}        # sha256 -> bytes, served by the CDN
        self.log = []          # (server, method, path) of every request
        self.die_midway = set()  # sha256 of blobs whose next download dies halfway
        self.faults = []       # [Fault], the first that matches a request applies
        self.opaque_etags = False
        self.wake = threading.Event()  # ends stalls when the servers stop
        self._servers = []
        self.ports = (0, 0)

    # --- content ---
    def add(self, repo_id, files, *, revision="main", gated=False, private=False, tags=(),
            pipeline_tag=None, downloads=0) -> str:
        """Serve ``files`` ({path: bytes}) as ``revision`` of ``repo_id``; return its commit.
        ``tags`` (libraries among them: "onnx", "transformers.js"), ``pipeline_tag`` and
        ``downloads`` are what the model list filters and sorts on."""
        files = {p: (d.encode() if isinstance(d, str) else d) for p, d in files.items()}
        digest = hashlib.sha1(repr(sorted((p, git_sha1(d)) for p, d in files.items())).encode())
        commit = digest.hexdigest()
        repo = self.repos.setdefault(repo_id, {"refs": {}, "commits": {}})
        repo.update(gated=gated, private=private, tags=list(tags), pipeline_tag=pipeline_tag,
                    downloads=downloads)
        repo["refs"][revision] = commit
        repo["commits"][commit] = files
        for data in files.values():
            self.blobs[hashlib.sha256(data).hexdigest()] = data
        return commit

    def fail_midway(self, data: bytes):
        """The next download of ``data`` sends half of it, then the whole server goes down."""
        self.die_midway.add(hashlib.sha256(data).hexdigest())

    def fault(self, where, path=None, **how) -> Fault:
        """Add a ``Fault`` (see there) on ``where``, e.g. ``fault("api", stall=20)``."""
        fault = Fault(where, path, **how)
        self.faults.append(fault)
        return fault

    def take(self, where, path):
        """The fault for this request, if any (counting it against its ``times``)."""
        for fault in list(self.faults):
            if fault.where == where and fault.path in (None, path):
                if fault.times is not None:
                    fault.times -= 1
                    if fault.times <= 0:
                        self.faults.remove(fault)
                return fault
        return None

    def etag(self, digest: str) -> str:
        return f'"opaque-{digest[:12]}"' if self.opaque_etags else f'"{digest}"'

    def downloads(self):
        """Repo paths whose bytes were sent (GET on resolve, or on the CDN)."""
        return [p for server, method, p in self.log if method == "GET" and p]

    # --- lifecycle ---
    @property
    def url(self):
        return f"http://127.0.0.1:{self.ports[0]}"

    def start(self):
        self.wake.clear()
        hub = _Server(("127.0.0.1", self.ports[0]), _HubHandler, self)
        cdn = _Server(("127.0.0.1", self.ports[1]), _CdnHandler, self)
        self.ports = (hub.server_address[1], cdn.server_address[1])
        self._servers = [hub, cdn]
        for server in self._servers:
            threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05},
                             daemon=True).start()

    def stop(self):
        servers, self._servers = self._servers, []
        self.wake.set()  # after: a stalled handler that wakes must see the servers stopped
        for server in servers:
            server.close()

    @property
    def running(self):
        return bool(self._servers)

    # --- lookups used by the handlers ---
    def files_at(self, repo_id, revision):
        repo = self.repos[repo_id]
        commit = revision if revision in repo["commits"] else repo["refs"].get(revision)
        return commit, (repo["commits"].get(commit) if commit else None)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False

    def __init__(self, address, handler, fake):
        self.fake, self.connections = fake, set()
        super().__init__(address, handler)

    def process_request(self, request, client_address):
        self.connections.add(request)
        super().process_request(request, client_address)

    def handle_error(self, request, client_address):
        if not isinstance(sys.exc_info()[1], ConnectionError):  # else: a client that gave up
            super().handle_error(request, client_address)

    def shutdown_request(self, request):
        self.connections.discard(request)
        super().shutdown_request(request)

    def close(self):
        """Stop listening and cut the open (keep-alive) connections, as a dead server would."""
        self.shutdown()
        self.server_close()
        for connection in list(self.connections):
            try:
                connection.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    kind = "?"

    def log_message(self, *args):
        pass

    def do_HEAD(self):
        self._handle(head=True)

    def do_GET(self):
        self._handle(head=False)

    def send(self, status, body=b"", headers=None, head=False):
        self.send_response(status)
        for key, value in (headers or {}).items():
            self.send_header(key, str(value))
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if not head:
            self.wfile.write(body)

    def error(self, status, code, message, head, headers=None):
        body = json.dumps({"error": message}).encode()
        codes = {"X-Error-Code": code} if code else {}
        self.send(status, body, {**codes, "X-Error-Message": message,
                                 "Content-Type": "application/json", **(headers or {})}, head)

    def fault(self, where, path, head):
        """The fault for this request after its stall, or None; True when it was answered."""
        fake = self.server.fake
        fault = fake.take(where, path)
        if fault is None:
            return None
        if fault.stall:
            fake.wake.wait(fault.stall)
            if not fake.running:  # stopped meanwhile: the client is gone or will be refused
                self.close_connection = True
                return True
        if fault.status:
            self.error(fault.status, fault.code, f"Injected HTTP {fault.status}", head)
            return True
        return fault

    def send_body(self, status, body, headers, head, fault):
        """``body`` as ``fault`` mangles it ("cut": the connection closes after half of it)."""
        if fault is None or fault.mangle != "cut" or head:
            return self.send(status, fault.apply(body) if fault else body, headers, head)
        self.send_response(status)
        for key, value in headers.items():
            self.send_header(key, str(value))
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body[: len(body) // 2])
        self.wfile.flush()
        self.close_connection = True

    def authorized(self):
        return self.headers.get("Authorization") == f"Bearer {GOOD_TOKEN}"


class _HubHandler(_Handler):
    def _handle(self, head):
        fake = self.server.fake
        parts = [unquote(p) for p in urlsplit(self.path).path.strip("/").split("/")]
        if parts == ["api", "models"]:
            fake.log.append(("hub", "LIST", None))
            return self.list_models(parse_qs(urlsplit(self.path).query), head)
        if parts[:2] == ["api", "models"] and len(parts) >= 6 and parts[4] == "tree":
            fake.log.append(("hub", "TREE", None))
            if self.fault("tree", None, head) is True:
                return
            return self.tree(parts[2] + "/" + parts[3], parts[5], head)
        if parts[:2] == ["api", "models"] and len(parts) >= 4:
            fake.log.append(("hub", "API", None))
            if self.fault("api", None, head) is True:
                return
            return self.api(parts[2] + "/" + parts[3], parts[5] if len(parts) > 5 else "main",
                            head)
        if len(parts) >= 5 and parts[2] == "resolve":
            path = "/".join(parts[4:])
            fake.log.append(("hub", self.command, path if not head else None))
            fault = self.fault("head" if head else "get", path, head)
            if fault is True:
                return
            return self.resolve(parts[0] + "/" + parts[1], parts[3], path, head, fault)
        fake.log.append(("hub", self.command, None))
        self.send(404, b"Not Found", head=head)

    def repo(self, repo_id, head):
        repo = self.server.fake.repos.get(repo_id)
        if repo is None or (repo["private"] and not self.authorized()):
            self.error(401, "RepoNotFound", "Invalid username or password.", head)
            return None
        return repo

    def at_revision(self, repo_id, revision, head):
        """(repo, commit, files) of ``revision``, or None once the error is sent."""
        repo = self.repo(repo_id, head)
        if repo is None:
            return None
        commit, files = self.server.fake.files_at(repo_id, revision)
        if files is None:
            self.error(404, "RevisionNotFound", f"Invalid rev id: {revision}", head)
            return None
        return repo, commit, files

    def api(self, repo_id, revision, head):
        found = self.at_revision(repo_id, revision, head)
        if found is None:
            return
        repo, commit, files = found
        info = {"id": repo_id, "modelId": repo_id, "sha": commit, "private": repo["private"],
                "gated": "auto" if repo["gated"] else False,
                "siblings": [{"rfilename": p} for p in sorted(files)]}
        if repo.get("pipeline_tag"):
            info["pipeline_tag"] = repo["pipeline_tag"]
        self.send(200, json.dumps(info).encode(), {"Content-Type": "application/json"}, head)

    def tree(self, repo_id, revision, head):
        """Every file at ``revision`` (recursive; one page): git blob sha1, and sha256 for LFS."""
        found = self.at_revision(repo_id, revision, head)
        if found is None:
            return
        files = found[2]
        items = []
        for path, data in sorted(files.items()):
            item = {"type": "file", "path": path, "size": len(data), "oid": git_sha1(data)}
            if is_lfs(path):
                item["lfs"] = {"oid": hashlib.sha256(data).hexdigest(), "size": len(data),
                               "pointerSize": 134}
            items.append(item)
        self.send(200, json.dumps(items).encode(), {"Content-Type": "application/json"}, head)

    def list_models(self, query, head):
        """The public repos with every ``filter`` tag and the ``pipeline_tag``, sorted by
        ``downloads`` (the only sort served), at most ``limit``, with their files."""
        fake, tags = self.server.fake, set(query.get("filter", []))
        task = query.get("pipeline_tag", [None])[0]
        if query.get("sort", ["downloads"])[0] != "downloads":
            return self.error(400, None, "the fake Hub sorts by downloads only", head)
        found = [(repo_id, repo) for repo_id, repo in fake.repos.items()
                 if not repo["private"] and tags <= set(repo["tags"])
                 and task in (None, repo["pipeline_tag"])]
        found.sort(key=lambda item: -item[1]["downloads"])
        limit = int(query.get("limit", [len(found)])[0])
        items = []
        for repo_id, repo in found[:limit]:
            commit, files = fake.files_at(repo_id, "main")
            items.append({"id": repo_id, "modelId": repo_id, "sha": commit,
                          "downloads": repo["downloads"], "pipeline_tag": repo["pipeline_tag"],
                          "tags": repo["tags"], "private": False,
                          "library_name": repo["tags"][0] if repo["tags"] else None,
                          "siblings": [{"rfilename": p} for p in sorted(files)]})
        self.send(200, json.dumps(items).encode(), {"Content-Type": "application/json"}, head)

    def resolve(self, repo_id, revision, path, head, fault=None):
        repo = self.repo(repo_id, head)
        if repo is None:
            return
        if repo["gated"] and not self.authorized():
            return self.error(401, "GatedRepo", f"Access to model {repo_id} is restricted. You "
                              "must have access to it and be authenticated to access it.", head)
        commit, files = self.server.fake.files_at(repo_id, revision)
        if files is None:
            return self.error(404, "RevisionNotFound", f"Invalid rev id: {revision}", head)
        if path not in files:
            return self.error(404, "EntryNotFound", f"{path} does not exist", head,
                              {"X-Repo-Commit": commit})
        data, fake = files[path], self.server.fake
        headers = {"X-Repo-Commit": commit, "ETag": fake.etag(git_sha1(data))}
        if not is_lfs(path):
            return self.send_body(200, data, headers, head, fault)
        sha256 = hashlib.sha256(data).hexdigest()
        self.send(302, b"", {**headers, "X-Linked-Etag": fake.etag(sha256),
                             "X-Linked-Size": len(data),
                             "Location": f"http://127.0.0.1:{fake.ports[1]}/blobs/{sha256}"
                                         f"?name={path}"}, head)


class _CdnHandler(_Handler):
    def _handle(self, head):
        fake = self.server.fake
        url = urlsplit(self.path)
        sha256 = url.path.rsplit("/", 1)[-1]
        name = unquote(url.query.partition("name=")[2])
        fake.log.append(("cdn", self.command, name if not head else None))
        fault = self.fault("cdn", name, head) if not head else None
        if fault is True:
            return
        data = fake.blobs.get(sha256)
        if data is None:
            return self.send(404, b"NoSuchKey", head=head)
        start = 0
        if self.headers.get("Range", "").startswith("bytes="):
            start = int(self.headers["Range"][6:].split("-")[0] or 0)
        status = 206 if start else 200
        body = data[start:]
        if sha256 in fake.die_midway and not head:
            fake.die_midway.discard(sha256)
            return self.die(body)
        self.send_body(status, body, {"ETag": f'"{sha256}"', "Accept-Ranges": "bytes"}, head, fault)

    def die(self, body):
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body[: len(body) // 2])
        self.wfile.flush()
        self.server.fake.stop()  # listeners closed: the client's retries are refused
        self.close_connection = True


@pytest.fixture
def fake_hub(tmp_path, monkeypatch):
    """A running FakeHub; huggingface_hub points at it, with HF_HOME under tmp_path."""
    from huggingface_hub import constants, file_download
    from huggingface_hub.utils import _http

    fake = FakeHub()
    fake.start()
    home = tmp_path / "hf_home"
    env = {"HF_ENDPOINT": fake.url, "HF_HOME": str(home), "HF_HUB_CACHE": str(home / "hub")}
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    for key in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_TOKEN", "HUGGING_FACE_HUB_TOKEN"):
        monkeypatch.delenv(key, raising=False)
    # huggingface_hub reads these once, at import time.
    for key, value in {"ENDPOINT": fake.url, "HF_HOME": str(home),
                       "HF_HUB_CACHE": str(home / "hub"), "HF_HUB_OFFLINE": False,
                       "HF_TOKEN_PATH": str(home / "token"),
                       "HF_STORED_TOKENS_PATH": str(home / "stored_tokens"),
                       "HUGGINGFACE_CO_URL_TEMPLATE":
                           fake.url + "/{repo_id}/resolve/{revision}/{filename}"}.items():
        monkeypatch.setattr(constants, key, value)
    # Resumed downloads wait 1 s between tries, and retried requests back off for up to 23 s;
    # a failing loopback server needs no waiting.
    no_wait = SimpleNamespace(sleep=lambda seconds: None)
    monkeypatch.setattr(file_download, "time", no_wait)
    monkeypatch.setattr(_http, "time", no_wait)
    yield fake
    fake.stop()
