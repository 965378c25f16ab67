#!/usr/bin/env python
"""STAND-IN model hub for the test bed: the parts of the Hugging Face Hub and ModelScope HTTP APIs
that huggingface_hub 2.4.0 and modelscope 1.40.0 (modelscope-hub 0.5.1) use to download a model,
a CDN for the weight files, a PEP 503 package index, and fault switches. Not a hub.

    python3 hub.py --port 0 --state-dir DIR      # first stdout line: listening on http://127.0.0.1:PORT

Every route, header and error text follows the client code that reads it; the upstream file and
line are cited where each is produced (README.md has the table). Stdlib only: it runs in the
stand-in image and on the test host as is.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import re
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

sys.path.insert(0, str(Path(__file__).resolve().parent))
import generate  # the model generator next to this file
import modelscope_api
from hubcore import HubError, State, cdn_url, check_signature, check_token, commit_files, find_repo, resolve_revision

CHUNK = 64 * 1024
CORRUPT_EVERY = 1024 * 1024  # corrupt mode flips the byte at every multiple of this offset
# Weight files are served through the CDN only; small files are answered by `resolve` itself,
# as on the real Hub (huggingface_hub 2.4.0 file_download.py:1685-1688: size from X-Linked-Size
# for a redirect, Content-Length otherwise).


# ---------------------------------------------------------------- Hugging Face API bodies

def sibling(path: str, meta: dict[str, Any], blobs: bool) -> dict[str, Any]:
    """One entry of `siblings`; with ?blobs=true the fields hf_api.py:968-982 reads."""
    out: dict[str, Any] = {"rfilename": path}
    if blobs:
        out.update(size=meta["size"], blobId=meta["blob_id"])
        if meta["lfs"]:
            out["lfs"] = {"size": meta["size"], "sha256": meta["sha256"], "pointerSize": meta["pointer_size"]}
    return out


def model_info(repo_id: str, repo: dict[str, Any], commit: str, blobs: bool) -> dict[str, Any]:
    """GET /api/models/{repo}/revision/{rev}: the keys ModelInfo reads (hf_api.py:914-1010)."""
    files = commit_files(repo, commit)
    author = repo_id.split("/", maxsplit=1)[0]
    return {
        "_id": hashlib.sha1(repo_id.encode(), usedforsecurity=False).hexdigest()[:24],
        "id": repo_id, "modelId": repo_id, "author": author, "sha": commit,
        "lastModified": repo["commits"][commit]["date"], "createdAt": repo["commits"][repo["history"][0]]["date"],
        "private": False, "disabled": False, "gated": "manual" if repo["gated"] else False,
        "downloads": 0, "likes": 0, "library_name": "transformers", "tags": ["transformers", "safetensors"],
        "siblings": [sibling(path, meta, blobs) for path, meta in sorted(files.items())],
        "usedStorage": sum(meta["size"] for meta in files.values()),
    }


def hf_refs(refs: dict[str, Any]) -> dict[str, Any]:
    """GET /api/models/{repo}/refs (hf_api.py list_repo_refs): `main` only, `master` is ModelScope's."""
    def ref(kind: str, name: str, commit: str) -> dict[str, str]:
        return {"name": name, "ref": f"refs/{kind}/{name}", "targetCommit": commit}
    return {"branches": [ref("heads", n, c) for n, c in refs["branches"].items() if n == "main"],
            "tags": [ref("tags", n, c) for n, c in refs["tags"].items()], "converts": []}


def tree_entry(path: str, meta: dict[str, Any]) -> dict[str, Any]:
    """One entry of GET /api/models/{repo}/tree/{rev}: the keys RepoFile reads (hf_api.py:711-730)."""
    entry: dict[str, Any] = {"type": "file", "oid": meta["blob_id"], "size": meta["size"], "path": path}
    if meta["lfs"]:
        entry["lfs"] = {"oid": meta["sha256"], "size": meta["size"], "pointerSize": meta["pointer_size"]}
    return entry


def git_tree_id(path: str) -> str:
    return hashlib.sha1(f"tree {path}".encode(), usedforsecurity=False).hexdigest()


def tree_listing(files: dict[str, dict[str, Any]], prefix: str, recursive: bool) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    folders: set[str] = set()
    base = f"{prefix}/" if prefix else ""
    for path, meta in sorted(files.items()):
        if not path.startswith(base):
            continue
        rest = path[len(base):]
        if "/" in rest and not recursive:
            folders.add(base + rest.split("/")[0])
            continue
        out.append(tree_entry(path, meta))
    out += [{"type": "directory", "oid": git_tree_id(f), "size": 0, "path": f} for f in sorted(folders)]
    return out


# ---------------------------------------------------------------- the handler

class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as httpx2 and requests expect
    server_version = "sparkfleet-hub-standin"
    state: State  # set on the subclass by make_server

    # ------------------------------------------------------------ plumbing
    def log_message(self, format: str, *args: Any) -> None:
        pass  # the request log (GET /_standin/requests) replaces stderr noise

    def do_GET(self) -> None:
        self.dispatch("GET")

    def do_HEAD(self) -> None:
        self.dispatch("HEAD")

    def do_POST(self) -> None:
        self.dispatch("POST")

    def do_DELETE(self) -> None:
        self.dispatch("DELETE")

    def dispatch(self, method: str) -> None:
        self.method = method
        self.sent = 0
        self.status = 0
        self.extra_headers: dict[str, str] = {}
        split = urlsplit(self.path)
        self.query = parse_qs(split.query)
        self.raw_path = split.path
        # Logged when it starts and updated as bytes go out ("done": false meanwhile), so that
        # a test can see a transfer in flight; admin calls are not logged.
        self.entry: dict[str, Any] | None = None
        if not self.raw_path.startswith("/_standin/"):
            self.entry = {
                "time": time.time(), "method": method, "host": self.headers.get("Host", ""),
                "path": self.path, "status": 0, "bytes": 0, "client": self.client_address[0],
                "range": self.headers.get("Range"), "user_agent": self.headers.get("User-Agent", ""), "done": False,
            }
            self.state.record(self.entry)
        try:
            self.route(method, split.path)
        except HubError as error:
            self.send_error_json(error)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True
        finally:
            if self.entry is not None:
                self.entry.update(status=self.status, bytes=self.sent, done=True)

    def route(self, method: str, path: str) -> None:
        parts = [unquote(p) for p in path.split("/")[1:]]
        if parts[:1] == ["_standin"]:
            return self.admin(method, parts[1:])
        if parts[:1] == ["simple"] or parts[:1] == ["packages"]:
            return self.pypi(parts)
        if parts[:1] == ["repos"] and len(parts) == 4:
            return self.cdn(path, parts[3])
        if parts[:1] == ["api"]:
            self.api_faults(parts[:2] == ["api", "v1"])
        if parts[:2] == ["api", "v1"]:
            return modelscope_api.route(self, parts[2:])
        if parts[:2] == ["api", "models"] and len(parts) >= 4:
            return self.hf_api(parts[2] + "/" + parts[3], parts[4:])
        if len(parts) >= 5 and parts[2] == "resolve":
            return self.hf_resolve(parts[0] + "/" + parts[1], parts[3], "/".join(parts[4:]))
        raise HubError(404, None, "Not Found")

    def send_json(self, body: Any, status: int = 200) -> None:
        data = json.dumps(body).encode()
        self.send_bytes(data, "application/json; charset=utf-8", status)

    def send_bytes(self, data: bytes, content_type: str, status: int = 200) -> None:
        self.start(status, {"Content-Type": content_type, "Content-Length": str(len(data))})
        if self.method != "HEAD":
            self.wfile.write(data)
            self.sent += len(data)

    def start(self, status: int, headers: dict[str, str]) -> None:
        self.status = status
        if self.entry is not None:
            self.entry["status"] = status
        self.send_response(status)
        request_id = hashlib.sha1(f"{time.time_ns()}{self.path}".encode(), usedforsecurity=False).hexdigest()[:20]
        self.send_header("X-Request-Id", f"Root=1-{request_id}")
        for key, value in {**self.extra_headers, **headers}.items():
            self.send_header(key, value)
        self.end_headers()

    def send_error_json(self, error: HubError) -> None:
        # The message goes in X-Error-Message and in the body's "error" key, the two places
        # huggingface_hub 2.4.0 utils/_http.py:1034-1057 reads it from.
        if error.body is not None:
            return self.send_json(error.body, error.status)
        if error.code:
            self.extra_headers["X-Error-Code"] = error.code
        self.extra_headers["X-Error-Message"] = error.message
        if error.commit:
            # On EntryNotFound the client caches the absence under this commit (file_download.py:1774).
            self.extra_headers["X-Repo-Commit"] = error.commit
        self.send_json({"error": error.message}, error.status)

    def read_body(self) -> bytes:
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    # ------------------------------------------------------------ Hugging Face
    def hf_api(self, repo_id: str, rest: list[str]) -> None:
        repo = find_repo(self.state, repo_id)
        check_token(self.state, self.headers, repo_id, repo, content=False)
        blobs = (self.query.get("blobs") or ["false"])[0].lower() == "true"
        if not rest:
            return self.send_json(model_info(repo_id, repo, resolve_revision(repo, "main"), blobs))
        if rest[0] == "revision" and len(rest) >= 2:
            return self.send_json(model_info(repo_id, repo, resolve_revision(repo, "/".join(rest[1:])), blobs))
        if rest[0] == "tree" and len(rest) >= 2:
            # list_repo_tree quotes the revision with safe="" (hf_api.py:4019): one path segment.
            commit = resolve_revision(repo, rest[1])
            files = commit_files(repo, commit)
            prefix = "/".join(rest[2:]).strip("/")
            if prefix and not any(p.startswith(prefix + "/") for p in files):
                raise HubError(404, "EntryNotFound", f"{prefix} does not exist on \"{rest[1]}\"", commit)
            recursive = (self.query.get("recursive") or ["false"])[0].lower() == "true"
            return self.send_json(tree_listing(files, prefix, recursive))
        if rest[0] == "refs":
            return self.send_json(hf_refs(repo["refs"]))
        raise HubError(404, None, "Not Found")

    def hf_resolve(self, repo_id: str, revision: str, filename: str) -> None:
        repo = find_repo(self.state, repo_id)
        commit = resolve_revision(repo, revision)
        check_token(self.state, self.headers, repo_id, repo, content=True)
        meta = commit_files(repo, commit).get(filename)
        if meta is None:
            raise HubError(404, "EntryNotFound", "Entry not found", commit)
        # X-Repo-Commit: required (file_download.py:1790-1797); X-Linked-Etag / ETag, X-Linked-Size /
        # Content-Length: file_download.py:1677-1688.
        self.extra_headers["X-Repo-Commit"] = commit
        self.extra_headers["Accept-Ranges"] = "bytes"
        if meta["lfs"]:
            location = cdn_url(self.state, meta["sha256"], filename.rsplit("/", 1)[-1])
            self.extra_headers.update({
                "X-Linked-Etag": f'"{meta["sha256"]}"', "X-Linked-Size": str(meta["size"]),
                "ETag": f'"{meta["sha256"]}"', "Location": location,
            })
            return self.send_bytes(f"Found. Redirecting to {location}".encode(), "text/plain; charset=utf-8", 302)
        self.extra_headers["ETag"] = f'"{meta["blob_id"]}"'
        return self.send_file(meta, weight=False)

    def cdn(self, path: str, sha256: str) -> None:
        check_signature(self.state, path, self.query)
        meta = self.find_blob(sha256)
        disposition = (self.query.get("response-content-disposition") or [None])[0]
        if disposition:
            self.extra_headers["Content-Disposition"] = disposition
        self.extra_headers["ETag"] = f'"{sha256}"'
        # modelscope_hub 0.5.1 _download.py:1914-1917 takes the object hash from the storage
        # response; huggingface_hub reads X-Linked-Etag on the resolve response instead.
        self.extra_headers["X-Linked-ETag"] = f'"{sha256}"'
        self.send_file(meta, weight=True)

    def find_blob(self, sha256: str) -> dict[str, Any]:
        for repo in self.state.repos.values():
            for commit in repo["commits"].values():
                for meta in commit["files"].values():
                    if meta["sha256"] == sha256:
                        return meta
        raise HubError(404, None, "NoSuchKey")

    # ------------------------------------------------------------ transient faults
    def api_faults(self, modelscope: bool) -> None:
        """A stalled API (the connection is open, no byte comes) and one-off 503s."""
        faults = self.state.faults
        if faults.stall_api_seconds:
            time.sleep(faults.stall_api_seconds)
        if faults.take_api_503():
            raise unavailable(modelscope)

    # ------------------------------------------------------------ file bodies with Range and faults
    def send_file(self, meta: dict[str, Any], weight: bool, honour_range: bool = True) -> None:
        if self.method == "GET" and self.state.faults.file_503_once and self.state.faults.first_time(
                "file_503_once", meta["sha256"]):
            raise unavailable(self.path.startswith("/api/v1/"))
        if self.method == "GET" and weight and self.state.faults.stall_file_seconds:
            time.sleep(self.state.faults.stall_file_seconds)
        size = meta["size"]
        start, end = 0, size - 1
        status = 200
        wanted = self.headers.get("Range") if honour_range else None
        if wanted:
            parsed = parse_range(wanted, size)
            if parsed is None:
                self.extra_headers["Content-Range"] = f"bytes */{size}"
                raise HubError(416, None, "Requested Range Not Satisfiable")
            start, end = parsed
            status = 206
            self.extra_headers["Content-Range"] = f"bytes {start}-{end}/{size}"
        self.extra_headers.setdefault("Accept-Ranges", "bytes")
        self.start(status, {"Content-Type": "application/octet-stream", "Content-Length": str(end - start + 1)})
        if self.method == "HEAD":
            return
        self.stream(self.state.blobs / meta["sha256"], start, end + 1, weight)

    def stream(self, path: Path, start: int, stop: int, weight: bool) -> None:
        faults = self.state.faults
        began = time.monotonic()
        cut_at = faults.cut_after_bytes if weight else None
        if weight and cut_at is None and faults.cut_once_after_bytes is not None and faults.first_time(
                "cut_once_after_bytes", path.name):
            cut_at = faults.cut_once_after_bytes  # this file's first transfer
        with path.open("rb") as source:
            source.seek(start)
            offset = start
            while offset < stop:
                chunk_size = min(CHUNK, stop - offset)
                if weight and faults.throttle_bps:
                    chunk_size = min(chunk_size, max(1024, faults.throttle_bps // 10))
                if cut_at is not None:
                    chunk_size = min(chunk_size, max(cut_at - self.sent, 0))
                    if chunk_size == 0:
                        return self.cut()
                chunk = source.read(chunk_size)
                if weight and faults.corrupt:
                    chunk = corrupt(chunk, offset)
                self.wfile.write(chunk)
                self.sent += len(chunk)
                if self.entry is not None:
                    self.entry["bytes"] = self.sent
                offset += len(chunk)
                if weight and faults.throttle_bps:
                    ahead = self.sent / faults.throttle_bps - (time.monotonic() - began)
                    if ahead > 0:
                        time.sleep(ahead)

    def cut(self) -> None:
        """Close the connection mid-body, as a dropped link would: the client sees fewer bytes than
        Content-Length announced."""
        self.wfile.flush()
        self.close_connection = True
        self.connection.shutdown(2)

    # ------------------------------------------------------------ PEP 503 simple index
    def pypi(self, parts: list[str]) -> None:
        house = self.state.wheelhouse
        if house is None or not house.is_dir():
            raise HubError(404, None, "no wheelhouse configured (--wheelhouse)")
        wheels = sorted(p for p in house.iterdir() if p.suffix in (".whl", ".gz", ".zip"))
        if parts[0] == "packages" and len(parts) == 2:
            match = [w for w in wheels if w.name == parts[1]]
            if not match:
                raise HubError(404, None, "Not Found")
            data = match[0].read_bytes()
            return self.send_bytes(data, "application/octet-stream")
        projects: dict[str, list[Path]] = {}
        for wheel in wheels:
            projects.setdefault(normalize(wheel.name.split("-")[0]), []).append(wheel)
        name = parts[1] if len(parts) > 1 else ""
        if not name:
            links = "".join(f'<a href="/simple/{p}/">{p}</a>\n' for p in sorted(projects))
            return self.send_html(f"<!DOCTYPE html>\n<html><body>\n{links}</body></html>\n")
        if normalize(name) != name and normalize(name) in projects:
            # PEP 503: a non-normalized name redirects to the normalized one.
            self.extra_headers["Location"] = f"/simple/{normalize(name)}/"
            return self.send_bytes(b"", "text/plain", 301)
        if name not in projects:
            raise HubError(404, None, "Not Found")
        links = "".join(
            f'<a href="/packages/{w.name}#sha256={hashlib.sha256(w.read_bytes()).hexdigest()}">{w.name}</a>\n'
            for w in projects[name])
        return self.send_html(f"<!DOCTYPE html>\n<html><body>\n{links}</body></html>\n")

    def send_html(self, text: str) -> None:
        self.send_bytes(text.encode(), "text/html; charset=utf-8")

    # ------------------------------------------------------------ admin API (test bed only)
    def admin(self, method: str, parts: list[str]) -> None:
        what = parts[0] if parts else ""
        if what == "faults" and method == "POST":
            try:
                self.state.faults.update(json.loads(self.read_body() or b"{}"))
            except (ValueError, AttributeError) as error:
                raise HubError(400, None, str(error)) from error
            return self.send_json(self.state.faults.switches())
        if what == "faults" and method == "GET":
            return self.send_json(self.state.faults.switches())
        if what == "requests" and method == "GET":
            with self.state.lock:
                log = [dict(entry) for entry in self.state.log]
            return self.send_json(log)
        if what == "requests" and method == "DELETE":
            with self.state.lock:
                self.state.log.clear()
            return self.send_json([])
        if what == "repos" and method == "GET":
            return self.send_json({"token": self.state.token, "cdn_base": self.state.cdn_base,
                                   "repos": self.state.repos})
        raise HubError(404, None, "Not Found")


def unavailable(modelscope: bool) -> HubError:
    """503 as a hub whose backend is away answers it: the Hub's error body (read by huggingface_hub
    2.4.0 utils/_http.py:1034-1057 into HfHubHTTPError), ModelScope's envelope (modelscope_hub 0.5.1
    errors.py:470-484 makes a 5xx a ServerError)."""
    if modelscope:
        return modelscope_api.ms_error(503, "Service Unavailable")
    return HubError(503, None, "Service Unavailable")


def normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()  # PEP 503 name normalization


def parse_range(header: str, size: int) -> tuple[int, int] | None:
    """`bytes=N-`, `bytes=N-M` or `bytes=-N` (RFC 9110 14.1.2); None when unsatisfiable."""
    match = re.fullmatch(r"bytes=(\d*)-(\d*)", header.strip())
    if not match or match.groups() == ("", ""):
        return None
    first, last = match.groups()
    if first == "":
        start, end = max(size - int(last), 0), size - 1
    else:
        start = int(first)
        end = min(int(last), size - 1) if last else size - 1
    if start >= size or start > end:
        return None
    return start, end


def corrupt(chunk: bytes, offset: int) -> bytes:
    """Flip the byte at every CORRUPT_EVERY boundary (by absolute offset, so that a resumed
    Range request yields the same wrong file); the length never changes."""
    data = bytearray(chunk)
    first = -offset % CORRUPT_EVERY
    for i in range(first, len(data), CORRUPT_EVERY):
        data[i] ^= 0xFF
    return bytes(data)


def make_server(args: argparse.Namespace) -> ThreadingHTTPServer:
    state_dir = Path(args.state_dir)
    generated = generate.generate(state_dir)
    handler = type("BoundHandler", (Handler,), {})
    server = ThreadingHTTPServer((args.bind, args.port), handler)
    server.daemon_threads = True
    port = server.server_address[1]
    cdn_base = (args.cdn_base or f"http://localhost:{port}").rstrip("/")
    handler.state = State(
        repos=generated["repos"], blobs=state_dir / "blobs", token=generated["token"], cdn_base=cdn_base,
        wheelhouse=Path(args.wheelhouse) if args.wheelhouse else None,
        secret=hashlib.sha256(f"{state_dir.resolve()}:{time.time_ns()}".encode()).digest(),
    )
    return server


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    parser.add_argument("--bind", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0: any free port (printed)")
    parser.add_argument("--state-dir", required=True, help="where the generated repositories are kept")
    parser.add_argument("--cdn-base", help="base URL weight files redirect to (default http://localhost:PORT)")
    parser.add_argument("--wheelhouse", help="directory of wheels served as a PEP 503 index at /simple/")
    args = parser.parse_args(argv)
    server = make_server(args)
    host, port = server.server_address[:2]
    print(f"listening on http://{host}:{port}", flush=True)
    with contextlib.suppress(KeyboardInterrupt):
        server.serve_forever(poll_interval=0.2)


if __name__ == "__main__":
    main()
