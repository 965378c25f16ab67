"""Repositories, revisions, tokens and fault switches: what the Hugging Face and ModelScope
routes of the stand-in hub share."""

from __future__ import annotations

import hashlib
import hmac
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar
from urllib.parse import quote

URL_LIFETIME = 3600


class HubError(Exception):
    """An error the Hub reports with a status, `X-Error-Code` and `X-Error-Message`
    (read by huggingface_hub 2.4.0 utils/_http.py:871-872)."""

    def __init__(self, status: int, code: str | None, message: str, commit: str | None = None,
                 body: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.status, self.code, self.message, self.commit = status, code, message, commit
        self.body = body  # a ModelScope-shaped body replaces the Hugging Face one


@dataclass
class Faults:
    """The fault switches (POST /_standin/faults). The transient ones model what a WAN and a busy hub do
    now and then: an API that accepts the connection and never answers, a one-off 503 from the API or
    from the CDN (CloudFront and the Hub's load balancer answer 503 when a backend is away), a
    connection reset in the middle of a file."""

    throttle_bps: int | None = None
    cut_after_bytes: int | None = None
    corrupt: bool = False
    require_token: bool = False
    # Every API request (/api/...) waits this long before its first byte: a stalled API.
    stall_api_seconds: int | None = None
    # The next N API requests answer 503 (then the API answers again).
    api_503_count: int | None = None
    # The first GET of each file's body (small files and weights, HF and ModelScope, resolve and CDN)
    # answers 503; the next GET of the same file is served.
    file_503_once: bool = False
    # The first transfer of each weight file is cut (connection closed) after N body bytes; the next is whole.
    cut_once_after_bytes: int | None = None
    # Every GET of a weight file's body (HF resolve and CDN, ModelScope) is accepted and waits this long
    # before its first byte: a stalled CDN edge.
    stall_file_seconds: int | None = None
    # What the one-off faults already hit (sha256 of the file): not a switch, not in the answers.
    _hit: dict[str, set[str]] = field(default_factory=dict, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    KINDS: ClassVar[dict[str, type]] = {
        "throttle_bps": int, "cut_after_bytes": int, "corrupt": bool, "require_token": bool,
        "stall_api_seconds": int, "api_503_count": int, "file_503_once": bool, "cut_once_after_bytes": int,
        "stall_file_seconds": int, "reset": bool,
    }

    def switches(self) -> dict[str, Any]:
        return {key: getattr(self, key) for key in self.KINDS if key != "reset"}

    def update(self, body: dict[str, Any]) -> None:
        """Applies a POST /_standin/faults body; a typo or a wrong type is refused, not ignored."""
        kinds = self.KINDS
        unknown = sorted(set(body) - set(kinds))
        if unknown:
            raise ValueError(f"unknown fault switch(es) {unknown}: expected {sorted(kinds)}")
        for key, value in body.items():
            # bool is an int in Python: refuse `true` where a number is expected.
            wrong = not isinstance(value, kinds[key]) or (kinds[key] is int and isinstance(value, bool))
            if value is not None and wrong:
                raise ValueError(f"{key}: expected {kinds[key].__name__} or null, got {value!r}")
        with self._lock:
            if body.get("reset"):
                for key, kind in kinds.items():
                    if key != "reset":
                        setattr(self, key, False if kind is bool else None)
                self._hit.clear()
            for key, value in body.items():
                if key != "reset":
                    setattr(self, key, bool(value) if kinds[key] is bool else value)

    def take_api_503(self) -> bool:
        """True for each of the next api_503_count API requests."""
        with self._lock:
            if not self.api_503_count:
                return False
            self.api_503_count -= 1
            return True

    def first_time(self, fault: str, sha256: str) -> bool:
        """True the first time `fault` meets the file `sha256` (then never again until a reset)."""
        with self._lock:
            hit = self._hit.setdefault(fault, set())
            if sha256 in hit:
                return False
            hit.add(sha256)
            return True


@dataclass
class State:
    repos: dict[str, Any]
    blobs: Path
    token: str
    cdn_base: str
    wheelhouse: Path | None
    secret: bytes
    faults: Faults = field(default_factory=Faults)
    log: list[dict[str, Any]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def record(self, entry: dict[str, Any]) -> None:
        with self.lock:
            self.log.append(entry)


# ---------------------------------------------------------------- repository look-ups

def find_repo(state: State, repo_id: str) -> dict[str, Any]:
    repo = state.repos.get(repo_id)
    if repo is None:
        # The real Hub answers a missing repo as it answers a private one (utils/_http.py:939-944).
        raise HubError(401, "RepoNotFound", "Repository not found")
    return repo


def resolve_revision(repo: dict[str, Any], revision: str) -> str:
    refs = repo["refs"]
    commit = refs["branches"].get(revision) or refs["tags"].get(revision)
    if commit is None and revision in repo["commits"]:
        commit = revision
    if commit is None:
        raise HubError(404, "RevisionNotFound", f"Invalid rev id: {revision}")
    return commit


def bearer(headers: Any) -> str | None:
    value = headers.get("Authorization") or ""
    return value[7:].strip() if value.lower().startswith("bearer ") else None


def check_token(state: State, headers: Any, repo_id: str, repo: dict[str, Any], *, content: bool) -> None:
    """Invalid tokens are refused everywhere; gated repos refuse their files (content=True) only:
    metadata and listings of a gated repo stay public on the real Hub."""
    token = bearer(headers)
    if token is not None and token != state.token:
        # The text huggingface_hub 2.4.0 utils/_http.py:935 tells apart from a missing repo.
        raise HubError(401, None, "Invalid credentials in Authorization header")
    if content and (repo["gated"] or state.faults.require_token) and token is None:
        raise HubError(
            401, "GatedRepo",
            f"Access to model {repo_id} is restricted. You must have access to it and be authenticated"
            " to access it. Please log in.",
        )


def commit_files(repo: dict[str, Any], commit: str) -> dict[str, dict[str, Any]]:
    return repo["commits"][commit]["files"]


def cdn_url(state: State, sha256: str, filename: str) -> str:
    """A signed, expiring URL like the Hub's CDN links (path by content hash; the file name only
    in response-content-disposition, which http_get reads for its progress bar, file_download.py:429-436)."""
    expires = int(time.time()) + URL_LIFETIME
    path = f"/repos/{sha256[:2]}/{sha256[2:4]}/{sha256}"
    signature = hmac.new(state.secret, f"{path}:{expires}".encode(), hashlib.sha256).hexdigest()
    disposition = quote(f"attachment; filename*=UTF-8''{filename}; filename=\"{filename}\";", safe="")
    return f"{state.cdn_base}{path}?response-content-disposition={disposition}&Expires={expires}&Signature={signature}"


def check_signature(state: State, path: str, query: dict[str, list[str]]) -> None:
    expires = (query.get("Expires") or ["0"])[0]
    signature = (query.get("Signature") or [""])[0]
    good = hmac.new(state.secret, f"{path}:{expires}".encode(), hashlib.sha256).hexdigest()
    if not expires.isdigit() or int(expires) < time.time() or not hmac.compare_digest(good, signature):
        raise HubError(403, None, "Access denied: the CDN URL is not signed or has expired")
