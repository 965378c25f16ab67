# Copyright (c) sparkfleet.serving contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""What the model role would download, from the hub's file listing and the box's manifest.

Pure functions (no I/O): the check tasks fetch the listing with ansible.builtin.uri and the
box's files with ansible.builtin.find, and the filter sparkfleet.serving.model_plan calls
plan() on them. The download program on the box decides again for itself; this plan is what
check mode reports and what the disk check counts.

Listings, as the hubs answer them:
- Hugging Face, GET /api/models/{repo}/tree/{commit}?recursive=true: a list of
  {"type": "file"|"directory", "path", "size", "oid" (git blob sha1), "lfs": {"oid" (sha256), "size"}}
  (huggingface_hub 2.4.0, hf_api.py, RepoFile).
- ModelScope, GET /api/v1/models/{repo}/repo/files?Revision=...&Recursive=true: {"Data": {"Files":
  [{"Path", "Type": "blob"|"tree", "Size", "Sha256"}]}} (modelscope 1.40.0, hub/api.py, get_model_files).
"""

from __future__ import annotations

import fnmatch
import math
from typing import Any

# Files the download program writes next to the weights: not part of the repository.
OWN_FILES = ("sparkfleet-manifest.json", "SHA256SUMS")
# Two mtimes this close are the same one (JSON round trips of a float).
MTIME_TOLERANCE = 0.001
UNITS = ("B", "KiB", "MiB", "GiB", "TiB")


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


def normalize_listing(listing: Any) -> list[dict]:
    """Either hub's listing -> [{"path", "size", "sha256" (None when the hub gives none)}], files only."""
    if isinstance(listing, dict):
        data = listing.get("Data") if isinstance(listing.get("Data"), dict) else listing
        entries = data.get("Files")
    else:
        entries = listing
    if not isinstance(entries, list):
        raise ValueError("the hub's file listing is neither a Hugging Face tree (a list) nor a ModelScope "
                         "answer with Data.Files")
    files = []
    for entry in entries:
        if not isinstance(entry, dict):
            raise ValueError(f"unexpected entry in the hub's file listing: {entry!r}")
        if "Path" in entry:
            if entry.get("Type", "blob") != "blob":
                continue
            files.append({"path": str(entry["Path"]), "size": int(entry.get("Size") or 0),
                          "sha256": entry.get("Sha256") or None})
        elif "path" in entry:
            if entry.get("type", "file") != "file":
                continue
            lfs = entry.get("lfs") if isinstance(entry.get("lfs"), dict) else {}
            files.append({"path": str(entry["path"]), "size": int(entry.get("size") or lfs.get("size") or 0),
                          "sha256": lfs.get("oid") or entry.get("sha256") or None})
        else:
            raise ValueError(f"a file entry without a path in the hub's file listing: {entry!r}")
    return sorted(files, key=lambda f: f["path"])


def selected(path: str, include: list[str], exclude: list[str]) -> bool:
    """huggingface_hub's allow/ignore patterns: fnmatch on the path (utils/_paths.py, filter_repo_objects)."""
    if include and not any(fnmatch.fnmatch(path, pattern) for pattern in include):
        return False
    return not any(fnmatch.fnmatch(path, pattern) for pattern in exclude)


def manifest_files(manifest: Any) -> tuple[str | None, dict[str, dict]]:
    """The manifest's commit and its files by path; (None, {}) for no or an unreadable manifest."""
    if not isinstance(manifest, dict) or not isinstance(manifest.get("files"), list):
        return None, {}
    files = {f["path"]: f for f in manifest["files"] if isinstance(f, dict) and "path" in f}
    return manifest.get("commit"), files


def disk_files(found: Any, local_dir: str) -> dict[str, dict]:
    """ansible.builtin.find's files -> {path relative to local_dir: {"size", "mtime"}}."""
    prefix = local_dir.rstrip("/") + "/"
    result = {}
    for item in found or []:
        path = str(item.get("path", ""))
        if path.startswith(prefix):
            result[path[len(prefix):]] = {"size": int(item.get("size", -1)), "mtime": float(item.get("mtime", 0))}
    return result


def file_action(entry: dict, commit: str, manifest_commit: str | None, recorded: dict | None,
                on_disk: dict | None) -> str:
    """keep (verified and untouched since), fetch (not there or another version), repair (changed on disk)."""
    if recorded is None:
        return "repair" if on_disk else "fetch"
    same_version = recorded.get("size") == entry["size"] and (
        (entry["sha256"] is not None and recorded.get("sha256") == entry["sha256"])
        or (entry["sha256"] is None and manifest_commit == commit)
    )
    if not same_version:
        return "fetch"
    if on_disk is None:
        return "fetch"
    untouched = on_disk["size"] == recorded.get("size") and abs(
        on_disk["mtime"] - float(recorded.get("mtime", -1))) <= MTIME_TOLERANCE
    return "keep" if untouched else "repair"


def plan(listing: Any, commit: str, box: dict | None = None) -> dict:
    """The download plan of one box: every selected file with its action, the totals and the disk verdict.

    box: manifest (parsed), found (ansible.builtin.find's files), local_dir, include, exclude,
    free_bytes (None: not checked), margin_bytes.
    """
    box = box or {}
    manifest_commit, recorded = manifest_files(box.get("manifest"))
    present = disk_files(box.get("found"), str(box.get("local_dir") or ""))
    include, exclude = list(box.get("include") or []), list(box.get("exclude") or [])
    free = box.get("free_bytes")
    free_bytes = None if free in (None, "") else int(free)
    margin_bytes = int(box.get("margin_bytes") or 0)
    files = []
    for entry in normalize_listing(listing):
        if entry["path"] in OWN_FILES or not selected(entry["path"], include, exclude):
            continue
        action = file_action(entry, commit, manifest_commit, recorded.get(entry["path"]), present.get(entry["path"]))
        files.append({**entry, "action": action})
    to_fetch = [f for f in files if f["action"] != "keep"]
    bytes_to_fetch = sum(f["size"] for f in to_fetch)
    need = bytes_to_fetch + (int(margin_bytes) if to_fetch else 0)
    enough = free_bytes is None or not to_fetch or int(free_bytes) >= need
    return {
        "commit": commit,
        "files": files,
        "files_total": len(files),
        "files_to_fetch": len(to_fetch),
        "bytes_total": sum(f["size"] for f in files),
        "bytes_to_fetch": bytes_to_fetch,
        "free_bytes": free_bytes,
        "needed_bytes": need,
        "enough_disk": enough,
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
        text += f", {repairs} of them changed on disk since verified"
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
    return (f"model: {host}: {phase} {human_bytes(done)} / {human_bytes(total)} ({percent}), "
            f"{speed}, ETA {human_seconds(state.get('eta_seconds'))}, "
            f"files {state.get('files_done', '?')}/{state.get('files_total', '?')}, {human_seconds(elapsed)} elapsed")
