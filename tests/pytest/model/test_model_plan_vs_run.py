"""Check mode's plan equals what the run then fetches: the planner fed as the check tasks feed it (the
hub's answers to the requests roles/model/tasks/listing-huggingface.yml makes, the box's manifest,
journal and files as sparkfleet.serving.file_info reads them), then the program run on the same box,
over a table of repository changes."""

from __future__ import annotations

import json
import os
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from model_fetch_helpers import MODEL, Hub, Runner, copy_model, fetch_module

planner = fetch_module.planner


def api(hub: Hub, path: str) -> Any:
    with urllib.request.urlopen(f"{hub.url}{path}", timeout=10) as response:
        return json.loads(response.read())


def box_files(local_dir: Path) -> list[dict[str, Any]]:
    """sparkfleet.serving.file_info's tree: every regular file, hidden ones too, links not followed."""
    found = []
    for root, _dirs, names in os.walk(local_dir):
        for name in names:
            path = Path(root) / name
            if path.is_file() and not path.is_symlink():
                stat = path.stat()
                found.append({"path": str(path), "size": stat.st_size, "mtime": stat.st_mtime})
    return found


def read(path: Path) -> str | None:
    return path.read_text() if path.is_file() else None


def check_plan(hub: Hub, local_dir: Path, revision: str, include: list[str], exclude: list[str]) -> dict[str, Any]:
    """What the check tasks compute (tasks/check.yml, listing-huggingface.yml, vars/main.yml)."""
    manifest = json.loads(read(local_dir / planner.MANIFEST) or "{}")
    commit = api(hub, f"/api/models/{MODEL}/revision/{revision}")["sha"]
    # __model_tree_in_manifest: the manifest already lists every file of this commit (written with no
    # include/exclude, or with these; the model_manifest_covers filter): the tree request is skipped.
    covers = planner.covers(manifest, include, exclude)
    in_manifest = manifest.get("commit") == commit and manifest.get("repo") == MODEL and covers
    listing = manifest["files"] if in_manifest else api(hub, f"/api/models/{MODEL}/tree/{commit}?recursive=true")
    box = {
        "manifest": manifest,
        "journal": read(local_dir / planner.STAGING / planner.JOURNAL),
        "found": box_files(local_dir) if local_dir.is_dir() else [],
        "local_dir": str(local_dir),
        "include": include,
        "exclude": exclude,
    }
    return planner.plan(listing, commit, box)


def selection(include: list[str], exclude: list[str]) -> list[str]:
    return [f"--include={p}" for p in include] + [f"--exclude={p}" for p in exclude]


# start: a complete copy of that revision ("" for an empty box); then the revision and selection asked for.
CASES = {
    "fresh box": ("", "main", [], []),
    "branch moved (small files and a shard changed)": ("v1", "main", [], []),
    "branch moved, json only": ("v1", "main", ["*.json"], []),
    "a file added in a folder, a file removed": ("main", "dev", [], []),
    "folder/ include of an added folder": ("main", "dev", ["extra/"], []),
    "branch moved twice, weights excluded": ("v1", "dev", [], ["*.safetensors"]),
    "narrower include on a complete copy": ("main", "main", ["model-0000[12]-*", "*.json"], []),
    "wider include after a narrower run": ("main:*.json", "main", [], []),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_plan_is_what_the_run_fetches(case: str, run: Runner, hub: Hub, copies: dict[str, Path]):
    start, revision, include, exclude = CASES[case]
    if start.startswith("main:"):  # a run with a narrower include wrote the manifest
        first = run(f"--include={start.split(':', 1)[1]}")
        assert first.rc == 0, first.stderr
    elif start:
        copy_model(copies[start], run.local_dir)
    planned = check_plan(hub, run.local_dir, revision, include, exclude)
    result = run(*selection(include, exclude), revision=revision)
    assert result.rc == 0, result.stderr
    to_fetch = sorted(f["path"] for f in planned["files"] if f["action"] != "keep")
    assert to_fetch == sorted(result.state["fetched"] + result.state["repaired"]), planned["summary"]
    assert planned["files_total"] == result.state["files_total"]
    assert planned["bytes_to_fetch"] == result.state["bytes_downloaded"]
    assert planned["commit"] == result.state["commit"]
    # And the next check, on what the run left, plans nothing.
    assert check_plan(hub, run.local_dir, revision, include, exclude)["complete"]


def test_a_moved_branch_keeps_the_small_files_it_did_not_change(run: Runner, hub: Hub, copies: dict[str, Path]):
    copy_model(copies["v1"], run.local_dir)
    planned = check_plan(hub, run.local_dir, "main", [], [])
    # v1 -> main changes config.json and the last shard: the other small files are kept by git blob id.
    assert planned["files_to_fetch"] == 2, planned["summary"]
    assert planned["summary"].startswith(f"would download 2 of {len(hub.files())} files")
