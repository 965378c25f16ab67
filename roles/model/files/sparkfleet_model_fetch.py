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

Which files to keep and which to fetch is decided by the role's one planner,
sparkfleet_model_plan.py (the collection's plugins/module_utils/model_plan.py, copied next to this
program), the same code that plans check mode on the controller.

A killed run (SIGKILL, power loss) loses at most the bytes in flight: every file placed is recorded
at once in a journal in the staging directory, which the next run trusts like the manifest. The
Hugging Face client names its partials per process (file_download.py:1996-2004) and never resumes
them itself; adopt_partial() moves a weight file's partial to `<path>.part` and HuggingFaceSource
continues it with Range through the client's own http_get, so a resumed file costs only its
missing bytes. ModelScope's client resumes its `<file>.incomplete` with Range, and seed mode
resumes its `.part` files with Range when the server honours it (the stdlib's http.server does
not: then the file restarts); resumed bytes are hashed with the rest.

Every request has a connect and read timeout (--api-timeout, the role's model_api_timeout, which
the check tasks use too), and a transient failure (HTTP 5xx/408/429, a connection refused or
reset, a timeout) is retried --retries times with exponential backoff and jitter, each retry
written to the state file (the role's progress line shows it); only then the run fails, with
HubUnreachable naming the endpoint, the request and the attempts.

Exit 0 on success, 1 on failure; the state file (--state) and the last stderr line say why.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import functools
import hashlib
import json
import math
import os
import random
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
from typing import Any, TypeVar

# The planner the role copies next to this program (the collection's module_utils/model_plan.py).
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import sparkfleet_model_plan as planner

MANIFEST = planner.MANIFEST
SUMS = planner.SUMS
STAGING = planner.STAGING
# Files verified and moved into place by a run that did not finish: the next run trusts them by
# size+mtime like manifest entries, so an interrupted download loses only the files in flight.
JOURNAL = planner.JOURNAL
# The manifest keys that describe the copy in place (the others say where it came from, and when).
IDENTITY = ("format", "source", "repo", "revision", "commit", "include", "exclude", "files")
COMMIT_RE = re.compile(r"^[0-9a-f]{40}$")
CHUNK = 8 * 1024 * 1024
STATE_INTERVAL = 1.0  # seconds between state file rewrites (the interface promises at most 2 s)
WORKERS = 4  # files downloaded at once; huggingface_hub's snapshot_download uses 8
DEFAULT_MARGIN = 1024**3  # free space kept beyond the bytes still to fetch
API_TIMEOUT = 30.0  # seconds: connect and read timeout of every request (--api-timeout)
RETRIES = 2  # transient failures retried per request (--retries)
BACKOFF_BASE = 1.0  # seconds before the first retry; doubled per retry, up to BACKOFF_CAP, with jitter
BACKOFF_CAP = 30.0
T = TypeVar("T")

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
    "NotWritable",  # the target directory is read-only or not writable
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


def remote_files(listing: Any) -> tuple[RemoteFile, ...]:
    """A hub listing (or the manifest's files), normalized by the planner."""
    return tuple(
        RemoteFile(safe_relpath(f["path"]), f["size"], f["sha256"], f["git_sha1"])
        for f in planner.normalize_listing(listing)
    )


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
    try:
        return planner.parse_journal((local_dir / STAGING / JOURNAL).read_text())
    except OSError:
        return []


def entry_for(path: Path, rel: str, hashes: Hashes, commit: str) -> dict[str, Any]:
    return {
        "path": rel,
        "size": hashes.size,
        "sha256": hashes.sha256,
        "git_sha1": hashes.git_sha1,
        "mtime": path.stat().st_mtime,
        "commit": commit,
    }


def manifest_body(
    listing: Listing, entries: list[dict[str, Any]], selection: dict[str, list[str]] | None = None
) -> dict[str, Any]:
    """The manifest: what is in place, and the include/exclude it was selected with (so that a later
    check knows whether the manifest lists every file of its commit). The git blob id is kept: it is
    how Hugging Face lists a small file, so a moved branch keeps the small files it did not change."""
    return {
        "format": 1,
        "source": listing.source,
        "endpoint": listing.endpoint,
        "repo": listing.repo,
        "revision": listing.revision,
        "commit": listing.commit,
        "include": list((selection or {}).get("include") or []),
        "exclude": list((selection or {}).get("exclude") or []),
        "copied_from": listing.copied_from,
        "written_at": None,
        "files": [{k: e.get(k) for k in ("path", "size", "sha256", "git_sha1", "mtime")} for e in entries],
    }


def write_manifest(
    local_dir: Path,
    listing: Listing,
    entries: list[dict[str, Any]],
    selection: dict[str, list[str]] | None = None,
) -> bool:
    """Write manifest + SHA256SUMS when what they describe changed; True if it did.

    Where the bytes came from (endpoint, copied_from) is not compared: a copy taken from a seed and
    checked later against the hub is still the same copy, and a re-run must report no change."""
    body = manifest_body(listing, sorted(entries, key=lambda e: e["path"]), selection)
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
    bytes_downloaded: int = 0  # bytes received over the network by this run (never counts a resumed partial)
    retries: int = 0  # transient failures retried so far
    last_retry: dict[str, Any] | None = None  # the latest: what, why, attempt, wait
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
        """Bytes of `path` arrived. Negative: the client rewound the file (a server ignored Range and sends
        it again from 0); the bytes on disk drop, the bytes received stay received."""
        with self.lock:
            self.inflight[path] = max(0, self.inflight.get(path, 0) + count)
            self.bytes_downloaded += max(0, count)

    def retrying(self, what: str, why: str, attempt: int, wait: float) -> None:
        with self.lock:
            self.retries += 1
            self.last_retry = {"what": what, "why": why, "attempt": attempt, "wait": round(wait, 1)}

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
                "retries": self.retries,
                "last_retry": self.last_retry,
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


@dataclass(frozen=True)
class Patience:
    """How long one request may wait, and how often a transient failure is tried again."""

    timeout: float = API_TIMEOUT
    retries: int = RETRIES


def backoff(attempt: int) -> float:
    """Seconds before retry `attempt` (1, 2, ...): exponential, capped, with jitter, so that the boxes of a
    fleet that met the same outage do not come back at the same instant ("full jitter" halved:
    https://aws.amazon.com/blogs/architecture/exponential-backoff-and-jitter/)."""
    ceiling = min(BACKOFF_CAP, BACKOFF_BASE * 2 ** (attempt - 1))
    return random.uniform(ceiling / 2, ceiling)


def transient_cause(error: BaseException | None, classify: Callable[[BaseException], str | None]) -> str | None:
    """The first error in the chain of causes that `classify` calls transient, described; None if none is."""
    seen = 0
    while error is not None and seen < 10:
        why = classify(error)
        if why:
            return why
        error = error.__cause__ or error.__context__
        seen += 1
    return None


class Source:
    """Where bytes come from: list the revision, then put one file's bytes into staging."""

    name = ""

    def __init__(  # noqa: PLR0913 - what every source is made of
        self,
        endpoint: str,
        repo: str,
        revision: str,
        token: str | None,
        state: State,
        *,
        patience: Patience | None = None,
    ) -> None:
        self.endpoint = endpoint.rstrip("/")
        self.repo = repo
        self.revision = revision
        self.token = token
        self.state = state
        self.patience = patience or Patience()

    def listing(self) -> Listing:
        raise NotImplementedError

    def fetch(self, remote: RemoteFile, commit: str, staging: Path) -> Path:
        """Download `remote` under `staging` and return the staged file (not yet verified)."""
        raise NotImplementedError

    def map_error(self, error: BaseException) -> FetchError | None:
        return None

    def transient(self, error: BaseException) -> str | None:
        """Why `error` is worth another try (a 5xx, a reset, a timeout), or None when it is not."""
        return None

    def retried(self, call: Callable[[], T], what: str, path: str | None = None) -> T:
        """call(), again after a transient failure, at most patience.retries more times; then HubUnreachable
        naming the endpoint, the request and what was tried."""
        attempt = 0
        while True:
            try:
                return call()
            except FetchError:
                raise
            except Exception as error:
                why = transient_cause(error, self.transient)
                if why is None:
                    raise
                if attempt >= self.patience.retries:
                    raise unreachable_error(
                        self.endpoint,
                        f"{what} failed {attempt + 1} times (timeout {self.patience.timeout:g} s per attempt, "
                        f"{self.patience.retries} retries with backoff), the last time with {why}",
                    ) from error
                attempt += 1
                wait = backoff(attempt)
                if path is not None:
                    self.state.discard(path)  # what the retry resumes is counted again as resumed
                self.state.retrying(what, why, attempt, wait)
                print(
                    f"retry {attempt}/{self.patience.retries} of {what} in {wait:.1f} s: {why}",
                    file=sys.stderr,
                    flush=True,
                )
                time.sleep(wait)


def one_get_per_attempt() -> None:
    """huggingface_hub's http_get tries a GET that times out, is refused or is cut 5 more times itself, 1 s
    apart, and counts again from 5 after every chunk it receives (huggingface_hub 2.4.0, file_download.py:343,
    465-483): a CDN that accepts a shard's GET and never answers held each of this program's attempts for
    6 x --api-timeout, and one that sends a chunk now and then, for ever. With _nb_retries 0 its first failure
    is raised at once: this program's retries (Source.retried, each one in the state file, the partial resumed)
    are the only ones, so a stalled CDN ends as a stalled API does."""
    from huggingface_hub import file_download  # noqa: PLC0415

    original = file_download.http_get
    if getattr(original, "sparkfleet_one_get", False):
        return

    @functools.wraps(original)
    def http_get(*args: Any, **kwargs: Any) -> None:
        kwargs["_nb_retries"] = 0
        return original(*args, **kwargs)

    http_get.sparkfleet_one_get = True  # type: ignore[attr-defined]
    # hf_hub_download and resume() look the name up in the module when they call it.
    file_download.http_get = http_get


class HuggingFaceSource(Source):
    name = "huggingface"

    def listing(self) -> Listing:
        # Imported here, after set_client_env(): the client reads its endpoint at import time.
        from huggingface_hub import HfApi  # noqa: PLC0415

        api = HfApi(endpoint=self.endpoint, token=self.token or False)
        # One request: GET /api/models/{repo}/revision/{rev}?blobs=true gives the commit ("sha") and every
        # file with its size, git blob id and LFS sha256 (hf_api.py:3201-3214, siblings at :966-986).
        # model_info takes a timeout and has no retry loop of its own, unlike list_repo_tree
        # (utils/_pagination.py:41, http_backoff: 5 retries), so that self.retried() is the only one.
        info = self.retried(
            lambda: api.model_info(
                self.repo, revision=self.revision, files_metadata=True, timeout=self.patience.timeout
            ),
            f"GET {self.endpoint}/api/models/{self.repo}/revision/{self.revision}",
        )
        if not info.sha:
            raise FetchError("RevisionNotFound", f"{self.endpoint} named no commit for revision {self.revision!r}")
        siblings = [
            {
                "rfilename": f.rfilename,
                "size": f.size,
                "blobId": f.blob_id,
                "lfs": {"sha256": f.lfs.sha256} if f.lfs else None,
            }
            for f in info.siblings or []
        ]
        return Listing(
            info.sha, remote_files({"siblings": siblings}), self.name, self.repo, self.revision, self.endpoint
        )

    def fetch(self, remote: RemoteFile, commit: str, staging: Path) -> Path:
        from huggingface_hub import hf_hub_download  # noqa: PLC0415

        one_get_per_attempt()
        ByteCounter.state = self.state
        adopt_partial(staging, remote)  # what an earlier attempt of this run (or a killed run) received
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

    def transient(self, error: BaseException) -> str | None:
        import httpx2  # noqa: PLC0415 - huggingface_hub 2.4.0's HTTP library, present only in the venv
        from huggingface_hub import errors  # noqa: PLC0415

        if isinstance(error, errors.HfHubHTTPError) and error.response is not None:
            status = error.response.status_code
            return f"HTTP {status}" if status >= 500 or status in (408, 429) else None
        if isinstance(error, httpx2.TransportError):  # timeouts, refused or reset connections, cut bodies
            return f"{type(error).__name__}: {error}".rstrip(": ")
        return None

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
    # path -> bytes of the client's `.incomplete` partial when the download of that file began: the
    # client reports them through update() before it resumes (_download.py:1872-1876), and they
    # were received earlier (by a killed run, or by this run's failed attempt), not now.
    on_disk: dict[str, int] = {}  # noqa: RUF012 - class-level, set by the source before each file

    def __init__(self, filename: str, file_size: int) -> None:
        self.path = filename
        self.pending = self.on_disk.get(filename, 0)

    def update(self, size: int) -> None:
        if self.state is None or not size:
            return
        size = int(size)
        if size > 0 and self.pending:
            resumed = min(size, self.pending)
            self.pending -= resumed
            size -= resumed
        if size:
            self.state.received(self.path, size)

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
        where = f"GET {self.endpoint}/api/v1/models/{self.repo}"
        try:
            raw = self.retried(
                lambda: api.legacy.list_repo_files(self.repo, "model", revision=self.revision, recursive=True),
                f"{where}/repo/files?Revision={self.revision}",
            )
        except ms.NotExistError as error:
            # One answer for a missing repo and a missing revision: ask which.
            if self.retried(lambda: api.repo_exists(self.repo, "model"), where):
                raise revision_error(self.endpoint, self.repo, self.revision) from error
            raise repo_error(self.endpoint, self.repo, bool(self.token)) from error
        blobs = [item for item in raw if (item.get("Type") or "blob") != "tree"]
        files = remote_files({"Data": {"Files": blobs}})
        return Listing(ms_commit(self.revision, blobs), files, self.name, self.repo, self.revision, self.endpoint)

    def fetch(self, remote: RemoteFile, commit: str, staging: Path) -> Path:
        ProgressCounter.state = self.state
        partial = staging / f"{remote.path}.incomplete"  # modelscope_hub _download.py:343-345
        have = partial.stat().st_size if partial.is_file() else 0
        ProgressCounter.on_disk[remote.path] = have if 0 < have <= remote.size else 0
        if ProgressCounter.on_disk[remote.path]:
            self.state.resumed(remote.path, have)
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

    def transient(self, error: BaseException) -> str | None:
        """modelscope_hub's classes for what passes (errors.py:263-332); its requests errors otherwise."""
        import modelscope_hub as ms  # noqa: PLC0415
        import requests  # noqa: PLC0415 - modelscope_hub's HTTP library, present only in the venv

        if isinstance(error, ms.ServerError | ms.NetworkError | ms.RateLimitError):
            return f"{type(error).__name__}: {error}"
        if isinstance(error, requests.ConnectionError | requests.Timeout):
            return f"{type(error).__name__}: {error}"
        status = getattr(error, "status_code", None)
        if isinstance(status, int) and (status >= 500 or status in (408, 429)):
            return f"HTTP {status}"
        return None

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
            return urllib.request.urlopen(
                urllib.request.Request(url, headers=headers or {}), timeout=self.patience.timeout
            )
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
        return Listing(
            seed["commit"],
            remote_files(seed["files"]),
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
    """The manifest itself, when it already holds the pinned commit asked for and every file this run
    selects (it was written with the same include/exclude, or with none): no hub request at all."""
    if not manifest or args.verify != "quick" or manifest.get("commit") != args.revision:
        return None
    if not COMMIT_RE.match(args.revision) or not planner.covers(manifest, args.include, args.exclude):
        return None
    return Listing(
        manifest["commit"],
        remote_files(manifest["files"]),
        manifest["source"],
        manifest["repo"],
        manifest["revision"],
        manifest.get("endpoint") or args.endpoint,
        copied_from=manifest.get("copied_from"),
    )


def on_disk(path: Path) -> dict[str, Any] | None:
    """Size and mtime of a regular file, as the check's file_info lists them (a link or a directory: None)."""
    try:
        stat = path.lstat()
    except OSError:
        return None
    if not path.is_file() or path.is_symlink():
        return {"size": -1, "mtime": stat.st_mtime}  # there, but not a file the model can be: repaired
    return {"size": stat.st_size, "mtime": stat.st_mtime}


def as_plan_file(remote: RemoteFile) -> dict[str, Any]:
    return {"path": remote.path, "size": remote.size, "sha256": remote.sha256, "git_sha1": remote.git_sha1}


def check_file(  # noqa: PLR0913 - the facts one check needs
    local_dir: Path,
    remote: RemoteFile,
    entry: dict[str, Any] | None,
    commit: str,
    *,
    full: bool,
    on_chunk: Callable[[int], None] | None = None,
) -> PlanEntry:
    """The planner's decision (keep, fetch or repair: planner.file_action), then what only the box can
    do: a file the planner cannot vouch for by size and mtime (repair), or every file with `full`, is
    read, and kept when its content is the listed one."""
    path = local_dir / remote.path
    disk = on_disk(path)
    action = planner.file_action(as_plan_file(remote), entry, disk, commit)
    if action == "keep" and not full:
        # A small file kept by its commit gets the git blob id the listing names, for the next branch move.
        return PlanEntry(
            remote,
            "keep",
            {**(entry or {}), "path": remote.path, "git_sha1": (entry or {}).get("git_sha1") or remote.git_sha1},
        )
    if disk is None or disk["size"] != remote.size or (action == "fetch" and not full):
        return PlanEntry(remote, action)
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


def adopt_partial(staging: Path, remote: RemoteFile) -> None:
    """Move the Hugging Face client's partial of `remote` to `<path>.part` in staging, where
    HuggingFaceSource.resume() continues it. The client names a partial
    `<hash>.<etag>.<uuid>.incomplete` (_local_folder.py:93-96, file_download.py:2004), and an LFS
    file's etag is its sha256 (X-Linked-Etag), which the listing gives: the largest one is kept.
    Called at the start (a killed run's partials) and before each retry of a file (this run's)."""
    cache = staging / ".cache" / "huggingface" / "download"
    if not remote.sha256 or not cache.is_dir():
        return
    partials = sorted(cache.rglob(f"*.{remote.sha256}.*.incomplete"), key=lambda p: p.stat().st_size)
    target = staging / f"{remote.path}.part"
    have = target.stat().st_size if target.is_file() else 0
    if partials and have < partials[-1].stat().st_size < remote.size:
        target.parent.mkdir(parents=True, exist_ok=True)
        os.replace(partials[-1], target)


def adopt_hf_partials(local_dir: Path, plan: list[PlanEntry]) -> None:
    for item in plan:
        if item.action != "keep":
            adopt_partial(local_dir / STAGING, item.remote)


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
        staged = source.retried(
            lambda: source.fetch(remote, listing.commit, staging), f"GET {remote.path}", path=remote.path
        )
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


def set_client_env(source: str, endpoint: str, timeout: float = API_TIMEOUT) -> None:
    """The clients read these at import time (huggingface_hub constants.py:69, 310-314, 343; modelscope_hub
    config.py:129-133, constants.py:570-760), so they are set before the first import. `timeout` bounds
    each of their requests (connect, and each read of a body); retries are this program's (Source.retried)."""
    seconds = str(max(1, math.ceil(timeout)))  # both clients read whole seconds
    if source == "huggingface":
        # HEAD of each file (etag) and the GET of its body; model_info gets `timeout` itself.
        os.environ["HF_HUB_ETAG_TIMEOUT"] = os.environ["HF_HUB_DOWNLOAD_TIMEOUT"] = seconds
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
        for name in ("API_TIMEOUT", "API_CONNECT_TIMEOUT", "DOWNLOAD_TIMEOUT", "REPO_TREE_PAGE_TIMEOUT_SECONDS"):
            os.environ[f"MODELSCOPE_{name}"] = seconds
        # Its own retry layers off (1 is the least its API layer accepts, constants.py:343): one layer of
        # retries, this program's, each shown in the state file.
        os.environ["MODELSCOPE_API_MAX_RETRIES"] = "1"
        os.environ["MODELSCOPE_DOWNLOAD_MAX_RETRIES"] = "0"


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
    parser.add_argument("--api-timeout", type=float, default=API_TIMEOUT, help="seconds: connect/read timeout")
    parser.add_argument("--retries", type=int, default=RETRIES, help="retries of a request after a transient failure")
    args = parser.parse_args(argv)
    if args.api_timeout <= 0 or args.retries < 0:
        parser.error(f"--api-timeout {args.api_timeout} must be > 0 and --retries {args.retries} >= 0")
    return args


def get_listing(source: Source, args: argparse.Namespace, manifest: dict[str, Any] | None) -> Listing:
    listing = pinned_listing(args, manifest) or source.listing()
    files = tuple(f for f in listing.files if planner.selected(f.path, args.include, args.exclude))
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
    patience = Patience(args.api_timeout, args.retries)
    source = SOURCES[args.source](
        args.endpoint, args.repo, args.revision, read_token(args.source), state, patience=patience
    )
    manifest = load_manifest(local_dir, args.source, args.repo)
    try:
        listing = get_listing(source, args, manifest)
        state.commit = listing.commit
        state.bytes_total = sum(f.size for f in listing.files)
        state.files_total = len(listing.files)
        state.phase = "checking"
        known = planner.known_entries(manifest, load_journal(local_dir))
        plan = make_plan(local_dir, listing, known, args.verify == "full", state)
        to_fetch = sum(p.remote.size for p in plan if p.action != "keep")
        if args.plan:
            print(json.dumps(plan_output(listing, plan, free_bytes(local_dir), args.disk_margin_bytes)))
            return 0
        check_disk(local_dir, to_fetch, args.disk_margin_bytes)
        if to_fetch:
            check_writable(local_dir)
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
        selection = {"include": args.include, "exclude": args.exclude}
        state.changed = write_manifest(local_dir, listing, kept, selection) or state.changed
        shutil.rmtree(local_dir / STAGING, ignore_errors=True)
        state.phase = "done"
        return 0
    except FetchError:
        tidy_failed(local_dir)
        raise
    except Exception as error:
        tidy_failed(local_dir)
        mapped = source.map_error(error) or disk_error(error, local_dir)
        if mapped is None:
            mapped = FetchError("Unexpected", f"{type(error).__name__}: {error}")
        raise mapped from error


def tidy_failed(local_dir: Path) -> None:
    """After a failure keep only what the next run can use: verified files, the journal, resumable partials."""
    shutil.rmtree(local_dir / STAGING / ".cache", ignore_errors=True)


def disk_error(error: BaseException, local_dir: Path) -> FetchError | None:
    if isinstance(error, OSError) and error.errno == errno.ENOSPC:
        return FetchError("DiskFull", f"the disk filled up while writing: {error}. Free space or move model_local_dir.")
    if isinstance(error, OSError) and error.errno in (errno.EROFS, errno.EACCES, errno.EPERM):
        return not_writable(local_dir, error)
    return None


def not_writable(local_dir: Path, error: OSError) -> FetchError:
    what = "is on a read-only filesystem" if error.errno == errno.EROFS else "is not writable for this program"
    return FetchError(
        "NotWritable",
        f"{local_dir} {what} ({errno.errorcode.get(error.errno or 0, '?')}: {error.strerror} on {error.filename}), "
        "so no file could be placed there. Set model_local_dir to a writable directory, or make this one writable "
        "(a read-only mount: remount it read-write; permissions: the download runs as root, so look for a "
        "read-only bind mount, an immutable attribute (lsattr) or a network filesystem that maps root).",
    )


def check_writable(local_dir: Path) -> None:
    """Before the first byte is fetched: the staging directory can be made and written in."""
    probe = local_dir / STAGING / f".probe.{os.getpid()}"
    try:
        probe.parent.mkdir(parents=True, exist_ok=True)
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as error:
        if error.errno in (errno.EROFS, errno.EACCES, errno.EPERM):
            raise not_writable(local_dir, error) from error
        raise


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
        f"{snap['retries']} retries, changed={snap['changed']}"
    )


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    set_client_env(args.source, args.endpoint, args.api_timeout)
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
