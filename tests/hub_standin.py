"""A loopback stand-in of the Hugging Face Hub, for `specfleet store add` (huggingface_hub's
real snapshot_download, pointed at it by HF_ENDPOINT).

It answers what snapshot_download asks of the Hub for a model repo, as strictly as the Hub:

- GET /api/models/{repo}/revision/{rev}: the repo's info, ``sha`` the commit;
- GET /api/models/{repo}/tree/{rev}?recursive=true: its files (git blob oid, size, and
  ``lfs`` with the sha256 for large files), folders as ``directory`` entries;
- HEAD/GET /{repo}/resolve/{rev}/{path}: a small file directly (ETag its git blob oid,
  X-Repo-Commit, Content-Length); a large (LFS) file as a 302 to a CDN on another port
  carrying X-Linked-Etag (the sha256), X-Linked-Size and X-Repo-Commit. The CDN serves only
  signed URLs and refuses a request carrying an Authorization header, as S3 does: the token
  must not leave the Hub.

Errors carry the Hub's headers (X-Error-Code, X-Error-Message): an unknown repo is 404
RepoNotFound, an unknown revision 404 RevisionNotFound, a missing file 404 EntryNotFound; a
gated repo is 401 GatedRepo without a bearer token and 403 GatedRepo with a token that may
not read it.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, unquote, urlsplit

GOOD_TOKEN = "hf_standin_reader_0123456789abcdef"  # the account that accepted the licence
OTHER_TOKEN = "hf_standin_other_fedcba9876543210"  # an account that did not
CDN_SIGNATURE = "signed-by-standin"


def git_blob_oid(content: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(content) + content).hexdigest()


@dataclass
class Repo:
    repo_id: str
    files: dict[str, bytes]
    lfs: frozenset[str] = frozenset()  # served through the CDN, etag = sha256
    gated: bool = False
    # What a gated repo refuses without access: "files" (the file downloads, /resolve/, as the
    # Hub does: its info and file list are public) or "all" (its info and file list too).
    # Both must end in the same clear error.
    gate: str = "all"
    commit: str = ""

    def __post_init__(self) -> None:
        self.commit = self.commit or hashlib.sha1(self.repo_id.encode()).hexdigest()

    def etag(self, path: str) -> str:
        return hashlib.sha256(self.files[path]).hexdigest() if path in self.lfs else git_blob_oid(self.files[path])


@dataclass
class Hub:
    repos: dict[str, Repo]
    blobs: dict[str, bytes] = field(default_factory=dict)  # what the CDN serves, by sha256
    requests: list[tuple[str, str, str]] = field(default_factory=list)  # (server, method, path)
    lock: threading.Lock = field(default_factory=threading.Lock)
    cdn_origin: str = ""
    cdn_status: int = 200  # anything else: the CDN fails every download with it

    def count(self, server: str, fragment: str = "") -> int:
        with self.lock:
            return sum(1 for s, _, path in self.requests if s == server and fragment in path)


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as httpx2 expects of the Hub
    hub: Hub
    server_name = "hub"

    def log_message(self, *args) -> None:  # quiet test output
        pass

    def do_HEAD(self) -> None:
        self.handle_request(head=True)

    def do_GET(self) -> None:
        self.handle_request(head=False)

    def handle_request(self, head: bool) -> None:
        url = urlsplit(self.path)
        with self.hub.lock:
            self.hub.requests.append((self.server_name, self.command, url.path))
        self.route(unquote(url.path), parse_qs(url.query), head)

    def send(self, status: int, body: bytes = b"", head: bool = False, **headers: str) -> None:
        self.send_response(status)
        for name, value in headers.items():
            self.send_header(name.replace("_", "-"), value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if not head:
            self.wfile.write(body)

    def send_json(self, data: object, head: bool = False) -> None:
        self.send(200, json.dumps(data).encode(), head, Content_Type="application/json")

    def error(self, status: int, code: str, message: str, head: bool, **headers: str) -> None:
        body = json.dumps({"error": message}).encode()
        self.send(status, body, head, X_Error_Code=code, X_Error_Message=message, Content_Type="application/json",
                  **headers)

    def refused(self, repo: Repo, head: bool) -> bool:
        """Answer for a repo the caller may not read (True), as the Hub does."""
        if not repo.gated:
            return False
        auth = self.headers.get("Authorization", "")
        if not auth.startswith("Bearer "):
            self.error(401, "GatedRepo", f"Access to model {repo.repo_id} is restricted. You must have access to it "
                       "and be authenticated to access it. Please log in.", head)
            return True
        if auth != f"Bearer {GOOD_TOKEN}":
            self.error(403, "GatedRepo", f"Access to model {repo.repo_id} is restricted and you are not in the "
                       f"authorized list. Visit https://huggingface.co/{repo.repo_id} to ask for access.", head)
            return True
        return False

    def lookup(self, repo_id: str, revision: str, head: bool, gate: bool = True) -> Repo | None:
        repo = self.hub.repos.get(repo_id)
        if repo is None:
            self.error(404, "RepoNotFound", "Repository not found", head)
            return None
        if gate and self.refused(repo, head):
            return None
        if revision not in ("main", repo.commit):
            self.error(404, "RevisionNotFound", f"Invalid rev id: {revision}", head)
            return None
        return repo

    def route(self, path: str, query: dict[str, list[str]], head: bool) -> None:
        parts = path.strip("/").split("/")
        if parts[:2] == ["api", "models"] and len(parts) >= 6 and parts[4] in ("revision", "tree") and not head:
            repo_id, kind, revision = f"{parts[2]}/{parts[3]}", parts[4], parts[5]
            known = self.hub.repos.get(repo_id)
            repo = self.lookup(repo_id, revision, head, gate=known is not None and known.gate == "all")
            if repo is None:
                return
            if kind == "revision":
                self.send_json({
                    "_id": repo.commit[:24], "id": repo.repo_id, "modelId": repo.repo_id, "sha": repo.commit,
                    "private": False, "gated": "manual" if repo.gated else False, "disabled": False,
                    "lastModified": "2026-01-02T03:04:05.000Z", "tags": [], "library_name": "transformers",
                    "siblings": [{"rfilename": name} for name in sorted(repo.files)],
                })
            else:
                self.send_json(self.tree(repo, recursive=query.get("recursive") == ["true"]))
            return
        if len(parts) >= 5 and parts[2] == "resolve":
            repo_id, revision, filename = f"{parts[0]}/{parts[1]}", parts[3], "/".join(parts[4:])
            repo = self.lookup(repo_id, revision, head)
            if repo is None:
                return
            if filename not in repo.files:
                self.error(404, "EntryNotFound", f"{filename} does not exist on \"{revision}\"", head,
                           X_Repo_Commit=repo.commit)
                return
            content, etag = repo.files[filename], repo.etag(filename)
            if filename in repo.lfs:
                self.hub.blobs[etag] = content
                location = f"{self.hub.cdn_origin}/blobs/{etag}?sig={CDN_SIGNATURE}"
                self.send(302, b"", head, Location=location, X_Linked_Etag=f'"{etag}"',
                          X_Linked_Size=str(len(content)), X_Repo_Commit=repo.commit, ETag=f'"{etag}"')
                return
            self.send(200, content, head, ETag=f'"{etag}"', X_Repo_Commit=repo.commit,
                      Content_Type="application/octet-stream")
            return
        self.error(404, "RepoNotFound", "Repository not found", head)

    @staticmethod
    def tree(repo: Repo, recursive: bool) -> list[dict]:
        entries: dict[str, dict] = {}
        for name in sorted(repo.files):
            if not recursive and "/" in name:
                top = name.split("/")[0]
                entries[top] = {"type": "directory", "oid": git_blob_oid(top.encode()), "size": 0, "path": top}
                continue
            for depth in range(1, name.count("/") + 1):
                folder = "/".join(name.split("/")[:depth])
                entries[folder] = {"type": "directory", "oid": git_blob_oid(folder.encode()), "size": 0,
                                   "path": folder}
            content = repo.files[name]
            entry = {"type": "file", "oid": git_blob_oid(content), "size": len(content), "path": name}
            if name in repo.lfs:
                entry["lfs"] = {"oid": hashlib.sha256(content).hexdigest(), "size": len(content), "pointerSize": 134}
            entries[name] = entry
        return list(entries.values())


class CdnHandler(Handler):
    server_name = "cdn"

    def route(self, path: str, query: dict[str, list[str]], head: bool) -> None:
        if "Authorization" in self.headers:  # S3: only one auth mechanism allowed
            self.error(400, "InvalidArgument", "Only one auth mechanism allowed", head)
            return
        if self.hub.cdn_status != 200:
            self.error(self.hub.cdn_status, "ServiceUnavailable", "Please reduce your request rate", head)
            return
        sha = path.rsplit("/", 1)[-1]
        if query.get("sig") != [CDN_SIGNATURE] or sha not in self.hub.blobs:
            self.error(403, "AccessDenied", "Request has expired or signature is invalid", head)
            return
        self.send(200, self.hub.blobs[sha], head, Content_Type="application/octet-stream", ETag=f'"{sha}"')


@contextmanager
def serving(repos: dict[str, Repo]) -> Iterator[tuple[Hub, str]]:
    """The stand-in Hub and its CDN on 127.0.0.1, ports chosen by the kernel: (state, endpoint)."""
    state = Hub(repos)
    handlers = [type("HubHandler", (Handler,), {"hub": state}), type("CdnBlobHandler", (CdnHandler,), {"hub": state})]
    servers = [ThreadingHTTPServer(("127.0.0.1", 0), handler) for handler in handlers]
    for server in servers:
        server.daemon_threads = True
        threading.Thread(target=server.serve_forever, daemon=True).start()
    state.cdn_origin = f"http://127.0.0.1:{servers[1].server_address[1]}"
    try:
        yield state, f"http://127.0.0.1:{servers[0].server_address[1]}"
    finally:
        for server in servers:
            server.shutdown()
            server.server_close()


def repo_from_hub_cache(entry: Path, repo_id: str, lfs: frozenset[str] = frozenset({"model.safetensors"})) -> Repo:
    """The repo a hub-cache entry (models--org--name/) holds at refs/main, to serve it again."""
    commit = (entry / "refs" / "main").read_text().strip()
    snapshot = entry / "snapshots" / commit
    files = {str(path.relative_to(snapshot)): path.read_bytes() for path in sorted(snapshot.rglob("*"))
             if path.is_file()}
    return Repo(repo_id, files, lfs=frozenset(name for name in files if name in lfs), commit=commit)
