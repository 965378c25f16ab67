"""ModelScope routes of the stand-in hub: the legacy `/api/v1` surface that modelscope 1.40.0
downloads through. modelscope 1.40.0 delegates its hub client to modelscope-hub 0.5.1
(modelscope/hub/snapshot_download.py imports modelscope_hub.compat.snapshot_download); the
file:line references below are in modelscope_hub 0.5.1 unless said otherwise.

A download (`modelscope download --model X --local_dir D`, `snapshot_download`) makes:
- GET /api/v1/models/{repo}/repo/files?Revision=R&Recursive=True[&Root=P] (_legacy_api.py:505-528):
  the listing, `{"Data": {"Files": [...]}}`, each entry's Path/Type/Size/Sha256 read by
  _download.py:1235-1247;
- GET /api/v1/models/{repo}/repo?Revision=R&FilePath=F per file (_legacy_api.py:1156-1166,
  1224-1249), redirects followed by `requests`; Range `bytes=N-` to resume (_download.py:1890-1892);
- GET /api/v1/repos/internalAccelerationInfo, a 0.2 s region probe whose failure is ignored
  (_download.py:672-700): not served, as outside Alibaba Cloud.
Revisions are used as given (branch, tag or commit): the client resolves nothing itself
(_download.py:1171). get_model / get_valid_revision read GET /api/v1/models/{repo}
(_legacy_api.py:395-403, after /openapi/v1 answers 404: api.py:1021-1025) and
GET /api/v1/models/{repo}/revisions (`Data.RevisionMap.Branches|Tags[].Revision`,
_legacy_api.py:907-917).

Errors: the client picks the exception class from the HTTP status (errors.py:470-484: 401
AuthenticationError, 403 PermissionDeniedError, 404 NotExistError) and the message from the
body's `Message` (errors.py:608-613); the body is the legacy envelope
`{"Code", "Message", "RequestId", "Success": false}`.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

from hubcore import HubError, cdn_url, commit_files, resolve_revision

# Texts the real server sends, as modelscope_hub 0.5.1 errors.py:562-575 translates them.
MODEL_MISSING = "模型不存在"  # -> "Model does not exist."
NOT_LOGGED_IN = "用户未登录"  # -> "User not logged in."
# The text of business code 10010103009 (errors.py:498).
BAD_TOKEN = "AccessToken is invalid or expired"


def envelope(data: Any) -> dict[str, Any]:
    return {"Code": 200, "Data": data, "Message": "success", "RequestId": uuid.uuid4().hex, "Success": True}


def ms_error(status: int, message: str) -> HubError:
    body = {"Code": status, "Message": message, "RequestId": uuid.uuid4().hex, "Success": False}
    return HubError(status, None, message, body=body)


def epoch(date: str) -> int:
    return int(time.mktime(time.strptime(date[:19], "%Y-%m-%dT%H:%M:%S")))


def route(handler: Any, parts: list[str]) -> None:
    """parts: the path after /api/v1/."""
    if len(parts) < 3 or parts[0] != "models":
        raise ms_error(404, "Not Found")
    repo_id = f"{parts[1]}/{parts[2]}"
    state = handler.state
    repo = state.repos.get(repo_id)
    if repo is None:
        raise ms_error(404, MODEL_MISSING)
    rest = parts[3:]
    query = {k: v[0] for k, v in handler.query.items()}
    if not rest:
        return handler.send_json(envelope(model_info(repo_id, repo)))
    if rest == ["revisions"]:
        return handler.send_json(envelope(revisions(repo)))
    commit = commit_for(repo, query.get("Revision") or "master")
    files = commit_files(repo, commit)
    if rest == ["repo", "files"]:
        check_ms_token(handler, repo, content=False)
        recursive = query.get("Recursive", "False").lower() == "true"
        return handler.send_json(envelope({"Files": listing(repo, commit, files, query.get("Root") or "", recursive)}))
    if rest == ["repo"]:
        check_ms_token(handler, repo, content=True)
        return send_repo_file(handler, files, query.get("FilePath") or "")
    raise ms_error(404, "Not Found")


def commit_for(repo: dict[str, Any], revision: str) -> str:
    try:
        return resolve_revision(repo, revision)
    except HubError:
        raise ms_error(404, f"Revision {revision} does not exist") from None


def check_ms_token(handler: Any, repo: dict[str, Any], *, content: bool) -> None:
    """The token comes as `Authorization: Bearer` and as the `m_session_id` cookie
    (_legacy_api.py:199-226); a wrong one is refused, a gated repo's files need one."""
    state = handler.state
    token = None
    auth = handler.headers.get("Authorization") or ""
    if auth.lower().startswith("bearer "):
        token = auth[7:].strip()
    for cookie in (handler.headers.get("Cookie") or "").split(";"):
        pair = cookie.strip().partition("=")
        if pair[0] == "m_session_id" and token is None:
            token = pair[2]
    if token is not None and token != state.token:
        raise ms_error(401, BAD_TOKEN)
    if content and (repo["gated"] or state.faults.require_token) and token is None:
        raise ms_error(401, NOT_LOGGED_IN)


def model_info(repo_id: str, repo: dict[str, Any]) -> dict[str, Any]:
    """The legacy keys api.py:406-422 maps (Path is the owner; Visibility 5 is public)."""
    owner, name = repo_id.split("/", 1)
    first, last = repo["commits"][repo["history"][0]], repo["commits"][repo["history"][-1]]
    return {"Id": abs(hash(repo_id)) % 10**6, "Name": name, "Path": owner, "Visibility": 5,
            "Downloads": 0, "Likes": 0, "CreatedAt": epoch(first["date"]), "UpdatedAt": epoch(last["date"]),
            "Tags": [], "gated": repo["gated"]}


def revisions(repo: dict[str, Any]) -> dict[str, Any]:
    def detail(name: str, commit: str) -> dict[str, Any]:
        meta = repo["commits"][commit]
        return {"Revision": name, "CommitId": commit, "CreatedAt": epoch(meta["date"]), "Message": meta["title"]}
    refs = repo["refs"]
    # ModelScope's default branch is master; `main` is the Hugging Face name.
    return {"RevisionMap": {
        "Branches": [detail(n, c) for n, c in refs["branches"].items() if n == "master"],
        "Tags": [detail(n, c) for n, c in refs["tags"].items()],
    }}


def listing(repo: dict[str, Any], commit: str, files: dict[str, dict[str, Any]], root: str,
            recursive: bool) -> list[dict[str, Any]]:
    meta_commit = repo["commits"][commit]
    prefix = root.strip("/")
    base = f"{prefix}/" if prefix else ""
    out: list[dict[str, Any]] = []
    folders: set[str] = set()
    for path, meta in sorted(files.items()):
        if not path.startswith(base):
            continue
        rest = path[len(base):]
        if "/" in rest and not recursive:
            folders.add(base + rest.split("/", 1)[0])
            continue
        out.append({
            "Name": path.rsplit("/", 1)[-1], "Path": path, "Type": "blob", "Size": meta["size"],
            "Sha256": meta["sha256"], "IsLFS": meta["lfs"], "Id": meta["blob_id"], "Mode": "33188",
            "Revision": commit, "CommitMessage": meta_commit["title"], "CommittedDate": epoch(meta_commit["date"]),
        })
    out += [{"Name": f.rsplit("/", 1)[-1], "Path": f, "Type": "tree", "Size": 0, "Revision": commit}
            for f in sorted(folders)]
    return out


def send_repo_file(handler: Any, files: dict[str, dict[str, Any]], path: str) -> None:
    meta = files.get(path)
    if meta is None:
        raise ms_error(404, f"File {path} does not exist")
    if meta["lfs"]:
        # LFS objects are redirected to object storage; the CDN answers with the object's
        # SHA-256 in X-Linked-ETag (_download.py:1914-1917) and honours Range.
        location = cdn_url(handler.state, meta["sha256"], path.rsplit("/", 1)[-1])
        handler.extra_headers["Location"] = location
        return handler.send_bytes(b"", "text/plain; charset=utf-8", 302)
    # Files served without a redirect ignore Range entirely (_download.py:1928-1931).
    return handler.send_file(meta, weight=False, honour_range=False)
