# Copyright (c) sparkfleet.serving contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Download model weights once, verify every byte, and keep a manifest (sparkfleet.serving.model).

Runs ON THE BOX with the model venv's python (huggingface_hub==2.4.0, modelscope==1.40.0), inside a
transient systemd unit, so a dropped SSH connection does not stop it. The transfer goes through the
official clients (or, in seed mode, plain HTTP from another box's verified copy); the verification
is ours, because the clients do not give the guarantees the role needs:

- huggingface_hub 2.4.0 checks a downloaded body by size only (file_download.py:490-495, the
  "Consistency check failed" size test) and, in local_dir mode, trusts a file whose metadata names
  the pinned commit without reading it (file_download.py:1342-1359).
- huggingface_hub 2.4.0 downloads into `<etag>.<uuid>.incomplete`, a name unique to the process
  (file_download.py:1996-2004), so a killed run's partial file is never resumed and stays behind.

So every file goes to a staging directory, is hashed (sha256 against the listing's `lfs.oid` or
ModelScope's `Sha256`, the git blob sha1 for small Hugging Face files), and only then renamed into
place. The manifest `sparkfleet-manifest.json` and `SHA256SUMS` describe what is in place; a quick
re-run compares size and mtime with the manifest and reads no file and transfers nothing.

A killed run (SIGKILL, power loss) loses only the files in flight: every file placed is recorded
at once in a journal in the staging directory, which the next run trusts like the manifest. With
the Hugging Face source the files in flight (at most WORKERS) start again from 0, as the client
cannot resume across processes; the stale partials are deleted. The client's own Range resume
was not re-implemented here: it would bypass the client for the bytes that matter most, for at
most WORKERS files' worth of transfer. ModelScope's client resumes its `<file>.incomplete` with
Range, and seed mode resumes its `.part` files with Range when the server honours it (the
stdlib's http.server does not: then the file restarts); resumed bytes are hashed with the rest.

Exit 0 on success, 1 on failure; the state file (--state) and the last stderr line say why.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import fnmatch
import functools
import hashlib
import json
import os
import re
import shutil
import signal
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

MANIFEST = "sparkfleet-manifest.json"
SUMS = "SHA256SUMS"
STAGING = ".sparkfleet-staging"
# Files verified and moved into place by a run that did not finish: the next run trusts them by
# size+mtime like manifest entries, so an interrupted download loses only the files in flight.
JOURNAL = "verified.jsonl"
OWN_FILES = frozenset({MANIFEST, SUMS})
# The manifest keys that describe the copy in place (the others say where it came from, and when).
IDENTITY = ("format", "source", "repo", "revision", "commit", "files")
COMMIT_RE = re.compile(r"^[0-9a-f]{40}$")
CHUNK = 8 * 1024 * 1024
STATE_INTERVAL = 1.0  # seconds between state file rewrites (the interface promises at most 2 s)
WORKERS = 4  # files downloaded at once; huggingface_hub's snapshot_download uses 8
DEFAULT_MARGIN = 1024**3  # free space kept beyond the bytes still to fetch
SEED_TIMEOUT = 30  # seconds without a byte from a seed before it counts as unreachable

KINDS = (
    "RepoNotFound",
    "RevisionNotFound",
    "EntryNotFound",
    "GatedRepo",
    "BadToken",
    "HubUnreachable",
    "DiskFull",
    "HashMismatch",
    "SeedUnreachable",
    "Unexpected",  # an error none of the above describes (message: its class and text)
    "Interrupted",  # stopped by SIGTERM
)


class FetchError(Exception):
    """A failure the user can act on: `kind` is one of KINDS, the message says what to do."""

    def __init__(self, kind: str, message: str) -> None:
        if kind not in KINDS:
            raise ValueError(f"unknown error kind {kind!r}")
        super().__init__(message)
        self.kind = kind
        self.message = message


# --------------------------------------------------------------------------- data


@dataclass(frozen=True)
class RemoteFile:
    """One file of the listing: its size and the hashes the listing gives for it."""

    path: str
    size: int
    sha256: str | None = None  # LFS oid (Hugging Face), Sha256 (ModelScope), the seed's manifest
    git_sha1: str | None = None  # git blob id, the only hash Hugging Face lists for small files


@dataclass(frozen=True)
class Listing:
    commit: str
    files: tuple[RemoteFile, ...]
    source: str
    repo: str
    revision: str
    endpoint: str
    copied_from: str | None = None


@dataclass
class PlanEntry:
    remote: RemoteFile
    action: str  # keep | fetch | repair
    entry: dict[str, Any] | None = None  # the verified local entry for `keep`


@dataclass
class Hashes:
    sha256: str
    git_sha1: str
    size: int


def hash_file(path: Path, on_chunk: Callable[[int], None] | None = None) -> Hashes:
    """sha256 and git blob sha1 in one read (git hashes "blob <size>\\0" + content)."""
    size = path.stat().st_size
    sha256 = hashlib.sha256()
    sha1 = hashlib.sha1(f"blob {size}\0".encode())
    with path.open("rb") as handle:
        while block := handle.read(CHUNK):
            sha256.update(block)
            sha1.update(block)
            if on_chunk:
                on_chunk(len(block))
    return Hashes(sha256.hexdigest(), sha1.hexdigest(), size)


def matches(remote: RemoteFile, hashes: Hashes) -> bool:
    if hashes.size != remote.size:
        return False
    if remote.sha256:
        return hashes.sha256 == remote.sha256
    return remote.git_sha1 is not None and hashes.git_sha1 == remote.git_sha1


def selected(path: str, include: list[str], exclude: list[str]) -> bool:
    """fnmatch like huggingface_hub's filter_repo_objects (utils/_paths.py), "dir/" meaning "dir/*"."""

    def norm(pattern: str) -> str:
        return pattern + "*" if pattern.endswith("/") else pattern

    if include and not any(fnmatch.fnmatch(path, norm(p)) for p in include):
        return False
    return not any(fnmatch.fnmatch(path, norm(p)) for p in exclude)


def safe_relpath(path: str) -> str:
    """Refuse listing paths that would escape the model directory (a hostile hub or seed)."""
    parts = Path(path).parts
    if not path or Path(path).is_absolute() or ".." in parts or parts[0] == STAGING:
        raise FetchError("EntryNotFound", f"refusing the listed path {path!r}: it leaves the model directory")
    return path


# --------------------------------------------------------------------------- manifest


def read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def atomic_write(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def load_manifest(local_dir: Path, source: str, repo: str) -> dict[str, Any] | None:
    """The manifest in place, if it describes this repo (another repo's entries prove nothing)."""
    data = read_json(local_dir / MANIFEST)
    if not isinstance(data, dict) or data.get("format") != 1 or data.get("repo") != repo:
        return None
    if source != "seed" and data.get("source") != source:
        return None
    return data


def load_journal(local_dir: Path) -> list[dict[str, Any]]:
    entries = []
    with contextlib.suppress(OSError):
        for line in (local_dir / STAGING / JOURNAL).read_text().splitlines():
            with contextlib.suppress(ValueError):
                entries.append(json.loads(line))
    return entries


def known_entries(manifest: dict[str, Any] | None, journal: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """path -> {size, sha256, git_sha1?, mtime, commit}: what earlier runs verified."""
    known: dict[str, dict[str, Any]] = {}
    if manifest:
        for item in manifest.get("files", []):
            known[item["path"]] = {**item, "commit": manifest.get("commit")}
    for item in journal:  # newer than the manifest
        known[item["path"]] = item
    return known


def entry_for(path: Path, rel: str, hashes: Hashes, commit: str) -> dict[str, Any]:
    return {
        "path": rel,
        "size": hashes.size,
        "sha256": hashes.sha256,
        "git_sha1": hashes.git_sha1,
        "mtime": path.stat().st_mtime,
        "commit": commit,
    }


def manifest_body(listing: Listing, entries: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "format": 1,
        "source": listing.source,
        "endpoint": listing.endpoint,
        "repo": listing.repo,
        "revision": listing.revision,
        "commit": listing.commit,
        "copied_from": listing.copied_from,
        "written_at": None,
        "files": [{k: e[k] for k in ("path", "size", "sha256", "mtime")} for e in entries],
    }


def write_manifest(local_dir: Path, listing: Listing, entries: list[dict[str, Any]]) -> bool:
    """Write manifest + SHA256SUMS when what they describe changed; True if it did.

    Where the bytes came from (endpoint, copied_from) is not compared: a copy taken from a seed and
    checked later against the hub is still the same copy, and a re-run must report no change."""
    body = manifest_body(listing, sorted(entries, key=lambda e: e["path"]))
    old = read_json(local_dir / MANIFEST)
    if isinstance(old, dict) and (local_dir / SUMS).is_file() and all(old.get(k) == body[k] for k in IDENTITY):
        return False
    body["written_at"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    # sha256sum's text format: "<hash>  <name>" (two spaces: the second is the text-mode flag).
    atomic_write(local_dir / SUMS, "".join(f"{f['sha256']}  {f['path']}\n" for f in body["files"]))
    atomic_write(local_dir / MANIFEST, json.dumps(body, indent=1) + "\n")
    return True


# --------------------------------------------------------------------------- state + progress


@dataclass
class State:
    """The state file: rewritten atomically by a background thread while the run lasts."""

    path: Path | None
    phase: str = "listing"
    commit: str | None = None
    bytes_total: int = 0
    bytes_verified: int = 0  # bytes of files in place and verified
    files_total: int = 0
    files_done: int = 0
    bytes_downloaded: int = 0
    fetched: list[str] = field(default_factory=list)
    repaired: list[str] = field(default_factory=list)
    changed: bool = False
    error: dict[str, str] | None = None
    inflight: dict[str, int] = field(default_factory=dict)
    checked_files: int = 0  # bytes of the files already checked (phase "checking")
    checked_bytes: int = 0  # the same plus the bytes hashed of the file being checked
    samples: list[tuple[float, int]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def received(self, path: str, count: int) -> None:
        """Bytes of `path` arrived (negative: the client rewound a file a server sent again from 0)."""
        with self.lock:
            self.inflight[path] = max(0, self.inflight.get(path, 0) + count)
            self.bytes_downloaded += count

    def checked(self, count: int, whole_file: bool = False) -> None:
        """Bytes read while checking; a whole file's size once it is decided (read or not)."""
        with self.lock:
            if whole_file:
                self.checked_files += count
                self.checked_bytes = self.checked_files
            else:
                self.checked_bytes += count

    def resumed(self, path: str, count: int) -> None:
        """Bytes of a partial from an earlier run: done, but not downloaded by this run."""
        with self.lock:
            self.inflight[path] = count

    def discard(self, path: str) -> None:
        with self.lock:
            self.inflight.pop(path, None)

    def placed(self, path: str, size: int, repaired: bool) -> None:
        with self.lock:
            self.inflight.pop(path, None)
            self.bytes_verified += size
            self.files_done += 1
            (self.repaired if repaired else self.fetched).append(path)
            self.changed = True

    def snapshot(self) -> dict[str, Any]:
        with self.lock:
            now = time.time()
            self.samples = [s for s in self.samples if now - s[0] <= 10.0] + [(now, self.bytes_downloaded)]
            (t0, b0), (t1, b1) = self.samples[0], self.samples[-1]
            rate = (b1 - b0) / (t1 - t0) if t1 - t0 >= 0.5 else 0.0
            if self.phase == "checking":
                done = min(self.bytes_total, self.checked_bytes)
            else:
                done = min(self.bytes_total, self.bytes_verified + sum(self.inflight.values()))
            eta = (self.bytes_total - done) / rate if rate > 0 else None
            return {
                "phase": self.phase,
                "pid": os.getpid(),
                "updated_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now)),
                "commit": self.commit,
                "bytes_total": self.bytes_total,
                "bytes_done": done,
                "files_total": self.files_total,
                "files_done": self.files_done,
                "rate_bps": round(rate),
                "eta_seconds": None if eta is None else round(eta),
                "bytes_downloaded": self.bytes_downloaded,
                "fetched": sorted(self.fetched),
                "repaired": sorted(self.repaired),
                "changed": self.changed,
                "error": self.error,
            }

    def write(self) -> None:
        if self.path is not None:
            atomic_write(self.path, json.dumps(self.snapshot()) + "\n")


@contextlib.contextmanager
def state_writer(state: State) -> Iterator[None]:
    """Rewrite the state file every STATE_INTERVAL seconds until the block ends, then once more."""
    stop = threading.Event()

    def loop() -> None:
        while not stop.wait(STATE_INTERVAL):
            with contextlib.suppress(OSError):
                state.write()

    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()
        state.write()


# Which repo file the current worker thread downloads: the Hugging Face client creates its
# progress bar inside the calling thread (file_download.py:447-456) and names it only by a
# shortened display name, so the thread tells the bar whose bytes it counts.
_CURRENT = threading.local()


class ByteCounter:
    """A `tqdm_class` for huggingface_hub: any callable returning a context manager with update().

    huggingface_hub 2.4.0 instantiates classes that do not subclass its tqdm with the bar's keyword
    arguments only (utils/tqdm.py:336-338) and calls update(n) per chunk, with a negative n when a
    server ignored a Range request (file_download.py:403-415).
    """

    state: State | None = None  # set by the source before downloads start

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.path = getattr(_CURRENT, "path", None)

    def update(self, count: int | float | None = 1) -> None:
        if self.state is not None and self.path is not None and count:
            self.state.received(self.path, int(count))

    def close(self) -> None:
        pass

    def __enter__(self) -> ByteCounter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# --------------------------------------------------------------------------- sources


class Source:
    """Where bytes come from: list the revision, then put one file's bytes into staging."""

    name = ""

    def __init__(self, endpoint: str, repo: str, revision: str, token: str | None, state: State) -> None:
        self.endpoint = endpoint.rstrip("/")
        self.repo = repo
        self.revision = revision
        self.token = token
        self.state = state

    def listing(self) -> Listing:
        raise NotImplementedError

    def fetch(self, remote: RemoteFile, commit: str, staging: Path) -> Path:
        """Download `remote` under `staging` and return the staged file (not yet verified)."""
        raise NotImplementedError

    def map_error(self, error: BaseException) -> FetchError | None:
        return None


class HuggingFaceSource(Source):
    name = "huggingface"

    def listing(self) -> Listing:
        # Imported here, after set_client_env(): the client reads its endpoint at import time.
        from huggingface_hub import HfApi  # noqa: PLC0415
        from huggingface_hub.hf_api import RepoFile  # noqa: PLC0415

        api = HfApi(endpoint=self.endpoint, token=self.token or False)
        # GET /api/models/{repo}/revision/{rev} -> "sha" (hf_api.py:3202-3212), then the recursive
        # tree at that commit, whose entries carry lfs.oid = sha256 and the git blob id (hf_api.py:713-717).
        commit = api.model_info(self.repo, revision=self.revision).sha
        if not commit:
            raise FetchError("RevisionNotFound", f"{self.endpoint} named no commit for revision {self.revision!r}")
        files = []
        for item in api.list_repo_tree(self.repo, revision=commit, recursive=True):
            if isinstance(item, RepoFile):
                sha256 = item.lfs.sha256 if item.lfs else None
                files.append(RemoteFile(safe_relpath(item.path), item.size, sha256, item.blob_id))
        return Listing(commit, tuple(files), self.name, self.repo, self.revision, self.endpoint)

    def fetch(self, remote: RemoteFile, commit: str, staging: Path) -> Path:
        from huggingface_hub import hf_hub_download  # noqa: PLC0415

        ByteCounter.state = self.state
        part = staging / f"{remote.path}.part"
        if part.is_file() and 0 < part.stat().st_size < remote.size:
            return self.resume(remote, commit, part)
        part.unlink(missing_ok=True)
        # local_dir mode writes plain files (no symlinks into a blob store); the revision is the
        # resolved commit, so the bytes cannot change under us between listing and download.
        return Path(
            hf_hub_download(
                self.repo,
                remote.path,
                revision=commit,
                local_dir=staging,
                token=self.token or False,
                endpoint=self.endpoint,
                tqdm_class=ByteCounter,
            )
        )

    def resume(self, remote: RemoteFile, commit: str, part: Path) -> Path:
        """Continue a partial a killed run left, with the client's own transfer function.

        huggingface_hub >= 1.18 never resumes across processes (its partial names carry a uuid,
        file_download.py:1996-2004), but its http_get resumes within a process by Range and copes
        with a server that ignores it (file_download.py:334-415). The partial is adopted by
        adopt_hf_partials() and its bytes are hashed with the rest before the file is used.
        """
        from huggingface_hub import get_hf_file_metadata, hf_hub_url  # noqa: PLC0415
        from huggingface_hub.file_download import http_get  # noqa: PLC0415
        from huggingface_hub.utils import build_hf_headers  # noqa: PLC0415

        url = hf_hub_url(self.repo, remote.path, revision=commit, endpoint=self.endpoint)
        token = self.token or False
        meta = get_hf_file_metadata(url, token=token, endpoint=self.endpoint)  # HEAD: the CDN location
        headers = build_hf_headers(token=token)
        if urllib.parse.urlsplit(meta.location).netloc != urllib.parse.urlsplit(url).netloc:
            headers.pop("authorization", None)  # as the client does for a CDN (file_download.py:1818-1822)
        have = part.stat().st_size
        self.state.resumed(remote.path, have)
        with part.open("r+b") as handle:
            handle.seek(have)
            http_get(
                meta.location,
                handle,
                resume_size=have,
                headers=headers,
                expected_size=remote.size,
                displayed_filename=remote.path,
                tqdm_class=ByteCounter,
            )
        return part

    def map_error(self, error: BaseException | None) -> FetchError | None:
        # The client wraps some errors (file_download.py:1932-1966): the cause may be the telling one.
        while error is not None:
            mapped = map_hf_error(error, self.endpoint, self.repo, self.revision, bool(self.token))
            if mapped is not None:
                return mapped
            error = error.__cause__
        return None


def map_hf_error(  # noqa: PLR0911 - one return per exception class reads best
    error: BaseException, endpoint: str, repo: str, revision: str, has_token: bool
) -> FetchError | None:
    """huggingface_hub's exception classes (errors.py) -> our kinds, with what to do."""
    import httpx2  # noqa: PLC0415 - huggingface_hub 2.4.0's HTTP library, present only in the venv
    from huggingface_hub import errors  # noqa: PLC0415

    # Order matters: GatedRepoError subclasses RepositoryNotFoundError (errors.py:343), and
    # hf_raise_for_status reports a 401 on a repo API URL as RepositoryNotFoundError (utils/_http.py:933-953).
    if isinstance(error, errors.GatedRepoError):
        return gated_error(endpoint, repo, has_token)
    if isinstance(error, errors.RevisionNotFoundError):
        return revision_error(endpoint, repo, revision)
    if isinstance(error, errors.RemoteEntryNotFoundError):
        return FetchError("EntryNotFound", f"{endpoint} lists a file of {repo} it then does not serve: {error}")
    if isinstance(error, errors.RepositoryNotFoundError):
        return repo_error(endpoint, repo, has_token)
    if isinstance(error, errors.HfHubHTTPError):
        status = error.response.status_code if error.response is not None else 0
        if status in (401, 403):
            # Without a token a 401 means private, gated or missing; the client types it only
            # for https endpoints (utils/_http.py:175-181, 933-953).
            return token_error(endpoint, repo, status) if has_token else repo_error(endpoint, repo, False)
        if status >= 500 or status in (408, 429):
            return unreachable_error(endpoint, f"it answered HTTP {status}")
    if isinstance(error, errors.LocalEntryNotFoundError | errors.OfflineModeIsEnabled | errors.FileMetadataError):
        # hf_hub_download turns a failed HEAD into LocalEntryNotFoundError (file_download.py:1948-1966).
        return unreachable_error(endpoint, str(error.__cause__ or error).splitlines()[0])
    if isinstance(error, httpx2.TransportError):
        return unreachable_error(endpoint, f"{type(error).__name__}: {error}")
    return None


def repo_error(endpoint: str, repo: str, has_token: bool) -> FetchError:
    hint = "" if has_token else " A private repo also answers this way without a token: set model_token."
    return FetchError(
        "RepoNotFound",
        f"{endpoint} has no model repo {repo!r}. Check model_repo_id (owner/name, as on the hub's page).{hint}",
    )


def revision_error(endpoint: str, repo: str, revision: str) -> FetchError:
    return FetchError(
        "RevisionNotFound",
        f"{repo} on {endpoint} has no revision {revision!r}. Set model_revision to a branch, tag or full "
        "commit hash the repo has (its 'Files and versions' page lists them).",
    )


def gated_error(endpoint: str, repo: str, has_token: bool) -> FetchError:
    what = "the token in model_token has no access to it" if has_token else "no token was given (model_token)"
    return FetchError(
        "GatedRepo",
        f"{repo} on {endpoint} is gated and {what}. Accept its terms on the hub's page with your account, then "
        "set model_token (Ansible Vault) to a read token of that account.",
    )


def token_error(endpoint: str, repo: str, status: int) -> FetchError:
    return FetchError(
        "BadToken",
        f"{endpoint} refused the token for {repo} (HTTP {status}): it is invalid, expired or lacks read access. "
        "Set model_token to a valid read token, or leave it empty for a public repo.",
    )


def unreachable_error(endpoint: str, why: str) -> FetchError:
    return FetchError(
        "HubUnreachable",
        f"cannot reach the model hub at {endpoint}: {why}. Check the box's network, proxy and DNS, or set "
        "model_endpoint to a mirror the box can reach.",
    )


class ProgressCounter:
    """A modelscope_hub ProgressCallback: instantiated per file as cls(filename, file_size), update(n)
    per chunk, end() when done (modelscope_hub 0.5.1 _download.py:108-124). Not a subclass, so the
    program imports nothing of the client before set_client_env()."""

    state: State | None = None

    def __init__(self, filename: str, file_size: int) -> None:
        self.path = filename

    def update(self, size: int) -> None:
        if self.state is not None and size:
            self.state.received(self.path, int(size))

    def end(self) -> None:
        pass


class ModelScopeSource(Source):
    """modelscope 1.40.0 delegates its hub calls to modelscope-hub (modelscope/hub/snapshot_download.py:1-13);
    its HubApi is used directly, because modelscope's compat wrappers turn the typed errors into a
    plain requests HTTPError (modelscope_hub 0.5.1 compat/file_download.py:82-83)."""

    name = "modelscope"

    @functools.cached_property
    def hub_api(self) -> Any:
        """One client for the run, shared by the worker threads as modelscope's own snapshot download
        shares its DownloadManager (_download.py:1257-1267); one per file would repeat its region probe."""
        from modelscope_hub import HubApi  # noqa: PLC0415 - after set_client_env(), see HuggingFaceSource

        # token="" means "no token" and keeps a stored credential out (modelscope_hub config.py:151-161).
        return HubApi(endpoint=self.endpoint, token=self.token or "")

    def listing(self) -> Listing:
        import modelscope_hub as ms  # noqa: PLC0415

        api = self.hub_api
        try:
            raw = api.legacy.list_repo_files(self.repo, "model", revision=self.revision, recursive=True)
        except ms.NotExistError as error:
            # One answer for a missing repo and a missing revision: ask which.
            if api.repo_exists(self.repo, "model"):
                raise revision_error(self.endpoint, self.repo, self.revision) from error
            raise repo_error(self.endpoint, self.repo, bool(self.token)) from error
        blobs = [item for item in raw if (item.get("Type") or "blob") != "tree"]
        files = tuple(RemoteFile(safe_relpath(b["Path"]), int(b["Size"]), b.get("Sha256") or None) for b in blobs)
        return Listing(ms_commit(self.revision, blobs), files, self.name, self.repo, self.revision, self.endpoint)

    def fetch(self, remote: RemoteFile, commit: str, staging: Path) -> Path:
        ProgressCounter.state = self.state
        # The client resumes its own `<file>.incomplete` with Range (_download.py:343-345, 1892),
        # so those partials are kept across runs (clean_leftovers). Its own sha256 check is left off:
        # ours follows, and one wrong body must not cost the client's backoff retries.
        path = self.hub_api.downloader.download_file(
            repo_id=self.repo,
            repo_type="model",
            file_path=remote.path,
            # The revision as given, as modelscope's own download sends it (_download.py:1171-1186): the
            # commit is derived from the listing, and a branch that moves meanwhile fails the hash check.
            revision=self.revision,
            local_dir=staging,
            file_size=remote.size,
            progress_callbacks=[ProgressCounter],
        )
        return Path(path)

    def map_error(self, error: BaseException | None) -> FetchError | None:
        while error is not None:
            mapped = self.map_one(error)
            if mapped is not None:
                return mapped
            error = error.__cause__
        return None

    def map_one(self, error: BaseException) -> FetchError | None:
        """modelscope_hub's error classes (errors.py:104-441) -> our kinds."""
        import modelscope_hub as ms  # noqa: PLC0415

        if isinstance(error, ms.NotExistError):  # after the listing: a listed file is missing
            return FetchError("EntryNotFound", f"{self.endpoint} lists a file of {self.repo} it does not serve")
        if isinstance(error, ms.AuthenticationError) and self.token:
            return token_error(self.endpoint, self.repo, 401)
        if isinstance(error, ms.AuthenticationError | ms.PermissionDeniedError):
            return gated_error(self.endpoint, self.repo, bool(self.token))
        if isinstance(error, ms.FileIntegrityError):  # the client compared the CDN's X-Linked-ETag
            return FetchError(
                "HashMismatch",
                f"{self.endpoint} kept serving wrong bytes for {self.repo}: {error}. Nothing of it was kept. "
                "Retry later, or set model_endpoint to another mirror.",
            )
        if isinstance(error, ms.ServerError | ms.NetworkError | ms.RateLimitError):
            return unreachable_error(self.endpoint, f"{type(error).__name__}: {error}")
        return None


def ms_commit(revision: str, blobs: list[dict[str, Any]]) -> str:
    """The commit a ModelScope revision names. Its file listing gives each file's last commit as
    `Revision` (with `CommittedDate`) and no head commit: the newest of those is the head commit,
    unless the head commit changed no file (then the revision name is recorded as it is)."""
    if COMMIT_RE.match(revision):
        return revision
    dated = [(b.get("CommittedDate") or 0, b.get("Revision") or "") for b in blobs]
    newest = max(dated, default=(0, ""))[1]
    return newest if COMMIT_RE.match(newest) else revision


class SeedSource(Source):
    """Another box's verified copy, served by `python3 -m http.server`: stdlib only, Range resume."""

    name = "seed"

    def get(self, rel: str, headers: dict[str, str] | None = None) -> Any:
        url = f"{self.endpoint}/{urllib.parse.quote(rel)}"
        try:
            return urllib.request.urlopen(urllib.request.Request(url, headers=headers or {}), timeout=SEED_TIMEOUT)
        except urllib.error.HTTPError as error:
            if error.code == 404 and rel != MANIFEST:
                raise FetchError("EntryNotFound", f"the seed {self.endpoint} does not serve {rel}") from error
            raise seed_error(self.endpoint, f"HTTP {error.code} for {rel}") from error
        except (urllib.error.URLError, OSError) as error:
            raise seed_error(self.endpoint, str(getattr(error, "reason", error))) from error

    def listing(self) -> Listing:
        with self.get(MANIFEST) as response:
            try:
                seed = json.loads(response.read())
            except ValueError as error:
                raise seed_error(self.endpoint, f"its {MANIFEST} is not JSON") from error
        if seed.get("repo") != self.repo or self.revision not in (seed.get("revision"), seed.get("commit")):
            raise seed_error(
                self.endpoint,
                f"it holds {seed.get('repo')}@{seed.get('revision')} ({seed.get('commit')}), "
                f"not {self.repo}@{self.revision}",
            )
        files = tuple(RemoteFile(safe_relpath(f["path"]), int(f["size"]), f["sha256"]) for f in seed["files"])
        return Listing(
            seed["commit"],
            files,
            seed["source"],
            seed["repo"],
            seed["revision"],
            seed.get("endpoint") or "",
            copied_from=self.endpoint,
        )

    def fetch(self, remote: RemoteFile, commit: str, staging: Path) -> Path:
        # A partial from an interrupted run is resumed with Range: its bytes are hashed with the rest
        # before the file is used, so a resumed file is as verified as a fresh one.
        part = staging / f"{remote.path}.part"
        part.parent.mkdir(parents=True, exist_ok=True)
        have = part.stat().st_size if part.exists() else 0
        if have > remote.size:
            part.unlink()
            have = 0
        if have < remote.size:
            headers = {"Range": f"bytes={have}-"} if have else {}
            with self.get(remote.path, headers) as response:
                if have and response.status != 206:  # the server ignored Range: start over
                    have = 0
                if have:
                    self.state.resumed(remote.path, have)
                self.copy_body(response, part, have, remote.path)
        return part

    def copy_body(self, response: Any, part: Path, offset: int, rel: str) -> None:
        with part.open("r+b" if offset else "wb") as out:
            out.seek(offset)
            out.truncate()
            try:
                while block := response.read(1024 * 1024):
                    out.write(block)
                    self.state.received(rel, len(block))
            except OSError as error:
                raise seed_error(self.endpoint, f"the transfer of {rel} broke: {error}") from error


def seed_error(endpoint: str, why: str) -> FetchError:
    return FetchError(
        "SeedUnreachable",
        f"cannot copy from the seed at {endpoint}: {why}. The role falls back to the hub; check the seed box "
        "(model_seed_host) and the LAN between the boxes.",
    )


SOURCES: dict[str, type[Source]] = {
    "huggingface": HuggingFaceSource,
    "modelscope": ModelScopeSource,
    "seed": SeedSource,
}


# --------------------------------------------------------------------------- planning


def pinned_listing(args: argparse.Namespace, manifest: dict[str, Any] | None) -> Listing | None:
    """The manifest itself, when it already holds the pinned commit asked for: no hub request at all."""
    if not manifest or args.verify != "quick" or manifest.get("commit") != args.revision:
        return None
    if not COMMIT_RE.match(args.revision):
        return None
    files = tuple(RemoteFile(f["path"], int(f["size"]), f["sha256"]) for f in manifest["files"])
    return Listing(
        manifest["commit"],
        files,
        manifest["source"],
        manifest["repo"],
        manifest["revision"],
        manifest.get("endpoint") or args.endpoint,
        copied_from=manifest.get("copied_from"),
    )


def trusted(remote: RemoteFile, entry: dict[str, Any] | None, stat: os.stat_result, commit: str) -> bool:
    """Quick verify: the file is the one an earlier run hashed (same size and mtime) and is the listed one."""
    if not entry or entry.get("size") != stat.st_size or entry.get("mtime") != stat.st_mtime:
        return False
    if remote.sha256:
        return entry.get("sha256") == remote.sha256
    # Small Hugging Face files are listed by git blob id only: same commit, or the id recorded.
    return entry.get("commit") == commit or (remote.git_sha1 is not None and entry.get("git_sha1") == remote.git_sha1)


def check_file(  # noqa: PLR0913 - the facts one check needs
    local_dir: Path,
    remote: RemoteFile,
    entry: dict[str, Any] | None,
    commit: str,
    *,
    full: bool,
    on_chunk: Callable[[int], None] | None = None,
) -> PlanEntry:
    """keep (verified, by size+mtime or by hash), fetch (missing, or an older revision's verified
    copy) or repair (anything else: truncated, altered, a symlink)."""
    path = local_dir / remote.path
    try:
        stat = path.lstat()
    except OSError:
        return PlanEntry(remote, "fetch")
    unchanged = bool(entry) and entry.get("size") == stat.st_size and entry.get("mtime") == stat.st_mtime
    if not full and trusted(remote, entry, stat, commit):
        return PlanEntry(remote, "keep", {**entry, "path": remote.path} if entry else None)
    if not full and unchanged and entry and remote.sha256 and entry.get("sha256") != remote.sha256:
        return PlanEntry(remote, "fetch")  # the verified copy of an older revision: an update, not a repair
    if not path.is_file() or path.is_symlink() or stat.st_size != remote.size:
        return PlanEntry(remote, "fetch" if unchanged else "repair")
    hashes = hash_file(path, on_chunk)
    if matches(remote, hashes):
        return PlanEntry(remote, "keep", entry_for(path, remote.path, hashes, commit))
    # Intact as an earlier run verified it, but another revision's content: an update.
    intact = bool(entry) and entry.get("sha256") == hashes.sha256
    return PlanEntry(remote, "fetch" if intact else "repair")


def make_plan(
    local_dir: Path, listing: Listing, known: dict[str, dict[str, Any]], full: bool, state: State | None = None
) -> list[PlanEntry]:
    """Check every listed file; with a state, bytes_done counts the bytes checked (a full verify of
    a large model reads for minutes, and the role shows that progress too)."""
    plan = []
    for remote in listing.files:
        hook = state.checked if state else None
        plan.append(check_file(local_dir, remote, known.get(remote.path), listing.commit, full=full, on_chunk=hook))
        if state:
            state.checked(remote.size, whole_file=True)
    return plan


def free_bytes(local_dir: Path) -> int:
    probe = local_dir
    while not probe.exists():
        probe = probe.parent
    return shutil.disk_usage(probe).free


def plan_output(listing: Listing, plan: list[PlanEntry], free: int, margin: int) -> dict[str, Any]:
    to_fetch = sum(p.remote.size for p in plan if p.action != "keep")
    return {
        "commit": listing.commit,
        "bytes_total": sum(f.size for f in listing.files),
        "bytes_to_fetch": to_fetch,
        "free_bytes": free,
        "enough_disk": to_fetch == 0 or free >= to_fetch + margin,
        "files": [{"path": p.remote.path, "size": p.remote.size, "action": p.action} for p in plan],
    }


def gib(count: int) -> str:
    return f"{count / 1024**3:.2f} GiB"


def check_disk(local_dir: Path, to_fetch: int, margin: int) -> None:
    free = free_bytes(local_dir)
    if to_fetch and free < to_fetch + margin:
        raise FetchError(
            "DiskFull",
            f"{to_fetch} bytes ({gib(to_fetch)}) still to download plus a margin of {margin} bytes ({gib(margin)}) "
            f"need {to_fetch + margin} bytes, but the filesystem of {local_dir} has {free} bytes ({gib(free)}) free. "
            "Free space there, or point model_local_dir at a larger disk (or lower model_disk_margin_bytes).",
        )


# --------------------------------------------------------------------------- cleaning


def adopt_hf_partials(local_dir: Path, plan: list[PlanEntry]) -> None:
    """Move the Hugging Face client's partial of each file still to fetch to `<path>.part` in staging,
    where HuggingFaceSource.resume() continues it. The client names a partial
    `<hash>.<etag>.<uuid>.incomplete` (_local_folder.py:93-96, file_download.py:2004), and an LFS
    file's etag is its sha256 (X-Linked-Etag), which the listing gives: the largest one is kept."""
    staging = local_dir / STAGING
    cache = staging / ".cache" / "huggingface" / "download"
    if not cache.is_dir():
        return
    for item in plan:
        if item.action == "keep" or not item.remote.sha256:
            continue
        partials = sorted(cache.rglob(f"*.{item.remote.sha256}.*.incomplete"), key=lambda p: p.stat().st_size)
        if partials and 0 < partials[-1].stat().st_size < item.remote.size:
            target = staging / f"{item.remote.path}.part"
            target.parent.mkdir(parents=True, exist_ok=True)
            os.replace(partials[-1], target)


def clean_leftovers(local_dir: Path, keep: set[str]) -> None:
    """Remove what a killed run left: partials no run can resume, staged files never verified.

    Kept: `.part` files (seed, and Hugging Face partials adopt_hf_partials() moved there) and
    ModelScope `.incomplete` files of files this run fetches (all resumed with Range), and the
    journal of verified files.
    """
    # Other huggingface_hub partials carry a per-process uuid (file_download.py:1996-2004): never resumed.
    for cache in (local_dir / ".cache" / "huggingface" / "download", local_dir / STAGING / ".cache"):
        for stale in cache.rglob("*.incomplete") if cache.is_dir() else []:
            stale.unlink(missing_ok=True)
    staging = local_dir / STAGING
    if not staging.is_dir():
        return
    shutil.rmtree(staging / ".cache", ignore_errors=True)
    for item in sorted(staging.rglob("*"), reverse=True):
        rel = item.relative_to(staging).as_posix()
        if item.is_dir():
            with contextlib.suppress(OSError):
                item.rmdir()  # only empty ones
        elif rel != JOURNAL and rel not in keep:
            item.unlink(missing_ok=True)


def resumable_names(plan: list[PlanEntry]) -> set[str]:
    names: set[str] = set()
    for p in plan:
        if p.action != "keep":
            names |= {f"{p.remote.path}.part", f"{p.remote.path}.incomplete"}
    return names


# --------------------------------------------------------------------------- downloading


def journal_add(local_dir: Path, entry: dict[str, Any]) -> None:
    with (local_dir / STAGING / JOURNAL).open("a") as handle:
        handle.write(json.dumps(entry) + "\n")
        handle.flush()
        os.fsync(handle.fileno())


def fetch_one(source: Source, listing: Listing, item: PlanEntry, local_dir: Path, state: State) -> dict[str, Any]:
    """Download, hash, move into place. A second wrong body is the hub's fault: HashMismatch."""
    remote = item.remote
    target = local_dir / remote.path
    staging = local_dir / STAGING
    if item.action == "repair":
        # The local copy is known bad: it goes now, so a failure below leaves nothing corrupt in place.
        target.unlink(missing_ok=True)
    _CURRENT.path = remote.path
    for attempt in (1, 2):
        staged = source.fetch(remote, listing.commit, staging)
        hashes = hash_file(staged)
        if matches(remote, hashes):
            break
        staged.unlink(missing_ok=True)
        state.discard(remote.path)
        if attempt == 2:
            want = remote.sha256 or f"git blob {remote.git_sha1}"
            raise FetchError(
                "HashMismatch",
                f"{source.endpoint} served {remote.path} twice with the wrong content: {hashes.size} bytes, "
                f"sha256 {hashes.sha256}, but the listing of commit {listing.commit} says {remote.size} bytes, "
                f"{want}. Nothing of it was kept. The hub or a proxy between it and this box corrupts data: "
                "retry later, or set model_endpoint to another mirror.",
            )
    target.parent.mkdir(parents=True, exist_ok=True)
    os.replace(staged, target)
    entry = entry_for(target, remote.path, hashes, listing.commit)
    journal_add(local_dir, entry)
    state.placed(remote.path, remote.size, item.action == "repair")
    return entry


def download(
    source: Source, listing: Listing, todo: list[PlanEntry], local_dir: Path, state: State
) -> list[dict[str, Any]]:
    (local_dir / STAGING).mkdir(parents=True, exist_ok=True)
    with ThreadPoolExecutor(max_workers=WORKERS) as pool:
        futures = [pool.submit(fetch_one, source, listing, item, local_dir, state) for item in todo]
        try:
            return [future.result() for future in futures]
        except BaseException:
            for future in futures:
                future.cancel()
            raise


# --------------------------------------------------------------------------- main


def read_token(source: str) -> str | None:
    """systemd's LoadCredential first (never in the environment of other processes), then the env."""
    creds = os.environ.get("CREDENTIALS_DIRECTORY")
    if creds and (Path(creds) / "model-token").is_file():
        return (Path(creds) / "model-token").read_text().strip() or None
    name = "MODELSCOPE_API_TOKEN" if source == "modelscope" else "HF_TOKEN"
    return os.environ.get(name) or None


def set_client_env(source: str, endpoint: str) -> None:
    """The clients read these at import time (huggingface_hub constants.py:69, 343; modelscope_hub
    config.py:129-133), so they are set before the first import."""
    if source == "huggingface":
        os.environ["HF_ENDPOINT"] = endpoint.rstrip("/")
        # Plain HTTP even where the hub offers Xet and hf_xet is installed (utils/_runtime.py:157-162):
        # one transfer path, resumable with Range, counted by the tqdm_class.
        os.environ["HF_HUB_DISABLE_XET"] = "1"
        os.environ["HF_HUB_DISABLE_TELEMETRY"] = "1"
        os.environ.pop("HF_HUB_OFFLINE", None)
    elif source == "modelscope":
        os.environ["MODELSCOPE_ENDPOINT"] = endpoint.rstrip("/")
        # Its byte bars are plain tqdm (modelscope_hub _download.py:1960-1967), which reads TQDM_*
        # defaults from the environment: the state file is the progress report, not the journal.
        os.environ["TQDM_DISABLE"] = "1"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source", required=True, choices=["huggingface", "modelscope", "seed"])
    parser.add_argument("--endpoint", required=True, help="hub endpoint, or the seed's http://HOST:PORT")
    parser.add_argument("--repo", required=True)
    parser.add_argument("--revision", required=True)
    parser.add_argument("--local-dir", required=True, type=Path)
    parser.add_argument("--include", action="append", default=[])
    parser.add_argument("--exclude", action="append", default=[])
    parser.add_argument("--verify", choices=["quick", "full"], default="quick")
    parser.add_argument("--state", type=Path)
    parser.add_argument("--plan", action="store_true", help="print what would be fetched, change nothing")
    parser.add_argument("--disk-margin-bytes", type=int, default=DEFAULT_MARGIN)
    return parser.parse_args(argv)


def get_listing(source: Source, args: argparse.Namespace, manifest: dict[str, Any] | None) -> Listing:
    listing = pinned_listing(args, manifest) or source.listing()
    files = tuple(f for f in listing.files if selected(f.path, args.include, args.exclude) and f.path not in OWN_FILES)
    if not files:
        raise FetchError(
            "EntryNotFound",
            f"no file of {args.repo}@{listing.commit} matches include {args.include} / exclude {args.exclude}",
        )
    return Listing(
        listing.commit,
        files,
        listing.source,
        listing.repo,
        listing.revision,
        listing.endpoint,
        listing.copied_from,
    )


def run(args: argparse.Namespace, state: State) -> int:
    local_dir: Path = args.local_dir.resolve()
    source = SOURCES[args.source](args.endpoint, args.repo, args.revision, read_token(args.source), state)
    manifest = load_manifest(local_dir, args.source, args.repo)
    try:
        listing = get_listing(source, args, manifest)
        state.commit = listing.commit
        state.bytes_total = sum(f.size for f in listing.files)
        state.files_total = len(listing.files)
        state.phase = "checking"
        known = known_entries(manifest, load_journal(local_dir))
        plan = make_plan(local_dir, listing, known, args.verify == "full", state)
        to_fetch = sum(p.remote.size for p in plan if p.action != "keep")
        if args.plan:
            print(json.dumps(plan_output(listing, plan, free_bytes(local_dir), args.disk_margin_bytes)))
            return 0
        check_disk(local_dir, to_fetch, args.disk_margin_bytes)
        local_dir.mkdir(parents=True, exist_ok=True)
        adopt_hf_partials(local_dir, plan)
        clean_leftovers(local_dir, resumable_names(plan))
        kept = [p.entry for p in plan if p.action == "keep" and p.entry]
        state.bytes_verified = sum(p.remote.size for p in plan if p.action == "keep")
        state.files_done = sum(1 for p in plan if p.action == "keep")
        todo = [p for p in plan if p.action != "keep"]
        if todo:
            state.phase = "downloading"
            kept += download(source, listing, todo, local_dir, state)
        state.changed = write_manifest(local_dir, listing, kept) or state.changed
        shutil.rmtree(local_dir / STAGING, ignore_errors=True)
        state.phase = "done"
        return 0
    except FetchError:
        tidy_failed(local_dir)
        raise
    except Exception as error:
        tidy_failed(local_dir)
        mapped = source.map_error(error) or disk_error(error)
        if mapped is None:
            mapped = FetchError("Unexpected", f"{type(error).__name__}: {error}")
        raise mapped from error


def tidy_failed(local_dir: Path) -> None:
    """After a failure keep only what the next run can use: verified files, the journal, resumable partials."""
    shutil.rmtree(local_dir / STAGING / ".cache", ignore_errors=True)


def disk_error(error: BaseException) -> FetchError | None:
    if isinstance(error, OSError) and error.errno == errno.ENOSPC:
        return FetchError("DiskFull", f"the disk filled up while writing: {error}. Free space or move model_local_dir.")
    return None


def on_sigterm(state: State) -> None:
    """`systemctl stop`: say so in the state file and end now. Waiting for the worker threads could
    outlast systemd's stop timeout; what they leave is what a kill leaves, cleaned by the next run."""

    def handler(signum: int, frame: object) -> None:
        state.phase = "failed"
        state.error = {"kind": "Interrupted", "message": "stopped by SIGTERM; the next run continues where it was"}
        with contextlib.suppress(OSError):
            state.write()
        print(f"Interrupted: {state.error['message']}", file=sys.stderr, flush=True)
        os._exit(143)

    signal.signal(signal.SIGTERM, handler)


def summary(state: State, seconds: float) -> str:
    snap = state.snapshot()
    return (
        f"done: commit {snap['commit']}, {snap['files_total']} files, {len(snap['fetched'])} fetched, "
        f"{len(snap['repaired'])} repaired, {snap['bytes_downloaded']} bytes downloaded in {seconds:.1f} s, "
        f"changed={snap['changed']}"
    )


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    set_client_env(args.source, args.endpoint)
    state = State(None if args.plan else args.state)
    began = time.monotonic()
    if not args.plan:
        on_sigterm(state)
    with state_writer(state) if not args.plan else contextlib.nullcontext():
        try:
            code = run(args, state)
        except FetchError as error:
            state.phase = "failed"
            state.error = {"kind": error.kind, "message": error.message}
            if args.plan:
                print(json.dumps({"error": state.error}))
            print(f"{error.kind}: {error.message}", file=sys.stderr)
            return 1
    if not args.plan:
        print(summary(state, time.monotonic() - began), flush=True)
    return code


if __name__ == "__main__":
    sys.exit(main())
