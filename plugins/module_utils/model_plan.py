# Copyright (c) sparkfleet.serving contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The model role's one planner: which files of a revision a box keeps and which it fetches.

Used in two places, so that check mode says what a run then does:
- on the controller, by the filter sparkfleet.serving.model_plan (the check tasks fetch the
  listing with ansible.builtin.uri and the box's files with sparkfleet.serving.file_info);
- on the box, by the download program: the role copies this file next to it as
  sparkfleet_model_plan.py (roles/model/files/sparkfleet_model_plan.py is a link to this file).
So it imports the standard library only, and runs on the box's python3.

What a box has is the manifest next to the weights (what an earlier run verified: size, sha256,
git blob id, mtime per file), the journal of a run that was interrupted (files verified since the
manifest), and the size and mtime of each file on disk. A file is
- keep: on disk as verified, and the listing names that very content (same sha256, or for a small
  Hugging Face file without one the same git blob id or the same commit);
- fetch: missing, or on disk as verified but of another version (an update);
- repair: on disk but not as any run verified it (changed since, or never verified). The program
  reads such a file first and keeps it when its content is the listed one; the plan counts it as
  to fetch (an upper bound), and says so.

Listings, as the hubs answer them (all normalized by normalize_listing):
- Hugging Face, GET /api/models/{repo}/tree/{commit}?recursive=true: a list of
  {"type": "file"|"directory", "path", "size", "oid" (git blob sha1), "lfs": {"oid" (sha256), "size"}}
  (huggingface_hub 2.4.0, hf_api.py, RepoFile);
- Hugging Face, GET /api/models/{repo}/revision/{rev}?blobs=true: {"sha", "siblings": [{"rfilename", "size",
  "blobId", "lfs": {"sha256", "size"}}]} (hf_api.py:966-986, ModelInfo with files_metadata=True);
- ModelScope, GET /api/v1/models/{repo}/repo/files?Revision=...&Recursive=true: {"Data": {"Files":
  [{"Path", "Type": "blob"|"tree", "Size", "Sha256"}]}} (modelscope 1.40.0, hub/api.py, get_model_files);
- the manifest's own "files" (a pinned commit the manifest records needs no hub request).
"""

from __future__ import annotations

import fnmatch
import json
import math
from typing import Any

MANIFEST = "sparkfleet-manifest.json"
SUMS = "SHA256SUMS"
# Files the download program writes next to the weights: not part of the repository.
OWN_FILES = (MANIFEST, SUMS)
# Where the program stages files, and the journal of the files a run verified and placed.
STAGING = ".sparkfleet-staging"
JOURNAL = "verified.jsonl"
# Two mtimes this close are the same one (JSON round trips of a float).
MTIME_TOLERANCE = 0.001
UNITS = ("B", "KiB", "MiB", "GiB", "TiB")
WEIGHTS_SUFFIX = ".safetensors"


def human_bytes(count: float | int | None) -> str:
    """1536 -> '1.5 KiB'; None -> '?'."""
    if count is None:
        return "?"
    value = float(count)
    for unit in UNITS:
        if abs(value) < 1024 or unit == UNITS[-1]:
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} {UNITS[-1]}"  # pragma: no cover - the loop always returns


def human_seconds(seconds: float | int | None) -> str:
    """3725 -> '1h02m05s'; None or not finite -> '?'."""
    if seconds is None or not math.isfinite(float(seconds)):
        return "?"
    total = round(float(seconds))
    hours, rest = divmod(total, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes:02d}m{secs:02d}s"
    if minutes:
        return f"{minutes}m{secs:02d}s"
    return f"{secs}s"


def _file(path: Any, size: Any, sha256: Any, git_sha1: Any) -> dict:
    """One listed file; the git blob id only where it is the file's own (not an LFS pointer's)."""
    return {"path": str(path), "size": int(size or 0), "sha256": sha256 or None,
            "git_sha1": None if sha256 else (git_sha1 or None)}


def _entries(listing: Any) -> list:
    if isinstance(listing, dict):
        if isinstance(listing.get("siblings"), list):
            return listing["siblings"]
        data = listing.get("Data") if isinstance(listing.get("Data"), dict) else listing
        entries = data.get("Files")
    else:
        entries = listing
    if not isinstance(entries, list):
        raise ValueError("the hub's file listing is neither a Hugging Face tree (a list) or model info (siblings) "
                         "nor a ModelScope answer with Data.Files")
    return entries


def _normalize_entry(entry: Any) -> dict | None:
    if not isinstance(entry, dict):
        raise ValueError(f"unexpected entry in the hub's file listing: {entry!r}")
    lfs = entry.get("lfs") if isinstance(entry.get("lfs"), dict) else {}
    if "Path" in entry:  # ModelScope
        if entry.get("Type", "blob") != "blob":
            return None
        return _file(entry["Path"], entry.get("Size"), entry.get("Sha256"), None)
    if "rfilename" in entry:  # Hugging Face model info with blobs=true
        return _file(entry["rfilename"], entry.get("size") or lfs.get("size"), lfs.get("sha256"), entry.get("blobId"))
    if "path" in entry:  # Hugging Face tree, or the manifest's own entries
        if entry.get("type", "file") != "file":
            return None
        return _file(entry["path"], entry.get("size") or lfs.get("size"), lfs.get("oid") or entry.get("sha256"),
                     entry.get("git_sha1") or entry.get("oid"))
    raise ValueError(f"a file entry without a path in the hub's file listing: {entry!r}")


def normalize_listing(listing: Any) -> list[dict]:
    """Any listing above -> [{"path", "size", "sha256", "git_sha1"}] (None where the hub gives none), files only."""
    files = [f for f in map(_normalize_entry, _entries(listing)) if f is not None]
    return sorted(files, key=lambda f: f["path"])


def _pattern(pattern: str) -> str:
    # huggingface_hub's filter_repo_objects reads "dir/" as "dir/*" (utils/_paths.py:144-146, 180-184).
    return pattern + "*" if pattern.endswith("/") else pattern


def selected(path: str, include: list[str] | None, exclude: list[str] | None) -> bool:
    """huggingface_hub's allow/ignore patterns: fnmatch on the path, "dir/" meaning "dir/*" (utils/_paths.py)."""
    if path in OWN_FILES:
        return False
    if include and not any(fnmatch.fnmatch(path, _pattern(p)) for p in include):
        return False
    return not any(fnmatch.fnmatch(path, _pattern(p)) for p in exclude or [])


def select(files: list[dict], include: list[str] | None, exclude: list[str] | None) -> list[dict]:
    return [f for f in files if selected(f["path"], include, exclude)]


def covers(manifest: Any, include: list[str] | None, exclude: list[str] | None) -> bool:
    """Whether a manifest lists every file of its commit that include/exclude select: it was
    written for no selection (every file) or for this one. Older manifests, without the
    selection they were written for, cover nothing: the hub is asked once, and the next run
    writes the selection down."""
    if not isinstance(manifest, dict):
        return False
    selection = (manifest.get("include"), manifest.get("exclude"))
    return selection in (([], []), (list(include or []), list(exclude or [])))


def parse_journal(text: str | None) -> list[dict]:
    """The journal: one JSON object per line; a line cut by a kill is skipped."""
    entries = []
    for line in (text or "").splitlines():
        try:
            item = json.loads(line)
        except ValueError:
            continue
        if isinstance(item, dict) and "path" in item:
            entries.append(item)
    return entries


def known_entries(manifest: Any, journal: list[dict] | None = None) -> dict[str, dict]:
    """path -> {size, sha256, git_sha1?, mtime, commit}: what earlier runs verified (the journal is newer)."""
    known: dict[str, dict] = {}
    if isinstance(manifest, dict) and isinstance(manifest.get("files"), list):
        for item in manifest["files"]:
            if isinstance(item, dict) and "path" in item:
                known[item["path"]] = {**item, "commit": manifest.get("commit")}
    for item in journal or []:
        known[item["path"]] = item
    return known


def disk_files(found: Any, local_dir: str) -> dict[str, dict]:
    """file_info's (or ansible.builtin.find's) files -> {path relative to local_dir: {"size", "mtime"}}."""
    prefix = local_dir.rstrip("/") + "/"
    result = {}
    for item in found or []:
        path = str(item.get("path", ""))
        if path.startswith(prefix):
            result[path[len(prefix):]] = {"size": int(item.get("size", -1)), "mtime": float(item.get("mtime", 0))}
    return result


def same_content(remote: dict, entry: dict, commit: str) -> bool:
    """Whether a verified entry is the listed file: same size and sha256, or for a small Hugging Face file
    (listed by git blob id only) the same blob id or the same commit."""
    if entry.get("size") != remote["size"]:
        return False
    if remote.get("sha256"):
        return entry.get("sha256") == remote["sha256"]
    if remote.get("git_sha1") and entry.get("git_sha1"):
        return entry["git_sha1"] == remote["git_sha1"]
    return bool(commit) and entry.get("commit") == commit


def untouched(entry: dict | None, on_disk: dict | None) -> bool:
    """The file on disk is the one a run verified: same size, same mtime."""
    if not entry or not on_disk:
        return False
    same_mtime = abs(on_disk["mtime"] - float(entry.get("mtime", -1))) <= MTIME_TOLERANCE
    return on_disk["size"] == entry.get("size") and same_mtime


def file_action(remote: dict, entry: dict | None, on_disk: dict | None, commit: str) -> str:
    """keep | fetch | repair (see the module's docstring); the one decision the check and the program share."""
    if on_disk is None:
        return "fetch"
    if untouched(entry, on_disk):
        return "keep" if same_content(remote, entry or {}, commit) else "fetch"
    return "repair"


def decide(files: list[dict], commit: str, known: dict[str, dict], present: dict[str, dict]) -> list[dict]:
    """Each selected listed file with its action."""
    return [{**f, "action": file_action(f, known.get(f["path"]), present.get(f["path"]), commit)} for f in files]


def plan(listing: Any, commit: str, box: dict | None = None) -> dict:
    """The download plan of one box: every selected file with its action, the totals and the disk verdict.

    box: manifest (parsed), journal (its text), found (file_info's tree), local_dir, include, exclude,
    free_bytes (None: not checked), margin_bytes.
    """
    box = box or {}
    known = known_entries(box.get("manifest"), parse_journal(box.get("journal")))
    present = disk_files(box.get("found"), str(box.get("local_dir") or ""))
    files = decide(select(normalize_listing(listing), box.get("include"), box.get("exclude")), commit, known, present)
    free = box.get("free_bytes")
    return totals(files, commit, None if free in (None, "") else int(free), int(box.get("margin_bytes") or 0))


def totals(files: list[dict], commit: str, free_bytes: int | None, margin_bytes: int) -> dict:
    to_fetch = [f for f in files if f["action"] != "keep"]
    bytes_to_fetch = sum(f["size"] for f in to_fetch)
    need = bytes_to_fetch + (margin_bytes if to_fetch else 0)
    return {
        "commit": commit,
        "files": files,
        "files_total": len(files),
        "files_to_fetch": len(to_fetch),
        "file_sizes": [{"path": f["path"], "size": f["size"]} for f in files],
        "bytes_total": sum(f["size"] for f in files),
        "bytes_to_fetch": bytes_to_fetch,
        "weights_bytes": sum(f["size"] for f in files if f["path"].endswith(WEIGHTS_SUFFIX)),
        "free_bytes": free_bytes,
        "needed_bytes": need,
        "enough_disk": free_bytes is None or not to_fetch or free_bytes >= need,
        "complete": not to_fetch,
        "summary": summary(files, to_fetch, bytes_to_fetch, free_bytes, need),
    }


def summary(files: list[dict], to_fetch: list[dict], bytes_to_fetch: int, free_bytes: int | None,
            need: int) -> str:
    total = sum(f["size"] for f in files)
    if not to_fetch:
        return f"complete: {len(files)} files, {human_bytes(total)}, nothing to download"
    repairs = sum(1 for f in to_fetch if f["action"] == "repair")
    text = (f"would download {len(to_fetch)} of {len(files)} files, {human_bytes(bytes_to_fetch)} "
            f"({bytes_to_fetch} bytes) of {human_bytes(total)}")
    if repairs:
        text += (f", {repairs} of them on disk but not as verified (read first: kept if their content is the "
                 "listed one)")
    if free_bytes is not None:
        text += f"; {human_bytes(free_bytes)} free, {human_bytes(need)} needed with the margin"
    return text


def progress_line(host: str, state: dict, elapsed: float) -> str:
    """One progress line for the person watching ansible-playbook."""
    phase = state.get("phase") or "starting"
    done, total = state.get("bytes_done"), state.get("bytes_total")
    percent = f"{100.0 * done / total:.1f}%" if isinstance(done, int) and total else "?%"
    rate = state.get("rate_bps")
    speed = f"{human_bytes(rate)}/s" if rate is not None else "?/s"
    line = (f"model: {host}: {phase} {human_bytes(done)} / {human_bytes(total)} ({percent}), "
            f"{speed}, ETA {human_seconds(state.get('eta_seconds'))}, "
            f"files {state.get('files_done', '?')}/{state.get('files_total', '?')}, {human_seconds(elapsed)} elapsed")
    retry = state.get("last_retry")
    if state.get("retries") and isinstance(retry, dict):
        # Transient hub failures the program retried: the person watching sees them as they happen.
        line += f", {state['retries']} retried ({retry.get('what', '?')}: {retry.get('why', '?')})"
    return line
