# Copyright (c) sparkfleet.serving contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The model role's download plan: listings of both hubs, the manifest, the files on disk."""

from __future__ import annotations

import json

import pytest

from ansible_collections.sparkfleet.serving.plugins.module_utils.model_plan import (
    covers,
    human_bytes,
    human_seconds,
    normalize_listing,
    plan,
    progress_line,
    selected,
)

SHA_A, SHA_B = "a" * 64, "b" * 64
HF_TREE = [
    {"type": "file", "path": "config.json", "size": 243, "oid": "1" * 40},
    {"type": "directory", "path": "sub", "size": 0, "oid": "2" * 40},
    {"type": "file", "path": "model-00001-of-00002.safetensors", "size": 1000, "oid": "3" * 40,
     "lfs": {"oid": SHA_A, "size": 1000, "pointerSize": 130}},
    {"type": "file", "path": "model-00002-of-00002.safetensors", "size": 2000, "oid": "4" * 40,
     "lfs": {"oid": SHA_B, "size": 2000, "pointerSize": 130}},
]
MS_FILES = {"Code": 200, "Data": {"Files": [
    {"Path": "config.json", "Type": "blob", "Size": 243, "Sha256": "c" * 64, "Revision": "9" * 40},
    {"Path": "sub", "Type": "tree", "Size": 0},
    {"Path": "model-00001-of-00002.safetensors", "Type": "blob", "Size": 1000, "Sha256": SHA_A},
]}}
COMMIT = "f" * 40
DIR = "/srv/models/m"


def manifest(commit: str = COMMIT) -> dict:
    return {"commit": commit, "files": [
        {"path": "config.json", "size": 243, "sha256": "c" * 64, "mtime": 10.5},
        {"path": "model-00001-of-00002.safetensors", "size": 1000, "sha256": SHA_A, "mtime": 11.25},
        {"path": "model-00002-of-00002.safetensors", "size": 2000, "sha256": SHA_B, "mtime": 12.0},
    ]}


def found(**changes: tuple[int, float]) -> list[dict]:
    files = {"config.json": (243, 10.5), "model-00001-of-00002.safetensors": (1000, 11.25),
             "model-00002-of-00002.safetensors": (2000, 12.0), "sparkfleet-manifest.json": (900, 13.0)}
    files.update(changes)
    return [{"path": f"{DIR}/{p}", "size": s, "mtime": m} for p, (s, m) in files.items()]


def actions(result: dict) -> dict:
    return {f["path"]: f["action"] for f in result["files"]}


def test_both_listings_normalize_to_files_with_their_sha256():
    hf = normalize_listing(HF_TREE)
    assert [(f["path"], f["size"], f["sha256"], f["git_sha1"]) for f in hf] == [
        ("config.json", 243, None, "1" * 40), ("model-00001-of-00002.safetensors", 1000, SHA_A, None),
        ("model-00002-of-00002.safetensors", 2000, SHA_B, None)]
    # The same files as model info with blobs=true lists them (one request: commit and files).
    siblings = {"sha": COMMIT, "siblings": [
        {"rfilename": "config.json", "size": 243, "blobId": "1" * 40},
        {"rfilename": "model-00001-of-00002.safetensors", "size": 1000, "blobId": "3" * 40,
         "lfs": {"sha256": SHA_A, "size": 1000}},
        {"rfilename": "model-00002-of-00002.safetensors", "size": 2000, "blobId": "4" * 40,
         "lfs": {"sha256": SHA_B, "size": 2000}}]}
    assert normalize_listing(siblings) == hf
    ms = normalize_listing(MS_FILES)
    expected = [("config.json", "c" * 64), ("model-00001-of-00002.safetensors", SHA_A)]
    assert [(f["path"], f["sha256"]) for f in ms] == expected


@pytest.mark.parametrize("listing", [{"Code": 404}, "text", [{"size": 1}], [1]])
def test_a_listing_of_neither_hub_is_refused(listing: object):
    with pytest.raises(ValueError):
        normalize_listing(listing)


def test_a_fresh_box_fetches_everything_and_needs_the_margin():
    result = plan(HF_TREE, COMMIT, {"local_dir": DIR, "free_bytes": 10_000, "margin_bytes": 500})
    assert set(actions(result).values()) == {"fetch"}
    assert result["bytes_to_fetch"] == result["bytes_total"] == 3243
    assert result["needed_bytes"] == 3743 and result["enough_disk"] is True
    assert result["summary"].startswith("would download 3 of 3 files")
    short = plan(HF_TREE, COMMIT, {"local_dir": DIR, "free_bytes": 3742, "margin_bytes": 500})
    assert short["enough_disk"] is False


def test_a_complete_copy_keeps_everything_and_needs_no_disk():
    result = plan(HF_TREE, COMMIT, {"manifest": manifest(), "found": found(), "local_dir": DIR, "free_bytes": 0})
    assert set(actions(result).values()) == {"keep"}
    assert result["complete"] and result["enough_disk"] and result["bytes_to_fetch"] == 0


def test_a_file_changed_on_disk_is_repaired_and_a_missing_one_fetched():
    box = {"manifest": manifest(), "local_dir": DIR,
           "found": [f for f in found(**{"model-00001-of-00002.safetensors": (1000, 99.0)})
                     if not f["path"].endswith("model-00002-of-00002.safetensors")]}
    got = actions(plan(HF_TREE, COMMIT, box))
    assert got == {"config.json": "keep", "model-00001-of-00002.safetensors": "repair",
                   "model-00002-of-00002.safetensors": "fetch"}


def test_a_new_commit_fetches_changed_weights_and_small_files_without_a_sha256():
    tree = [dict(e) for e in HF_TREE]
    tree[3] = {**tree[3], "lfs": {"oid": "d" * 64, "size": 2000}}
    got = actions(plan(tree, "e" * 40, {"manifest": manifest(), "found": found(), "local_dir": DIR}))
    assert got == {"config.json": "fetch", "model-00001-of-00002.safetensors": "keep",
                   "model-00002-of-00002.safetensors": "fetch"}


def test_a_moved_branch_keeps_small_files_by_their_git_blob_id():
    """The manifest keeps each small file's git blob id: a new commit that did not change config.json
    keeps it, one that did fetches it; the program decides with the same function."""
    recorded = manifest()
    recorded["files"][0]["git_sha1"] = "1" * 40
    tree = [dict(e) for e in HF_TREE]
    tree[3] = {**tree[3], "lfs": {"oid": "d" * 64, "size": 2000}}
    box = {"manifest": recorded, "found": found(), "local_dir": DIR}
    assert actions(plan(tree, "e" * 40, box)) == {
        "config.json": "keep", "model-00001-of-00002.safetensors": "keep", "model-00002-of-00002.safetensors": "fetch"}
    tree[0] = {**tree[0], "oid": "5" * 40}
    assert actions(plan(tree, "e" * 40, box))["config.json"] == "fetch"


def test_a_folder_pattern_selects_the_folder_as_huggingface_hub_reads_it():
    """`subdir/` means `subdir/*` (huggingface_hub utils/_paths.py:180-184), in the check as in the program."""
    tree = [*HF_TREE, {"type": "file", "path": "original/consolidated.pth", "size": 7, "oid": "6" * 40}]
    assert sorted(actions(plan(tree, COMMIT, {"include": ["original/"]}))) == ["original/consolidated.pth"]
    assert "original/consolidated.pth" not in actions(plan(tree, COMMIT, {"exclude": ["original/"]}))
    assert selected("original/consolidated.pth", ["original/"], []) is True
    assert selected("SHA256SUMS", [], []) is False


def test_the_journal_of_an_interrupted_run_counts_as_verified():
    """Files a killed run verified and placed are in its journal, not yet in a manifest: kept, as the program does."""
    journal = json.dumps({"path": "model-00002-of-00002.safetensors", "size": 2000, "sha256": SHA_B, "mtime": 12.0,
                          "commit": COMMIT}) + "\n" + '{"path": "cut'
    box = {"journal": journal, "found": found(), "local_dir": DIR}
    got = actions(plan(HF_TREE, COMMIT, box))
    assert got["model-00002-of-00002.safetensors"] == "keep"
    assert got["model-00001-of-00002.safetensors"] == "repair"  # on disk, never verified: read first by the run


def test_published_sizes():
    result = plan(HF_TREE, COMMIT, {})
    assert result["weights_bytes"] == 3000 and result["bytes_total"] == 3243


def test_include_and_exclude_select_by_glob_and_the_role_files_never_count():
    tree = [*HF_TREE, {"type": "file", "path": "SHA256SUMS", "size": 5}]
    result = plan(tree, COMMIT, {"include": ["*.safetensors", "*.json"], "exclude": ["model-00002-*"]})
    assert sorted(actions(result)) == ["config.json", "model-00001-of-00002.safetensors"]


def test_the_manifest_can_be_the_listing_of_a_pinned_commit():
    data = manifest()
    result = plan(data["files"], COMMIT, {"manifest": data, "found": found(), "local_dir": DIR})
    assert result["complete"]


def test_progress_line_and_units():
    state = {"phase": "downloading", "bytes_done": 512 * 1024**2, "bytes_total": 1024**3, "rate_bps": 50 * 1024**2,
             "eta_seconds": 10.4, "files_done": 3, "files_total": 9}
    line = progress_line("spark-1", state, 61)
    assert line == ("model: spark-1: downloading 512.0 MiB / 1.0 GiB (50.0%), 50.0 MiB/s, ETA 10s, "
                    "files 3/9, 1m01s elapsed")
    assert progress_line("s", {}, 0).startswith("model: s: starting ? / ? (?%), ?/s, ETA ?")
    retried = {**state, "retries": 2, "last_retry": {"what": "GET config.json", "why": "HTTP 503"}}
    assert progress_line("spark-1", retried, 61).endswith(", 2 retried (GET config.json: HTTP 503)")
    assert human_bytes(1023) == "1023 B" and human_seconds(3725) == "1h02m05s" and human_seconds(None) == "?"


@pytest.mark.parametrize(
    ("written_for", "include", "exclude", "expected"),
    [
        ({"include": [], "exclude": []}, ["*.json"], [], True),  # every file: any selection
        ({"include": ["*.json"], "exclude": []}, ["*.json"], [], True),
        ({"include": ["*.json"], "exclude": []}, [], [], False),  # a part cannot stand for the whole
        ({"include": ["*.json"], "exclude": []}, ["*.json"], ["a.json"], False),
        ({}, [], [], False),  # an earlier release's manifest: its selection is unknown
    ],
)
def test_a_manifest_covers_only_the_selection_it_was_written_for(written_for, include, exclude, expected):
    assert covers({"commit": "c" * 40, "files": [], **written_for}, include, exclude) is expected
